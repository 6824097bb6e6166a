"""Fine-tuning stays within the position ids that pretraining trained: a layout past them would put
targets and [P]s on position embeddings that never received a gradient. A pretraining checkpoint
records its positions (core/objectives.py Objective.positions); fit_lengths reads them."""

from .architectures import ARCHS, arch_of
from .errors import UserError
from .objectives import objective_of
from .t5 import corrupted_lengths

DEFAULT_MAX_SRC = 80  # the source length of the README's measured recipe


def positions_of(state):
    """The trained positions of a pretraining checkpoint; one written before they were recorded
    gets them from its --seq-len (T5 then used windows of seq_len - 3). MLAE's come from its
    --seq-len always (Objective.stale_positions): its older records counted one position more than
    it trains."""
    seq_len = int(state["args"]["seq_len"]) if "args" in state else None
    obj = objective_of(state.get("kind", ""))
    if obj is not None and obj.stale_positions and seq_len is not None:
        return obj.positions(seq_len)
    if "positions" in state:
        return dict(state["positions"])
    if ARCHS[arch_of(state, "")].positions_apart:
        encoder, decoder = corrupted_lengths(seq_len - 3)
        return dict(encoder=encoder, decoder=decoder)
    return dict(total=seq_len)


def fit_lengths(arch, positions, max_src, max_tgt):
    """max_src for fine-tuning: the given one, or (None) DEFAULT_MAX_SRC cut to what the
    checkpoint trained. A layout past the trained positions would put targets and [P]s on
    position embeddings that never received a gradient: refused, with the numbers and the fix."""
    apart = ARCHS[arch].positions_apart
    if apart:
        src_room, tgt_room = positions["encoder"], positions["decoder"]
        what = f"its encoder trained positions 0..{src_room - 1}, its decoder 0..{tgt_room - 1}"
        # a NAR target has no [EOS]: max_tgt - 1 tokens (core/nar.nar_batch)
        tgt_room += ARCHS[arch].nar_decoder
    else:
        src_room = positions["total"] - max_tgt
        what = f"it trained positions 0..{positions['total'] - 1} for source and target together"
    if max_src is None:
        max_src = min(DEFAULT_MAX_SRC, src_room)
        if max_src < 8:
            raise UserError(
                f"--max-tgt {max_tgt} leaves no room for a source in the checkpoint's positions "
                f"({what}): lower --max-tgt"
            )
    if apart and (max_src > src_room or max_tgt > tgt_room):
        raise UserError(
            f"--max-src {max_src} / --max-tgt {max_tgt} exceed the positions the checkpoint was "
            f"pretrained on ({what}): use --max-src <= {src_room} and --max-tgt <= {tgt_room}, "
            f"or pretrain with a longer --seq-len"
        )
    if not apart and max_src + max_tgt > positions["total"]:
        raise UserError(
            f"--max-src {max_src} + --max-tgt {max_tgt} = {max_src + max_tgt} exceed the positions the "
            f"checkpoint was pretrained on ({what}): use --max-src <= {src_room} (or a smaller "
            f"--max-tgt), or pretrain with --seq-len {max_src + max_tgt}"
        )
    return max_src
