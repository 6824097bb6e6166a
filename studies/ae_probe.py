"""The held-out AE loss of PMLM and MLM checkpoints under one corruption, split by what the input
shows at each predicted position. train.py's `valid_ae_loss` is not comparable between runs of
other corruptions: BERT's way (80% [MASK] / 10% random / 10% kept, UniLMv2 4.1, the default)
leaves 10% of the targets in view, which a model learns to copy, and `--keep 0` (90% [MASK] / 10%
random, core/unilm/pmlm.py) leaves none. Here every checkpoint reads the same held-out windows
under each corruption, and the loss is reported over every AE target and over the [MASK]ed,
random and kept ones apart. The AE part alone is fed (losses "ae"): the appended part of a PMLM
batch changes no AE prediction, since context attends to context only.

    OMP_NUM_THREADS=1 python -m studies.ae_probe checkpoints/reproduce-cpu/pre-pmlm/last.pt \\
        checkpoints/reproduce-cpu/pre-mlm/last.pt
"""

import argparse
import os

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from core import checkpoint  # noqa: E402
from core.errors import main_guard  # noqa: E402
from core.config import ModelConfig  # noqa: E402
from core.data import TokenStream, pretraining_texts  # noqa: E402
from core.objectives import OBJECTIVES  # noqa: E402
from core.model import UnifiedLM  # noqa: E402
from core.unilm.pmlm import IGNORE, pmlm_batch  # noqa: E402
from core.tokenizer import Tokenizer  # noqa: E402
from kernels import PSEUDO  # noqa: E402

CORRUPTIONS = {"80/10/10": 0.1, "90/10 (--keep 0)": 0.0}  # the share of masked tokens kept


@torch.no_grad()
def probe(path, n, batch):
    """{corruption: {part: (loss, count)}} for one checkpoint, and its label."""
    state = checkpoint.load(path, ("pretrain/pmlm", "pretrain/mlm"), need=("step",))  # PMLM's ablations too
    model = UnifiedLM(ModelConfig.from_dict(state["model_config"]))
    model.load_state_dict(state["model"])
    model.eval()
    tok = Tokenizer.from_tensor(state["tokenizer"])
    args = state["args"]
    _, valid_texts = pretraining_texts(None, None, "text")
    # the held-out windows of train.py's evaluation (the same seed); PMLM and MLM share the window
    stream = TokenStream(
        tok.encode(valid_texts), OBJECTIVES["pmlm"].window(int(args["seq_len"])), int(args["seed"]) + 1, sep=tok.eos_id
    )
    out = {}
    for name, keep in CORRUPTIONS.items():
        sums = {k: [0.0, 0] for k in ("all", "[MASK]", "random", "kept")}
        for start in range(0, n, batch):
            b = pmlm_batch(stream, list(range(start, min(n, start + batch))), tok, "ae", keep=keep)
            sel = (b.target != IGNORE) & (b.kind != PSEUDO)  # the AE targets
            logits = model(b.tokens, b.pos, b.seg, b.kind, b.step, b.valid, predict=sel).float()
            ce = F.cross_entropy(logits, b.target[sel], reduction="none")
            shown, target = b.tokens[sel], b.target[sel]
            parts = {
                "all": torch.ones_like(target, dtype=torch.bool),
                "[MASK]": shown == tok.mask_id,
                "kept": shown == target,
            }
            parts["random"] = ~parts["[MASK]"] & ~parts["kept"]
            for k, m in parts.items():
                sums[k][0] += ce[m].sum().item()
                sums[k][1] += int(m.sum())
        out[name] = sums
    return f"{path} ({state['kind']}, step {state['step']})", out


@main_guard
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--windows", type=int, default=512, help="held-out windows (at least 1)")
    p.add_argument("--batch", type=int, default=64, help="windows per forward pass (at least 1)")
    args = p.parse_args(argv)
    if args.windows < 1 or args.batch < 1:
        p.error("--windows and --batch must be at least 1")
    print(
        "| checkpoint | corruption | AE loss, every target | [MASK]ed | random | kept | targets ([MASK] / random / "
        "kept) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for path in args.checkpoints:
        label, res = probe(path, args.windows, args.batch)
        for name, sums in res.items():
            loss = lambda k: f"{sums[k][0] / sums[k][1]:.3f}" if sums[k][1] else "-"
            counts = " / ".join(str(sums[k][1]) for k in ("[MASK]", "random", "kept"))
            print(
                f"| {label} | {name} | {loss('all')} | {loss('[MASK]')} | {loss('random')} | {loss('kept')} | "
                f"{counts} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
