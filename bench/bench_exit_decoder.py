"""Decoder time with token-level early exit against the same decoder with exit disabled.

    python bench/bench_exit_decoder.py              # CPU or CUDA; base-size layers, batch 1

ELMER (Li et al. 2022, sections 4.1, 4.3): a 6-layer NAR decoder (self-attention over all target
tokens, cross-attention to the source, feed-forward), an off-ramp after every layer; with hard
early exit a token leaves at a layer and the layers above run only on the tokens still active,
their keys and values still taken from every token (an exited token keeps its last hidden state).
Here a fraction f of the tokens exits after layer 1 (chosen at random: timing does not depend on
which) and the rest run to layer 6. Two decoders on the same weights, timed in the same run:
  no exit  every token through the 6 layers, then one LM head (logits + argmax) on every token;
  exit     layer 1 on every token, then per layer: gather the active rows (kernels.gather_rows),
           the layer with queries from them and keys / values from all rows (the `context`
           argument of core.model.Layer), scatter back (kernels.scatter_rows); an off-ramp
           (kernels.offramp: argmax, entropy, log-sum-exp) after every layer on the rows that ran it.
Both are reported with and without the heads (LM head / off-ramps): "layers" isolates what the
gather / scatter buys, "with heads" is what a hard-exit decoder costs. Kernels are picked by the
usual switch: Triton on CUDA, the PyTorch references on a CPU.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kernels  # noqa: E402
from core.config import preset  # noqa: E402
from core.model import Layer, Meta  # noqa: E402

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"


def bench_pair(fa, fb, reps):
    """Median milliseconds of fa() and fb(), run alternately so that a shared machine's drift
    hits both alike."""
    def once(fn):
        if CUDA:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if CUDA:
            torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3
    fa(), fb()
    ta, tb = zip(*[(once(fa), once(fb)) for _ in range(reps)])
    return statistics.median(ta), statistics.median(tb)


def meta(n):
    z = torch.zeros(1, n, dtype=torch.long, device=DEV)
    return Meta(z, z)  # every token CONTEXT: bidirectional, as a NAR decoder


def no_exit(layers, h, mem_kv, m_meta, w, b, heads):
    M = h.shape[0]
    x = h[None]  # (1, M, C)
    for layer, kv in zip(layers, mem_kv):
        x, _ = layer(x, meta(M), mem_kv=kv, mem_meta=m_meta)
    if heads:
        F.linear(x[0], w, b).argmax(-1)
    return x[0]


def early_exit(layers, h, mem_kv, m_meta, w, b, heads, stay):
    """stay: (M,) bool, the tokens still active after layer 1."""
    M = h.shape[0]
    index = None
    for i, (layer, kv) in enumerate(zip(layers, mem_kv)):
        if i == 0:
            x, _ = layer(h[None], meta(M), mem_kv=kv, mem_meta=m_meta)
            h, rows = x[0], x[0]
            index = kernels.active_index(stay[None])  # the count read once, for the layers above
        else:
            q = kernels.gather_rows(h, index)[None]  # (1, N, C)
            x, _ = layer(q, meta(index.numel()), k_meta=meta(M), context=h[None], mem_kv=kv, mem_meta=m_meta)
            rows = x[0]
            h = kernels.scatter_rows(h, index, rows)
        if heads:
            kernels.offramp(rows, w, b)
    return h


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="base")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=64, help="target tokens (batch 1)")
    ap.add_argument("--source", type=int, default=256, help="source tokens (cross-attention memory)")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    cfg = preset(args.model, vocab_size=args.vocab, dropout=0.0)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    layers = [Layer(cfg, cross=True).to(DEV, dtype).eval() for _ in range(args.layers)]
    C, M = cfg.d_model, args.tokens
    h = torch.randn(M, C, device=DEV, dtype=dtype)
    memory = torch.randn(1, args.source, C, device=DEV, dtype=dtype)
    mem_kv = [layer.cross.keys_values(memory) for layer in layers]  # once per source, both decoders
    m_meta = meta(args.source)
    w = torch.randn(args.vocab, C, device=DEV, dtype=dtype) * C ** -0.5
    b = torch.zeros(args.vocab, device=DEV, dtype=dtype)
    print(f"device: {torch.cuda.get_device_name() if CUDA else 'CPU'} ({dtype}), threads {torch.get_num_threads()}; "
          f"{args.model} layers (C = {C}, FF = {cfg.d_ff}) x {args.layers}, batch 1, {M} target and "
          f"{args.source} source tokens, V = {args.vocab}; median of {args.reps}, the two decoders run alternately\n")
    print("| exited after layer 1 | layers: exit ms | no exit ms | ratio | with heads: exit ms | no exit ms | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    g = torch.Generator().manual_seed(1)
    for frac in (0.0, 0.1, 0.15, 0.25, 0.5, 0.75, 0.9):
        stay = torch.ones(M, dtype=torch.bool)
        stay[torch.randperm(M, generator=g)[: round(frac * M)]] = False
        stay = stay.to(DEV)
        cells = []
        for hd in (False, True):
            t, t0 = bench_pair(lambda: early_exit(layers, h, mem_kv, m_meta, w, b, hd, stay),
                               lambda: no_exit(layers, h, mem_kv, m_meta, w, b, hd), args.reps)
            cells += [f"{t:.2f}", f"{t0:.2f}", f"{t / t0:.2f}"]
        print(f"| {frac:.0%} | " + " | ".join(cells) + " |")
    # the two decoders agree on the tokens that never exit
    stay = torch.ones(M, dtype=torch.bool, device=DEV)
    diff = (early_exit(layers, h, mem_kv, m_meta, w, b, False, stay) - no_exit(layers, h, mem_kv, m_meta, w, b, False)).abs().max()
    print(f"\ncheck: with no token exited the two decoders differ by at most {diff.item():.2g}")


if __name__ == "__main__":
    main()
