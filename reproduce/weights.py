"""The pretrainings whose weights the repository keeps (plan.KEEP_WEIGHTS): those whose runs take
more than the sitting that made them, on a machine whose OUT does not outlive the session.

Such a pretraining's last.pt is rounded through bf16 once it has finished and before any run
reads it (round_in_place), so that every fine-tuning built on it, in the sitting that made it or
in a later one, starts from the same weights: the ones the archive keeps, packed (bf16,
xz-compressed, weights only: core/checkpoint.py) in DEST/weights/NAME.pt.xz. Restored into OUT,
the packed copy is that pretraining's last.pt again, and the runner counts it as done.
"""

import json
import os

from core import checkpoint
from reproduce.plan import KEEP_WEIGHTS

WEIGHTS = "weights"  # the archive's folder of packed pretrainings


def packed_path(dest, name):
    """Where the archive DEST keeps pretraining NAME's packed weights."""
    return os.path.join(dest, WEIGHTS, name + checkpoint.PACKED)


def _state(path):
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def is_rounded(path):
    """Whether the checkpoint at PATH holds weights already rounded through bf16."""
    return "packed" in _state(path)


def round_in_place(out, name):
    """Round OUT/NAME/last.pt's weights through bf16 where NAME's weights are kept and it is not
    rounded yet; True where it rewrote the file (its optimizer, data and RNG state stay)."""
    path = os.path.join(out, name, "last.pt")
    if name not in KEEP_WEIGHTS or not os.path.exists(path):
        return False
    state = _state(path)
    if "packed" in state:
        return False
    checkpoint.save(path, checkpoint.rounded(state))
    return True


def held_out(out, name):
    """The last held-out record of pretraining NAME's log.jsonl ({"step", "valid_...", ...}), or {}."""
    last = {}
    try:
        with open(os.path.join(out, name, "log.jsonl")) as f:
            for line in f:
                rec = json.loads(line) if line.strip() else {}
                if "unigram_entropy" in rec:
                    last = rec
    except (OSError, ValueError):
        return {}
    return last


def pack_bytes(out, name):
    """The packed copy of OUT/NAME/last.pt (rounded first), with its last held-out record."""
    round_in_place(out, name)
    state = _state(os.path.join(out, name, "last.pt"))
    return checkpoint.packed_bytes(checkpoint.pack(state, held_out=held_out(out, name)))


def unpack_into(src, out, name):
    """Write the archive SRC's packed NAME as OUT/NAME/last.pt (rounded weights in float32, as
    checkpoint.load reads them); False where OUT has a last.pt of its own or SRC none for NAME."""
    path, packed = os.path.join(out, name, "last.pt"), packed_path(src, name)
    if os.path.exists(path) or not os.path.exists(packed):
        return False
    state = checkpoint.load(packed)
    state.pop("format", None)
    checkpoint.save(path, state)
    return True
