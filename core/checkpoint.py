"""Checkpoints: written atomically from the raw module, read with weights_only=True.

A checkpoint is a dict: format, kind (what produced it, e.g. "pretrain/pmlm"), model (state
dict), model_config, args, step, data (loader state), optimizer, rng, tokenizer (uint8 tensor).
Every script reads one through load(), which checks the keys its callers use before any work,
and puts weights into a model within weights_of(), which names a mismatch instead of a
traceback. eval.py reads a fine-tuned one once, as a Finetuned (read_finetuned()).

A packed checkpoint (PACKED, `*.pt.xz`) is what the repository keeps of a run: its weights in
bf16, without optimizer, data or RNG state, xz-compressed (pack, save_packed). load() reads one as
any other, its weights back in float32: the rounded copy that every run built on it starts from.
"""

import contextlib
import io
import json
import lzma
import os
import pickle
import sys
import zipfile
from typing import NamedTuple

import torch

from .architectures import arch_of
from .config import ModelConfig
from .errors import UserError
from .objectives import objective_of
from .tasks import TASKS, Labels

FORMAT = "textgen-ckpt-1"


# the flags that name an input file: a resumed run may name one elsewhere (a moved folder) if its
# content is the same (digests, recorded in every checkpoint)
PATH_FLAGS = ("data", "valid_data", "train_data", "init", "tokenizer")
_DIGESTS = {}  # (path, size, mtime_ns) -> sha1: a file is hashed once per version, not at every save


def digest(path):
    """The SHA-1 of a file's bytes, or None for a path that is not a file."""
    if not isinstance(path, str) or not os.path.isfile(path):
        return None
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        import hashlib

        h = hashlib.sha1()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def digests_of(args):
    """{flag: digest} of the input files a run's args name, taken when it starts (train.py and
    finetune.py keep them in every checkpoint of the run)."""
    return {k: d for k in PATH_FLAGS if (d := digest(args.get(k))) is not None}


def save(path, state, config_json=None):
    """torch.save to a temporary file, then rename: a crash never leaves half a checkpoint.
    config_json (a dict) is also written next to it as config.json."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(dict(state, format=FORMAT), tmp)
    os.replace(tmp, path)
    # a save killed half-way (by a second Ctrl-C, say) leaves its .tmpPID: gone once a save succeeds
    import glob

    for stale in glob.glob(glob.escape(path) + ".tmp*"):
        with contextlib.suppress(OSError):
            os.remove(stale)
    if config_json is not None:
        cfg = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        with open(cfg + ".tmp", "w") as f:
            json.dump(config_json, f, indent=2)
        os.replace(cfg + ".tmp", cfg)


PACKED = ".pt.xz"
PACK_DTYPE = torch.bfloat16
UNPACKED = ("data", "optimizer", "rng", "digests")  # what a packed checkpoint leaves out


def pack(state, **extra):
    """A checkpoint's state as the repository keeps it: float weights in bf16, no optimizer, data or
    RNG state; EXTRA (the held-out loss, say) recorded beside them."""
    kept = {k: v for k, v in state.items() if k not in UNPACKED}
    kept["model"] = {k: v.to(PACK_DTYPE) if v.is_floating_point() else v for k, v in state["model"].items()}
    return dict(kept, packed=dict(dtype=str(PACK_DTYPE).replace("torch.", ""), **extra))


def unpack(state):
    """A packed checkpoint's state with its weights back in float32 (the values bf16 rounded them to)."""
    model = {k: v.float() if v.dtype == PACK_DTYPE else v for k, v in state["model"].items()}
    return dict(state, model=model)


def rounded(state):
    """A checkpoint's state with its float weights rounded through bf16 (pack, then unpack), the rest
    as it was: what a run that starts from the packed copy reads."""
    packed = pack(state)
    return dict(state, model=unpack(packed)["model"], packed=packed["packed"])


def packed_bytes(state):
    """The bytes of save_packed: torch.save's, xz-compressed; the same state gives the same bytes."""
    buf = io.BytesIO()
    torch.save(dict(sorted(dict(state, format=FORMAT).items())), buf)  # keys in one order, however it was built
    return lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME)


def save_packed(path, state):
    """Write pack(state)'s bytes (a state packed already is written as it is) atomically to PATH."""
    data = packed_bytes(state if "packed" in state else pack(state))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(f"{path}.tmp{os.getpid()}", "wb") as f:
        f.write(data)
    os.replace(f"{path}.tmp{os.getpid()}", path)
    return len(data)


def _read(path):
    """torch.load of a checkpoint file, a packed one decompressed first."""
    if not path.endswith(PACKED):
        return torch.load(path, map_location="cpu", weights_only=True)
    with open(path, "rb") as f:
        data = lzma.decompress(f.read())
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    return unpack(state) if isinstance(state, dict) and isinstance(state.get("model"), dict) else state


def load(path, kinds=None, need=()):
    """Read and validate a checkpoint; `kinds` (a tuple of prefixes) is what the caller can use,
    `need` the keys it reads beyond KEYS (RESUME_KEYS when resuming)."""
    if os.path.isdir(path):
        path = os.path.join(path, "last.pt")
    if not os.path.exists(path):
        raise UserError(f"checkpoint not found: {path}")
    try:
        state = _read(path)
    except (
        RuntimeError,
        EOFError,
        OSError,
        ValueError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
        lzma.LZMAError,
    ) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path} is not a readable checkpoint ({first})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path} is not a checkpoint of this project (no '{FORMAT}' tag)")
    if kinds is not None and not str(state.get("kind", "")).startswith(tuple(kinds)):
        raise UserError(f"{path} is a {state.get('kind')!r} checkpoint; this needs one of {list(kinds)}")
    check_keys(path, state, need)
    return state


def upgrade_args(state):
    """A checkpoint's args as its run would read them today: flags added since it was written get the
    value the run actually trained with. Every such shim of a resumed run is here."""
    args, kind = dict(state.get("args") or {}), str(state.get("kind", ""))
    obj = objective_of(kind)
    if kind.startswith("pretrain/"):
        if obj is not None and "cross_rel_pos" in obj.flags and isinstance(state.get("model"), dict):
            args["cross_rel_pos"] = "cross_rel_table" in state["model"]  # older runs had no table
        # written before --keep (as it trained: Objective.legacy) and --length-grad (the length loss
        # reached the encoder)
        for k, v in dict(dict(keep=0.0, length_grad=True), **(obj.legacy if obj is not None else {})).items():
            args.setdefault(k, v)
    if kind.startswith("finetune/"):
        args = upgrade_finetune_args(args)
    return args


def upgrade_finetune_args(args):
    """A fine-tuning's args written before --warmup-epochs, --mask-epochs and --train-share: its warmup
    was a share of its --epochs' steps, its masking schedule spanned them (the same in epochs), and it
    read the whole training split."""
    args = dict(args)
    if "warmup_frac" in args and "warmup_epochs" not in args and "epochs" in args:
        args["warmup_epochs"] = round(args.pop("warmup_frac") * args["epochs"], 9)
    if "mask_epochs" not in args and "epochs" in args:
        args["mask_epochs"] = args["epochs"]
    args.setdefault("train_share", 1.0)  # written before --train-share: every training example
    return args


# the keys every checkpoint must hold, and their types; `need` in load() adds those of a resume
KEYS = dict(kind=str, model=dict, model_config=dict, args=dict, tokenizer=torch.Tensor)
RESUME_KEYS = dict(step=int, optimizer=dict, rng=dict)


def check_keys(path, state, need=()):
    """Every key a script will read, present and of its type: a missing or malformed one is named
    here, not met as a KeyError (or worse) after minutes of work."""
    want = dict(KEYS, **{k: RESUME_KEYS.get(k, object) for k in need})
    kind = str(state.get("kind", ""))
    if kind.startswith("finetune/"):
        want.update(arch=str)
    for key, typ in want.items():
        if key in UNPACKED and "packed" in state and key not in state:
            raise UserError(
                f"{path} is a packed checkpoint (weights only, {state['packed'].get('dtype')}): it "
                f"starts a fine-tuning or is evaluated, but a run cannot resume from it"
            )
        if key not in state or state[key] is None:
            raise UserError(
                f"{path} has no {key!r} (a checkpoint this project writes always has one): it is damaged or was edited"
            )
        if not isinstance(state[key], typ):
            raise UserError(f"{path}: its {key!r} is a {type(state[key]).__name__}, not a {typ.__name__}")
    if state["tokenizer"].dtype != torch.uint8:
        raise UserError(f"{path}: its 'tokenizer' is not a serialized SentencePiece model (uint8 bytes)")
    if not all(isinstance(v, torch.Tensor) for v in state["model"].values()):
        raise UserError(f"{path}: its 'model' is not a state dict of tensors")
    try:
        ModelConfig.from_dict(state["model_config"])
    except (TypeError, ValueError) as e:
        raise UserError(f"{path}: its 'model_config' is not a model configuration ({e})") from None
    if kind.startswith("finetune/"):
        task = kind.split("/", 1)[1]
        if task not in TASKS:
            raise UserError(
                f"{path} is a fine-tuned checkpoint of task {task!r}, which this version does not "
                f"know (known: {', '.join(TASKS)})"
            )
        if not isinstance(state["args"].get("max_src"), int):
            raise UserError(f"{path}: its 'args' has no --max-src (a fine-tuning always records one)")
        if task == "classify" and not isinstance(state.get("labels"), list):
            raise UserError(f"{path}: a classifier checkpoint with no 'labels' list")


@contextlib.contextmanager
def weights_of(path):
    """Around the load_state_dict calls that put a checkpoint's weights into a model built from its
    model_config: a mismatch (a missing weight, a shape that differs) is the checkpoint's fault,
    said in one line."""
    try:
        yield
    except (RuntimeError, KeyError, ValueError, AssertionError) as e:
        lines = [l.strip() for l in str(e).strip().splitlines() if l.strip()]
        detail = "; ".join(lines[1:3] or lines[:1])[:300]
        raise UserError(f"{path}: its weights do not fit the model its 'model_config' describes ({detail})") from None


# -----------------------------------------------------------------------------
# fine-tuned checkpoints, as eval.py reads them


def pick_checkpoints(paths):
    """The checkpoint files: a directory stands for every best.pt under it (one per fine-tuned run)."""
    out = []
    for path in paths:
        if not os.path.exists(path):
            raise UserError(
                f"checkpoint not found: {path}"
                + (
                    " (finetune.py writes its runs under checkpoints/: fine-tune a model first)"
                    if path == "checkpoints"
                    else ""
                )
            )
        if not os.path.isdir(path):
            out.append(path)
            continue
        found = sorted(os.path.join(d, "best.pt") for d, _, files in os.walk(path) if "best.pt" in files)
        if not found:
            raise UserError(f"{path} holds no fine-tuned run (no best.pt under it)")
        print(f"{path}: {len(found)} fine-tuned checkpoint(s): {', '.join(found)}", file=sys.stderr)
        out += found
    return out


class Finetuned(NamedTuple):
    """A fine-tuned checkpoint, read and checked once: what each stage of an evaluation reads of it."""

    path: str
    state: dict  # the checkpoint's dict
    task: str  # "summarize" or "classify"
    arch: str  # its record in core/architectures.py
    cfg: ModelConfig
    labels: Labels = None  # a classifier's


def read_finetuned(path):
    state = load(path, kinds=("finetune/",))
    task = state["kind"].split("/")[1]
    cfg = ModelConfig.from_dict(state["model_config"])
    return Finetuned(
        path, state, task, arch_of(state, path), cfg, Labels(state["labels"]) if task == "classify" else None
    )


def read_all_finetuned(paths):
    """The fine-tuned checkpoints the paths name (pick_checkpoints), each read and checked."""
    return [read_finetuned(path) for path in pick_checkpoints(paths)]
