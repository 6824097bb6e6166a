"""Benchmark of the pseudo-mask attention kernel against the obvious alternatives.

    python bench/bench_attention.py            # one CUDA GPU, a few minutes

Layouts (bf16, 12 heads, head dim 64, relative position bias as in the model):
  pmlm     UniLMv2 pretraining: 512 tokens of CONTEXT + ~30% appended (blockwise-masked spans, each
           span a factorization step, its ORIGINAL tokens then as many PSEUDO [P]), batch 32;
  s2s-1k   seq2seq fine-tuning: source CONTEXT, target ORIGINAL at step t, one PSEUDO per target
           token; 1024 tokens in all, batch 16;
  s2s-2k   the same at 2048 tokens, batch 8.
Every row is padded to a multiple of 128 with invalid keys (FlexAttention's block size), the same
for every method.

Methods, each timed for forward and forward+backward with triton.testing.do_bench, in two rows
where a method has per-batch setup, so that setup is charged the same way to everyone:
  ours           kernels/pseudo_attention.py, building the tile map every call (end to end);
  ours kernel    the same with the tile map prebuilt (as the model does: once per forward);
  sdpa-mask      torch SDPA with a dense (B, H, L, L) float mask (bias + -inf where
                 reference.visible is False), built every call; "kernel" row: prebuilt. The bias
                 there is a constant, so SDPA computes no bias gradient while ours does;
  flex           FlexAttention with a mask_mod and score_mod reading the metadata tensors, with
                 create_block_mask every call, and a "kernel" row with the block mask prebuilt;
  sdpa-dense     SDPA with no mask at all: the no-sparsity ceiling (it computes every tile).
Before anything is timed, ours is checked against kernels/reference.py in bf16 on two rows:
the output and the gradients of q, k, v and the relative-bias table; the run stops on a mismatch.

FLOPs are counted on the visible (query, key) pairs, the same count for every method:
  forward  = 4 * H * D * visible   (two matmuls, 2 flops per multiply-add)
  backward = 2.5 * forward         (five matmuls instead of two)
so a method that computes masked pairs is not credited for them. The fraction of L*L that our
computed tiles cover is printed beside it.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if not torch.cuda.is_available():
    sys.exit("bench_attention.py needs a CUDA GPU (none found); the kernel tests run on CPU: "
             "python -m pytest -q tests/test_pseudo_attention.py")

import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from core.masking import blockwise_mask  # noqa: E402
from kernels import CONTEXT, ORIGINAL, PSEUDO, reference, rel_pos_bias  # noqa: E402
from kernels import pseudo_attention as pa  # noqa: E402

DEV = "cuda"
H, D, BUCKETS, MAX_DIST = 12, 64, 32, 128
DTYPE = torch.bfloat16


# -----------------------------------------------------------------------------
# layouts: (kind, step, pos, valid), each (B, L), L a multiple of 128

def pad_rows(rows):
    L = -(-max(len(r[0]) for r in rows) // 128) * 128
    out = []
    for j in range(4):
        fill = False if j == 3 else 0
        out.append(torch.tensor(np.stack([np.pad(r[j], (0, L - len(r[j])), constant_values=fill) for r in rows])))
    return [t.to(DEV) for t in out]


def pmlm_layout(B, n=512, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(B):
        maskable = np.ones(n, dtype=bool)
        maskable[[0, n // 2, n - 1]] = False  # [SOS], [EOS], [EOS]
        steps = blockwise_mask(maskable, rng)
        kind, step, pos = [CONTEXT] * n, [0] * n, list(range(n))
        for s, block in enumerate(steps, start=1):
            kind += [ORIGINAL] * len(block) + [PSEUDO] * len(block)
            step += [s] * (2 * len(block))
            pos += list(block) * 2
        rows.append((np.array(kind), np.array(step), np.array(pos), np.ones(len(kind), dtype=bool)))
    return pad_rows(rows)


def seq2seq_layout(B, total):
    n_tgt = total // 8
    n_src = total - 2 * n_tgt
    kind = np.array([CONTEXT] * n_src + [ORIGINAL] * n_tgt + [PSEUDO] * n_tgt)
    step = np.array([0] * n_src + list(range(n_tgt)) * 2)
    pos = np.concatenate([np.arange(n_src + n_tgt), np.arange(n_src, n_src + n_tgt)])
    return pad_rows([(kind, step, pos, np.ones(total, dtype=bool))] * B)


# -----------------------------------------------------------------------------
# the methods

def make_ours(kind, step, pos, valid, table, prebuilt=False):
    cache = {} if prebuilt else None  # the model's per-forward cache: the map is built once, then reused

    def fn(q, k, v):
        return pa.pseudo_attention(q, k, v, kind, step, kind, step, valid, bias=rel_pos_bias(table, pos, pos, MAX_DIST),
                                   cache=cache)
    return fn


def make_sdpa_mask(kind, step, pos, valid, table, prebuilt=False):
    def mask():
        see = reference.visible(kind, step, kind, step, valid)[:, None]  # (B, 1, L, L)
        bias = reference.dense_bias(rel_pos_bias(table.detach(), pos, pos, MAX_DIST))
        return bias.masked_fill(~see, float("-inf")).to(DTYPE)  # (B, H, L, L)
    fixed = mask() if prebuilt else None
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=fixed if prebuilt else mask())


def make_flex(kind, step, pos, valid, table):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention)
    # a leaf of its own, so that every backward has a graph to go through (its gather from the
    # bucket table is the same cheap op for every method)
    by_distance = rel_pos_bias(table, pos, pos, MAX_DIST).by_distance.detach().requires_grad_()  # (H, 2M+1)

    def mask_mod(b, h, qi, ki):
        qk, qs, kk, ks = kind[b, qi], step[b, qi], kind[b, ki], step[b, ki]
        see = (kk == CONTEXT) | ((qk == ORIGINAL) & (kk == ORIGINAL) & (ks <= qs))
        see = see | ((qk == PSEUDO) & (((kk == ORIGINAL) & (ks < qs)) | ((kk == PSEUDO) & (ks == qs))))
        return see & valid[b, ki]

    def score_mod(score, b, h, qi, ki):
        d = (pos[b, ki] - pos[b, qi]).clamp(-MAX_DIST, MAX_DIST) + MAX_DIST
        return score + by_distance[h, d]

    B, L = kind.shape

    def build():
        try:
            return create_block_mask(mask_mod, B, None, L, L, device=DEV, _compile=True)
        except TypeError:
            return create_block_mask(mask_mod, B, None, L, L, device=DEV)

    block_mask = build()
    return (lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=build()),
            lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=block_mask), build)


def make_dense(*_, **__):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v)


# -----------------------------------------------------------------------------
# timing

def time_method(fn, q, k, v, table):
    fwd = do_bench(lambda: fn(q, k, v))
    dout = torch.randn_like(q)

    def both():
        fn(q, k, v).backward(dout)
    both_ms = do_bench(both, grad_to_none=[q, k, v, table])
    return fwd, both_ms


def computed_area(meta, backward):
    blocks = pa._blocks(torch.device(DEV), D, backward)
    tiles = pa.tilemap_for(meta, blocks, transposed=False)
    return tiles.q_count.sum().item() * blocks[0] * blocks[1], blocks


def check(kind, step, pos, valid, table, q, k, v):
    """bf16 forward and backward of ours against the reference on two rows; exits on a mismatch."""
    sl = slice(0, 2)
    dout = torch.randn_like(q[sl])
    results = []
    for fn in (pa.pseudo_attention, reference.attention):
        leaves = [x[sl].detach().requires_grad_() for x in (q, k, v)] + [table.detach().requires_grad_()]
        out = fn(*leaves[:3], kind[sl], step[sl], kind[sl], step[sl], valid[sl],
                 bias=rel_pos_bias(leaves[3], pos[sl], pos[sl], MAX_DIST))
        results.append([out] + list(torch.autograd.grad(out, leaves, dout)))
    worst = []
    for name, got, want, tol in zip(("out", "dq", "dk", "dv", "dtable"), *results, (2e-2, 5e-2, 5e-2, 5e-2, 5e-2)):
        diff = (got.float() - want.float()).abs()
        scale = want.float().abs().max().item() + 1e-6
        worst.append(f"{name} max {diff.max().item():.3g} (rel {diff.max().item() / scale:.3g}) mean {diff.mean().item():.3g}")
        if diff.max().item() > tol * max(1.0, scale):
            sys.exit(f"check vs reference failed for {name}: " + "; ".join(worst))
    print("check vs reference (bf16, 2 rows): " + "; ".join(worst))


def bench(name, kind, step, pos, valid):
    B, L = kind.shape
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, L, D, device=DEV, dtype=DTYPE, requires_grad=True) for _ in range(3))
    table = torch.randn(H, BUCKETS, device=DEV, requires_grad=True)
    n_real = valid.sum().item() / B
    print(f"\n## {name}: B={B} H={H} D={D} L={L} (mean {n_real:.0f} real tokens per row)")
    check(kind, step, pos, valid, table, q, k, v)

    meta, _, _ = pa.prepare(q, k, v, kind, step, kind, step, valid, None, None,
                            rel_pos_bias(table, pos, pos, MAX_DIST))
    fwd_area, fwd_blocks = computed_area(meta, backward=False)
    bwd_area, bwd_blocks = computed_area(meta, backward=True)
    map_ms = do_bench(lambda: pa.tilemap_for(meta, fwd_blocks, transposed=True))
    visible = reference.visible(kind, step, kind, step, valid).sum().item()
    print(f"visible pairs {100 * visible / (B * L * L):.1f}% of L*L; computed tiles cover "
          f"{100 * fwd_area / (B * L * L):.1f}% (forward {fwd_blocks[:2]}), {100 * bwd_area / (B * L * L):.1f}% "
          f"(backward {bwd_blocks[:2]})")

    results = {}
    results["ours"] = time_method(make_ours(kind, step, pos, valid, table), q, k, v, table)
    results["ours kernel"] = time_method(make_ours(kind, step, pos, valid, table, prebuilt=True), q, k, v, table)
    for label, make in (("sdpa-mask", make_sdpa_mask), ("sdpa-mask kernel", make_sdpa_mask), ("sdpa-dense", make_dense)):
        try:
            fn = make(kind, step, pos, valid, table, prebuilt=True) if label.endswith("kernel") else \
                make(kind, step, pos, valid, table)
            results[label] = time_method(fn, q, k, v, table)
        except Exception as e:  # noqa: BLE001  (a baseline that cannot run is reported, not fatal)
            print(f"{label}: failed ({type(e).__name__}: {str(e)[:120]})")
    try:
        with_build, kernel_only, build = make_flex(kind, step, pos, valid, table)
        results["flex+blockmask"] = time_method(with_build, q, k, v, table)
        results["flex kernel"] = time_method(kernel_only, q, k, v, table)
        print(f"flex create_block_mask: {do_bench(build):.3f} ms; our tile map: {map_ms:.3f} ms")
    except Exception as e:  # noqa: BLE001
        print(f"flex: failed ({type(e).__name__}: {str(e)[:120]})")

    fwd_flops = 4 * H * D * visible
    bwd_flops = 2.5 * fwd_flops
    o_fwd, o_both = results["ours"]
    print(f"flops on visible pairs: forward = 4*H*D*visible = {fwd_flops:.3g}; backward = 2.5 * forward")
    print(f"tile map build {map_ms:.3f} ms = {100 * map_ms / results['ours kernel'][0]:.1f}% of our kernel-only forward")
    print("| method | fwd ms | fwd+bwd ms | fwd TFLOP/s | ours fwd speedup | ours fwd+bwd speedup |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, (f_ms, b_ms) in results.items():
        mine = results["ours kernel" if label.endswith("kernel") else "ours"]
        print(f"| {label} | {f_ms:.3f} | {b_ms:.3f} | {fwd_flops / f_ms * 1e-9:.1f} | {f_ms / mine[0]:.2f}x | "
              f"{b_ms / mine[1]:.2f}x |")
    bwd_ms = o_both - o_fwd
    print(f"ours: backward {bwd_flops / bwd_ms * 1e-9:.1f} TFLOP/s on visible pairs, backward / forward time "
          f"{bwd_ms / o_fwd:.2f}")


def main():
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    bench("pmlm", *pmlm_layout(32))
    bench("s2s-1k", *seq2seq_layout(16, 1024))
    bench("s2s-2k", *seq2seq_layout(8, 2048))


if __name__ == "__main__":
    main()
