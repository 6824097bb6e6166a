"""Block-sparse pseudo-mask attention in Triton: forward, backward, autograd wrapper.

    out = pseudo_attention(q, k, v, q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, bias, scale, cache)

Same contract as kernels.attention and the same numbers as kernels/reference.py. The algorithm is
FlashAttention-2 (Dao, 2023): the forward pass streams key tiles through an online softmax and
saves only the log-sum-exp of each query row; the backward pass recomputes the probabilities tile
by tile, one kernel for dK/dV (a program per key tile) and one for dQ (a program per query tile),
so that no gradient of q, k or v needs an atomic add (kernels/attention_backward.py). With
kernels/attention_plan.FUSED_DQ the dK/dV kernel also adds each tile's dQ by atomics and the dQ
kernel does not run (head dims up to 64), as FlashAttention-2's own backward does. What is added for the pseudo-masked
LM
(UniLMv2, Bao et al. 2020, section 3.2):

  * the mask is never stored: each token carries two int32 codes from which the rule is two
    comparisons per pair (kernels/tilemap.py), computed once per metadata by one launch;
  * a tile map (kernels/tilemap.py, one launch per metadata for forward and backward) lists the
    PARTIAL, FULL and FAR tiles of every query tile (and of every key tile, for dK/dV) apart, and
    each kernel has three loops compiled for one class each: EMPTY tiles are never touched, FULL
    tiles skip the rule and every bounds check, FAR tiles also read one bias scalar;
  * a T5 relative position bias (Raffel et al. 2020, section 2.1) is read from a small (H, 2M+1)
    table (pre-scaled by log2 e once per call) by clamped position distance, inside the kernel; its
    gradient is accumulated with atomic adds into one (H, 2M+1) row block per dK/dV program (one
    add per FAR tile) and summed afterwards;
  * a dense additive bias broadcastable to (B, H, Lq, Lk) is also accepted: it is loaded tile by
    tile through (possibly zero) strides, and when it needs a gradient the dK/dV kernel writes dS
    for every visited tile into a zeroed (B, H, Lq, Lk) float32 buffer, reduced to its shape after.

What a call costs besides the kernels: nothing on the device when `cache` (a dict the caller keeps
for as long as the metadata is unchanged; the model keeps one per forward) already holds the codes,
the map and the bias table, else 3-4 launches for the codes and map and 2 for the table. One
training step of an n-layer model with a relative bias therefore launches 5 + 7 n times for its
attention in float32: codes, map and table once (5), and per layer the forward (1) and the
backward's delta and dK/dV kernels, the dQ buffer's zeroing (the dQ kernel, with FUSED_DQ off),
the table gradient's zeroing, sum and fold (3 + 3); in 16 bits a fused dQ's cast adds one. No host sync
(tests/test_attention_in_model.py counts them).

Conventions inside the kernels: scores are kept in base 2 (multiplied by log2 e) so that exp2 does
the softmax; a query row that sees no key has log-sum-exp +inf, which makes every probability of
that row exactly 0 in the backward pass and its output 0 in the forward pass.
Runs on CUDA and, with TRITON_INTERPRET=1, on CPU tensors (how the tests run it).
"""
import os

import torch
import triton
import triton.language as tl

from .attention_backward import _bwd_kv_kernel, _bwd_q_kernel, _delta_kernel
from .attention_tiles import (_EDGE, _FAR, _FULL, _GATHER, _LENGTHS, _PARTIAL, WINDOW_PAD, _edge, _entry, _far_pair,
                              _k0, _q_codes, _rows, _softmax_step, _tile_scores)
from .attention_plan import (DTYPES, HEAD_DIMS, LOG2E, Config, config, extended_table, fold_table_grad,  # noqa: F401
                             prepare)
from .reference import RelPosBias

POISON = False  # tests set this: outputs and gradients start as NaN, so an unwritten element fails


# -----------------------------------------------------------------------------
# forward: one program per (query tile, batch * head)

@triton.jit
def _fwd_tile(code, k0, q, qa, qb, qq, qp, m_i, l_i, acc, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d, Lk, skn, svn,
              qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows, Lq,
              CLASS: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr, REL: tl.constexpr,
              DENSE: tl.constexpr, PRECISION: tl.constexpr):
    """One key tile of the forward, compiled for one class."""
    s, k, v = _tile_scores(code, k0, q, qa, qb, qq, qp, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d, Lk, skn, svn,
                           qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows, Lq,
                           CLASS, BN, HAS_SEQ, REL, DENSE, PRECISION)
    return _softmax_step(s, v, m_i, l_i, acc, CLASS % 4 == 1, PRECISION)


@triton.jit(do_not_specialize=_LENGTHS)
def _fwd_kernel(Q, K, V, O, LSE, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som,
                QC, KC, sq, sk, rq, rk, TABLE, max_dist, BIAS, sbb, sbh, sbm, sbn,
                LIST, COUNT, H, Lq, Lk, n_qt, n_kt, qk_scale, TW: tl.constexpr,
                D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr,
                REL: tl.constexpr, DENSE: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = pid_m * BM + tl.arange(0, BM)
    offs_n, offs_d = tl.arange(0, BN), tl.arange(0, D)
    q = _rows(Q + b * sqb + h * sqh, rows, offs_d, sqm, Lq, True)
    qa, qb, qq, qp = _q_codes(QC, sq, rq, b, rows, Lq, True)
    Kb, Vb = K + b * skb + h * skh, V + b * svb + h * svh
    W = TABLE + h * 4 * TW + max_dist + WINDOW_PAD  # distance 0 of this head's extended table (copy 0)
    far_lo, far_hi = _far_pair(W, max_dist, REL)  # the bias of FAR tiles, read before their loop
    plane = TW  # from one shifted copy of the table to the next
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    entry = b * n_qt + pid_m
    lst, cnt = LIST + entry * 4 * n_kt, COUNT + entry * 4
    # FAR, FULL, GATHER, then PARTIAL tiles: the order only moves rounding, and it matters to the
    # compiler, which lays out a loop's softmax as the loop before it left its running max and sums
    if REL:
        n = tl.load(cnt + 2)
        nxt = _entry(lst + 2 * n_kt, 0, n)
        for t in range(0, n):
            code, nxt = nxt, _entry(lst + 2 * n_kt, t + 1, n)
            m_i, l_i, acc = _fwd_tile(code, 0, q, qa, qb, qq, qp, m_i, l_i, acc, Kb, Vb, KC, sk, rk, b, h, offs_n,
                                      offs_d, Lk, skn, svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb,
                                      sbh, sbm, sbn, rows, Lq, _FAR, BN, HAS_SEQ, REL, DENSE, PRECISION)
    n = tl.load(cnt + 1)
    nxt = _entry(lst + n_kt, 0, n)
    k0n = _k0(KC, sk, rk, b, nxt * BN)  # a FULL tile's first key position, also read a tile ahead
    for t in range(0, n):
        code, nxt = nxt, _entry(lst + n_kt, t + 1, n)
        k0, k0n = k0n, _k0(KC, sk, rk, b, nxt * BN)
        m_i, l_i, acc = _fwd_tile(code, k0, q, qa, qb, qq, qp, m_i, l_i, acc, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d,
                                  Lk, skn, svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn,
                                  rows, Lq, _FULL, BN, HAS_SEQ, REL, DENSE, PRECISION)
    if REL:
        n = tl.load(cnt + 3)
        nxt = _entry(lst + 3 * n_kt, 0, n)
        for t in range(0, n):
            code, nxt = nxt, _entry(lst + 3 * n_kt, t + 1, n)
            m_i, l_i, acc = _fwd_tile(code, 0, q, qa, qb, qq, qp, m_i, l_i, acc, Kb, Vb, KC, sk, rk, b, h, offs_n,
                                      offs_d, Lk, skn, svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb,
                                      sbh, sbm, sbn, rows, Lq, _GATHER, BN, HAS_SEQ, REL, DENSE, PRECISION)
    n_part = tl.load(cnt)
    edge = _edge(lst, n_part, n_kt, Lk, BN)
    n = n_part - edge
    nxt = _entry(lst, 0, n)
    for t in range(0, n):
        code, nxt = nxt, _entry(lst, t + 1, n)
        m_i, l_i, acc = _fwd_tile(code, 0, q, qa, qb, qq, qp, m_i, l_i, acc, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d,
                                  Lk, skn, svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn,
                                  rows, Lq, _PARTIAL, BN, HAS_SEQ, REL, DENSE, PRECISION)
    for t in range(n_part - edge, n_part):
        m_i, l_i, acc = _fwd_tile(tl.load(lst + t), 0, q, qa, qb, qq, qp, m_i, l_i, acc, Kb, Vb, KC, sk, rk, b, h,
                                  offs_n, offs_d, Lk, skn, svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb,
                                  sbh, sbm, sbn, rows, Lq, _EDGE, BN, HAS_SEQ, REL, DENSE, PRECISION)
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    tl.store(O + b * sob + h * soh + rows[:, None] * som + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < Lq)
    tl.store(LSE + bh.to(tl.int64) * Lq + rows, tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("inf")),
             mask=rows < Lq)


# -----------------------------------------------------------------------------
# launchers

def _new(like, dtype=None):
    if POISON:
        return torch.full(like.shape, float("nan"), dtype=dtype or like.dtype, device=like.device)
    return torch.empty(like.shape, dtype=dtype or like.dtype, device=like.device)


def _bias_args(meta):
    """Pointer and strides of the dense bias, expanded to (B, H, Lq, Lk) (zero strides broadcast)."""
    if meta["dense"] is None:
        return (meta["qc"], 0, 0, 0, 0)
    d = meta["dense"]
    return (d, *d.stride())


def _width(meta):
    return meta["table"].shape[2] if meta["rel"] else 16  # the extended table's rows (a constexpr)


def _code_args(meta):
    qc, kc = meta["qc"], meta["kc"]
    return qc, kc, qc.shape[1] * qc.shape[2], kc.shape[1] * kc.shape[2], qc.shape[2], kc.shape[2]


def _forward(q, k, v, meta, scale):
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    cfg, tiles = meta["cfg"], meta["tiles"]
    o = _new(q)
    lse = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device)
    n_qt, n_kt = triton.cdiv(Lq, cfg.BM), triton.cdiv(Lk, cfg.BN)
    _fwd_kernel[(n_qt, B * H)](
        q, k, v, o, lse, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        *_code_args(meta), meta["table"], meta["max_dist"], *_bias_args(meta),
        tiles.q_list, tiles.q_count, H, Lq, Lk, n_qt, n_kt, scale * LOG2E, TW=_width(meta),
        D=D, BM=cfg.BM, BN=cfg.BN, HAS_SEQ=meta["has_seq"], REL=meta["rel"], DENSE=meta["dense"] is not None,
        PRECISION=meta["precision"], num_warps=cfg.fwd_warps, num_stages=cfg.fwd_stages)
    return o, lse


def _backward(q, k, v, o, lse, do, meta, scale, dense_grad, table_grad=True):
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    cfg, tiles = meta["cfg"], meta["tiles"]
    n_qt, n_kt = triton.cdiv(Lq, cfg.BM), triton.cdiv(Lk, cfg.BN)
    n_qs, n_ks = triton.cdiv(Lq, cfg.BMK), triton.cdiv(Lk, cfg.BNK)
    delta = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device)  # rowsum(dO * O)
    _delta_kernel[(n_qt, B * H)](o, do, delta, *o.stride()[:3], *do.stride()[:3], H, Lq, D=D, BM=cfg.BM,
                                 num_warps=cfg.dq_warps)
    fused = meta["fused"]  # kernels/attention_plan.FUSED_DQ when the plan was made
    dk, dv = _new(k), _new(v)
    # fused: the dK/dV kernel adds every tile's dQ into a zeroed float32 buffer
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if fused else _new(q)
    rel = meta["rel"]
    rel_grad = rel and table_grad
    width = _width(meta)
    # each dK/dV program zeroes its own row before adding to it
    dtable = torch.empty((B * n_ks, H, width), dtype=torch.float32, device=q.device) if rel_grad else delta
    dbias = torch.zeros((B, H, Lq, Lk), dtype=torch.float32, device=q.device) if dense_grad else delta  # never written
    qk_scale = scale * LOG2E
    flags = dict(D=D, HAS_SEQ=meta["has_seq"], REL=rel, DENSE=meta["dense"] is not None, PRECISION=meta["precision"],
                 TW=width)
    _bwd_kv_kernel[(n_ks, B * H)](
        q, k, v, do, lse, delta, dk, dv, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *do.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], *_code_args(meta),
        meta["table"], dtable, meta["max_dist"], *_bias_args(meta), dbias,
        tiles.k_list, tiles.k_count, H, Lq, Lk, n_qs, n_ks, qk_scale, scale, dq, *dq.stride()[:3], BM=cfg.BMK,
        BN=cfg.BNK, REL_GRAD=rel_grad, DENSE_GRAD=dense_grad, FUSED_DQ=fused, num_warps=cfg.kv_warps,
        num_stages=cfg.kv_stages, **flags)
    if fused:
        dq = dq.to(q.dtype)
    else:
        _bwd_q_kernel[(n_qt, B * H)](
            q, k, v, do, lse, delta, dq, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *do.stride()[:3], *dq.stride()[:3], *_code_args(meta), meta["table"], meta["max_dist"],
            *_bias_args(meta), tiles.q_list, tiles.q_count, H, Lq, Lk, n_qt, n_kt, qk_scale, scale, BM=cfg.BM,
            BN=cfg.BN, num_warps=cfg.dq_warps, num_stages=cfg.dq_stages, **flags)
    return dq, dk, dv, (fold_table_grad(dtable, meta["max_dist"]) if rel_grad else None), (dbias if dense_grad
                                                                                           else None)


def _sum_to(grad, shape):
    """Reduce a (B, H, Lq, Lk) gradient to the shape of the bias that was broadcast to it."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    dims = [i for i in range(4) if shape[i] == 1 and grad.shape[i] != 1]
    return grad.sum(dims, keepdim=True) if dims else grad  # sum([]) would reduce every dim


class _PseudoAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, dense, meta, scale):
        o, lse = _forward(q, k, v, meta, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.meta, ctx.scale = meta, scale
        ctx.dense_shape = None if dense is None else dense.shape
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        if do.stride(-1) != 1:
            do = do.contiguous()
        dense_grad = ctx.needs_input_grad[4]
        dq, dk, dv, dtable, dbias = _backward(q, k, v, o, lse, do, ctx.meta, ctx.scale, dense_grad,
                                              table_grad=ctx.needs_input_grad[3])
        dtable = dtable.to(ctx.meta["table_dtype"]) if dtable is not None else None
        if dbias is not None:
            dbias = _sum_to(dbias, ctx.dense_shape).view(ctx.dense_shape).to(ctx.meta["dense_dtype"])
        return dq, dk, dv, dtable, dbias, None, None


def pseudo_attention(q, k, v, q_kind, q_step, k_kind, k_step, k_valid=None, q_seq=None, k_seq=None,
                     bias=None, scale=None, cache=None):
    """Masked attention from per-token metadata (see kernels.attention for the rule).

    q: (B, H, Lq, D), k, v: (B, H, Lk, D), fp16 / bf16 / fp32, D in (16, 32, 64, 128), last dim
    contiguous. Metadata: (B, Lq) / (B, Lk) int tensors, steps in (-2^30, 2^30); k_valid (B, Lk)
    bool. bias: None, a RelPosBias (computed in the kernel, gradient to by_distance) or a float
    tensor broadcastable to (B, H, Lq, Lk) (gradient supported). Returns (B, H, Lq, D) in q's
    dtype; a query that sees no key returns 0 and passes back zero gradients. cache: an optional
    dict the caller keeps for as long as the metadata is unchanged; the codes, the tile map and the
    scaled bias table are built once into it and reused."""
    assert q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1", \
        "pseudo_attention: CPU tensors need TRITON_INTERPRET=1 set before triton is imported"
    grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, k, v, bias if
                                           not isinstance(bias, RelPosBias) else bias.by_distance))
    meta, table, dense = prepare(q, k, v, q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, bias, cache, grad,
                                 scale)
    return _PseudoAttention.apply(q, k, v, table, dense, meta, meta["scale"])
