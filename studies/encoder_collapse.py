"""Does a span-corruption checkpoint's encoder still carry its source? For each T5 or T5-NAR
pretraining checkpoint, on held-out windows of the embedded corpus:

  * the mean cosine similarity between the encoder's output vectors (all valid tokens of the
    batch, every pair): near 1 when the encoder maps every token to one direction;
  * T5-NAR only: its held-out text loss with each window's own source, and with the source of the
    next window (anchors clipped to that source): equal when the decoder ignores the source.

    OMP_NUM_THREADS=1 python -m studies.encoder_collapse checkpoints/reproduce-cpu/pre-t5/last.pt \\
        checkpoints/reproduce-cpu/pre-t5-nar/last.pt

The README's T5-NAR notes quote it (a T5-NAR whose length loss reached its encoder: cosine 0.97
and the same loss for any source).
"""

import argparse
import os

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from core.batch import Batch  # noqa: E402
from core import checkpoint  # noqa: E402
from core.config import ModelConfig  # noqa: E402
from core.data import TokenStream, pretraining_texts  # noqa: E402
from core.objectives import OBJECTIVES  # noqa: E402
from core.model import EncoderDecoder, positions  # noqa: E402
from core.mlae.nar import NARModel, t5_nar_batch, t5_nar_loss_sums  # noqa: E402
from core.tokenizer import Tokenizer  # noqa: E402


@torch.no_grad()
def probe(path, n):
    state = checkpoint.load(path, ("pretrain/t5",), need=("step",))  # pretrain/t5 and pretrain/t5-nar
    kind = state["kind"]
    cfg = ModelConfig.from_dict(state["model_config"])
    nar = kind == "pretrain/t5-nar"
    model = NARModel(cfg, "cross_rel_table" in state["model"]) if nar else EncoderDecoder(cfg)
    model.load_state_dict(state["model"])
    model.eval()
    tok = Tokenizer.from_tensor(state["tokenizer"])
    _, valid_texts = pretraining_texts(None, None, "text")
    stream = TokenStream(
        tok.encode(valid_texts),
        OBJECTIVES["t5-nar"].window(int(state["args"]["seq_len"])),
        int(state["args"]["seed"]) + 1,
        sep=tok.eos_id,
    )
    b = t5_nar_batch(stream, list(range(n)), tok)  # T5's sources, T5-NAR's targets
    memory = model.encode(b.src, positions(b.src), b.src_valid)[b.src_valid]
    unit = F.normalize(memory.float(), dim=-1)
    line = f"{path}: {kind}, step {state['step']}: mean cosine between encoder outputs {(unit @ unit.T).mean():.3f}"
    if nar:
        own = t5_nar_loss_sums(model, b)
        other = dict(b.tensors)
        nxt = torch.roll(torch.arange(n), -1)
        other.update(src=b.src[nxt], src_valid=b.src_valid[nxt])
        other["anchor"] = b.anchor.clamp(max=other["src_valid"].sum(1, keepdim=True) - 1)
        swapped = t5_nar_loss_sums(model, Batch(b.norm, b.n_tokens, **other))
        per = lambda s: (s["text_loss"] / s["text_n"]).item()
        line += f"; text loss {per(own):.4f} with its own source, {per(swapped):.4f} with the next window's"
    print(line, flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--windows", type=int, default=32, help="held-out windows (one batch)")
    args = p.parse_args()
    for path in args.checkpoints:
        probe(path, args.windows)


if __name__ == "__main__":
    main()
