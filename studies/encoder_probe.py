"""Does a pretrained encoder's classifier vector tell the classes apart before any fine-tuning? A
linear probe of each pretraining checkpoint: the vector its classifier reads (core/classify.py:
[SOS] of a unified stack, [EOS] of an encoder-decoder's encoder, each fed the input its
pretraining showed it), computed frozen in eval mode for a sample of the training split and for
the whole validation and test splits of the embedded classification task; a multinomial logistic
regression on the training vectors, its L2 weight chosen on validation from a grid; the test
accuracy of the chosen one, with a 95% bootstrap interval over the test examples. With --scratch
each architecture is probed again with random weights of the same shape: the floor.

    OMP_NUM_THREADS=1 python -m studies.encoder_probe checkpoints/reproduce-cpu/pre-mlm/last.pt \\
        checkpoints/reproduce-cpu/pre-mlae-a/last.pt checkpoints/reproduce-cpu/pre-t5/last.pt \\
        --scratch --json results/studies/encoder-probe.json

Fine-tuning moves every weight, so a probe does not predict its accuracy; it says how much of the
task the pretraining alone put within a linear layer's reach.
"""

import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from core import checkpoint
from core.architectures import ARCHS, arch_of, build_model
from core.classify import classify_batch, token_vector
from core.config import ModelConfig
from core.errors import main_guard
from core.positions import fit_lengths, positions_of
from core.tasks import Labels, load_split
from core.tokenizer import Tokenizer

L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1)


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="pretraining checkpoints (train.py's last.pt)")
    p.add_argument(
        "--train-examples",
        type=int,
        default=10000,
        help="training examples the probe fits on (a fixed shuffle of the split's)",
    )
    p.add_argument("--scratch", action="store_true", help="also each architecture with random weights")
    p.add_argument("--batch", type=int, default=128, help="examples a forward pass")
    p.add_argument("--iterations", type=int, default=200, help="L-BFGS iterations of each fit")
    p.add_argument(
        "--vectors",
        default="own",
        help="comma-separated, each probed: own (the vector the classifier reads), first (the first "
        "token's output), last (the [EOS]'s)",
    )
    p.add_argument("--json", default=None, help="write the table here (tools/records.py)")
    args = p.parse_args(argv)
    for name in ("train_examples", "batch", "iterations"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    args.vectors = args.vectors.split(",")
    if not args.vectors or not set(args.vectors) <= {"own", "first", "last"}:
        p.error(f"--vectors {','.join(args.vectors)}: each of own, first, last")
    missing = [c for c in args.checkpoints if not os.path.isfile(c)]
    if missing:
        p.error(f"no such checkpoint: {', '.join(missing)}")
    if args.json:
        from core.guards import unwritable

        if unwritable(args.json, "--json"):
            p.error(unwritable(args.json, "--json"))
    return args


@torch.no_grad()
def features(model, tok, texts, sos, max_len, batch, vectors=("own",)):
    """{vector: (N, C) float32} for each text, from one pass of the encoder: the vector the
    classifier's linear layer reads ("own": core/classify.py's `reads`, the first token of a unified
    stack, the [EOS] of an encoder-decoder's encoder), the first token's ("first"), [EOS]'s ("last")."""
    ids, out = tok.encode(texts), {v: [] for v in vectors}
    for i in range(0, len(ids), batch):
        b = classify_batch(ids[i : i + batch], [0] * len(ids[i : i + batch]), tok, max_len, sos=sos)
        h = model.states(b.tokens, b.valid)
        for v in vectors:
            out[v].append(token_vector(h, b.valid, model.reads if v == "own" else v).float())
    return {v: torch.cat(x) for v, x in out.items()}


def fit(x, y, n_labels, l2, iterations):
    """A multinomial logistic regression on standardized x: (weights, bias)."""
    torch.manual_seed(0)
    w = torch.zeros(x.shape[1], n_labels, requires_grad=True)
    b = torch.zeros(n_labels, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(x @ w + b, y) + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def accuracy(x, y, wb):
    return ((x @ wb[0] + wb[1]).argmax(1) == y).float()


def bootstrap(hits, n=1000):
    rng = np.random.default_rng(0)
    h = hits.numpy()
    means = h[rng.integers(0, len(h), (n, len(h)))].mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def probe(path, scratch, args, splits, labels):
    """Rows, one a vector of --vectors: the checkpoint's (or, scratch, its architecture's random)
    encoder probed."""
    source = checkpoint.load(path, kinds=("pretrain/",))
    arch = arch_of(source, path)
    tok = Tokenizer.from_tensor(source["tokenizer"])
    cfg = ModelConfig.from_dict(source["model_config"])
    max_len = fit_lengths(arch, positions_of(source), None, 0)  # finetune.py's default --max-src
    torch.manual_seed(0)
    model = build_model(arch, cfg, len(labels))
    if not scratch:
        model.encoder.load_state_dict(source["model"])
    model.eval()
    sos = ARCHS[arch].classify_sos
    own = "[SOS]" if model.reads == "first" else "[EOS]"
    name = f"{arch} with random weights" if scratch else os.path.basename(os.path.dirname(os.path.abspath(path)))
    rows = []
    xs = {k: features(model, tok, ex.sources, sos, max_len, args.batch, args.vectors) for k, ex in splits.items()}
    y = {k: torch.tensor(labels.ids(ex.targets)) for k, ex in splits.items()}
    for vector in [v for v in args.vectors if not (v == model.reads and "own" in args.vectors)]:  # once each
        x = {k: v[vector] for k, v in xs.items()}
        mean, std = x["train"].mean(0), x["train"].std(0).clamp_min(1e-6)
        x = {k: (v - mean) / std for k, v in x.items()}
        fits = {l2: fit(x["train"], y["train"], len(labels), l2, args.iterations) for l2 in L2_GRID}
        valid = {l2: accuracy(x["valid"], y["valid"], wb).mean().item() for l2, wb in fits.items()}
        best = max(valid, key=valid.get)
        hits = accuracy(x["test"], y["test"], fits[best])
        lo, hi = bootstrap(hits)
        read = {
            "own": f"{own}, the classifier's",
            "first": "the first token's" + (" ([SOS])" if sos else ""),
            "last": "[EOS]",
        }[vector]
        rows.append(
            dict(
                run=name,
                arch=arch,
                step=None if scratch else source.get("step"),
                vector=read,
                train=len(splits["train"]),
                l2=best,
                valid=100 * valid[best],
                test=100 * hits.mean().item(),
                interval=f"[{100 * lo:.2f}, {100 * hi:.2f}]",
            )
        )
        print(
            f"  {name}, {read}: valid {rows[-1]['valid']:.2f}, test {rows[-1]['test']:.2f} "
            f"{rows[-1]['interval']} (L2 {best:g})",
            flush=True,
        )
    return rows


COLUMNS = [
    ("encoder", "run", "{}"),
    ("pretraining step", "step", "{}"),
    ("vector", "vector", "{}"),
    ("probe's training examples", "train", "{:,}"),
    ("L2 (on validation)", "l2", "{:g}"),
    ("validation accuracy", "valid", "{:.2f}"),
    ("test accuracy", "test", "{:.2f}"),
    ("95% interval", "interval", "{}"),
]


@main_guard
def main(argv=None):
    args = get_args(argv)
    train = load_split("classify", "train")
    labels = Labels.from_targets(train.targets)  # the whole split's, as fine-tuning's
    sample = train.shuffled(0)
    sample.sources, sample.targets = sample.sources[: args.train_examples], sample.targets[: args.train_examples]
    splits = {"train": sample, "valid": load_split("classify", "valid"), "test": load_split("classify", "test")}
    print(
        f"probe: {len(splits['train'])} training, {len(splits['valid'])} validation, {len(splits['test'])} test "
        f"examples, {len(labels)} labels",
        flush=True,
    )
    rows, seen = [], set()
    for path in args.checkpoints:
        rows += probe(path, False, args, splits, labels)
        if args.scratch and rows[-1]["arch"] not in seen:
            seen.add(rows[-1]["arch"])
            rows += probe(path, True, args, splits, labels)
    if args.json:
        from tools import records

        command = ["python", "-m", "studies.encoder_probe"] + (argv if argv is not None else sys.argv[1:])
        records.write(
            args.json,
            command,
            COLUMNS,
            rows,
            dtype="float32",
            note="The interval is a bootstrap over the test examples of the probe's accuracy.",
        )
    return rows


if __name__ == "__main__":
    main()
