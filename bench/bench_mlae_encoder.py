"""MLAE's encoder on the unmasked tokens only against the same encoder on the whole sequence
(the MLM baseline's input), forward + backward, same weights, same batch, in one run.

    OMP_NUM_THREADS=1 python -m bench.bench_mlae_encoder --model small --batch 64 --seq-len 128

The removed tokens are 15% of the window (MLAE section 4.1), so the ideal ratio is about 1/0.85
in the linear layers and more in attention (quadratic in the length). --json PATH writes the two
rows as data (tools/records.py), which docs/mlae.md renders.
"""

import argparse
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_mlae_encoder (--help)")

import numpy as np
import torch

from core.config import preset  # noqa: E402
from core.mlae.model import MLAE, collate, mlae_example  # noqa: E402
from tools import records  # noqa: E402

COLUMNS = [
    ("encoder input", "input", "{}"),
    ("tokens", "tokens", "{:,}"),
    ("width", "width", "{}"),
    ("ms, best of the repeats", "ms", "{:.1f}"),
    ("whole sequence's time / this", "time_ratio", "{:.2f}x"),
    ("whole sequence's tokens / this", "token_ratio", "{:.2f}x"),
]


class Tok:
    sos_id, eos_id, mask_id, pad_id = 2, 3, 4, 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="small")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    args = p.parse_args()
    from bench.common import check_flags

    check_flags(p, args, positive=("batch", "repeats"), at_least=dict(seq_len=8))
    dev = torch.device(args.device)
    cfg = preset(args.model, vocab_size=8000, dropout=0.0, n_dec_layers=1)
    model = MLAE(cfg, "b").to(dev)
    rng = np.random.default_rng(0)
    ex = [mlae_example(rng.integers(100, 8000, args.seq_len - 2), rng, Tok) for _ in range(args.batch)]
    b = collate(ex, Tok).to(dev)
    full_tok = torch.where(b.full_target >= 0, b.full_target, b.full_tok)
    full_pos = torch.arange(full_tok.shape[1], device=dev).expand_as(full_tok)

    def run(tok, pos, valid):
        model.zero_grad(set_to_none=True)
        model.encode(tok, pos, valid).square().mean().backward()

    def clock(fn):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    # interleaved, best of --repeats each: on a shared machine the minimum is the least disturbed
    full = lambda: run(full_tok, full_pos, b.full_valid)
    mlae = lambda: run(b.enc_tok, b.enc_pos, b.enc_valid)
    full(), mlae()  # warm-up
    times = [(clock(full), clock(mlae)) for _ in range(args.repeats)]
    t_full, t_mlae = min(t for t, _ in times), min(t for _, t in times)
    n_full, n_enc = int(b.full_valid.sum()), int(b.enc_valid.sum())
    print(f"{args.model}, {cfg.n_layers} encoder layers, batch {args.batch} x {args.seq_len}, {dev.type}")
    print(f"whole sequence: {n_full} tokens, {1000 * t_full:.1f} ms, {n_full / t_full / 1e3:.1f}k tokens/s")
    print(
        f"unmasked only:  {n_enc} tokens (width {b.enc_tok.shape[1]}), {1000 * t_mlae:.1f} ms; "
        f"encoder time ratio {t_full / t_mlae:.2f}x (token ratio {n_full / n_enc:.2f}x)"
    )
    if args.json:
        rows = [
            {
                "input": "whole sequence (the MLM's)",
                "tokens": n_full,
                "width": full_tok.shape[1],
                "ms": 1000 * t_full,
                "time_ratio": 1.0,
                "token_ratio": 1.0,
            },
            {
                "input": "unmasked tokens only (MLAE's)",
                "tokens": n_enc,
                "width": b.enc_tok.shape[1],
                "ms": 1000 * t_mlae,
                "time_ratio": t_full / t_mlae,
                "token_ratio": n_full / n_enc,
            },
        ]
        records.write(
            args.json,
            ["python", "-m", "bench.bench_mlae_encoder", *sys.argv[1:]],
            COLUMNS,
            rows,
            note=f"`{args.model}`, {cfg.n_layers} encoder layers, batch {args.batch} x {args.seq_len}, "
            f"forward + backward on {dev.type}, interleaved, best of {args.repeats}.",
            dtype="float32",
        )


if __name__ == "__main__":
    main()
