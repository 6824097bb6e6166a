"""Block-sparse pseudo-mask attention in Triton: forward, backward, autograd wrapper.

    out = pseudo_attention(q, k, v, q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, bias, scale)

Same contract as kernels.attention and the same numbers as kernels/reference.py. The algorithm is
FlashAttention-2 (Dao, 2023): the forward pass streams key tiles through an online softmax and
saves only the log-sum-exp of each query row; the backward pass recomputes the probabilities tile
by tile, one kernel for dK/dV (a program per key tile) and one for dQ (a program per query tile),
so that no gradient needs an atomic add. What is added for the pseudo-masked LM (UniLMv2, Bao et
al. 2020, section 3.2):

  * the mask is never stored: each tile evaluates the (kind, step, seq) rule from the per-token
    metadata (kernels/reference.py `visible`);
  * a tile map (kernels/tilemap.py) lists, per query tile, the key tiles that are not EMPTY, so the
    loops never touch a fully masked tile, and flags the FULL ones, which skip the rule;
  * a T5 relative position bias (Raffel et al. 2020, section 2.1) is read from a small
    (H, 2M+1) table by clamped position distance, inside the kernel; its gradient is accumulated
    with atomic adds into one (H, 2M+1) row block per dK/dV program and summed afterwards;
  * a dense additive bias broadcastable to (B, H, Lq, Lk) is also accepted: it is loaded tile by
    tile through (possibly zero) strides, and when it needs a gradient the dK/dV kernel writes
    dS for every visited tile into a zeroed (B, H, Lq, Lk) float32 buffer, reduced to the bias's
    shape afterwards.

Conventions inside the kernels: scores are kept in base 2 (multiplied by log2 e) so that exp2 does
the softmax; a query row that sees no key has log-sum-exp +inf, which makes every probability of
that row exactly 0 in the backward pass and its output 0 in the forward pass.
Runs on CUDA and, with TRITON_INTERPRET=1, on CPU tensors (how the tests run it).
"""
import os

import torch
import triton
import triton.language as tl

from .attention_tiles import _dkdv_step, _dq_step, _far_bias, _kv_tile, _meta_of, _scores, _softmax_step
from .reference import RelPosBias, rel_pos_bias
from .tilemap import NEVER, build_tile_map

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
POISON = False  # tests set this: outputs and gradients start as NaN, so an unwritten element fails
# lengths change with every batch: without this Triton would compile a variant per "== 1" and
# "divisible by 16" pattern of each of them
_LENGTHS = ["Lq", "Lk", "n_qt", "n_kt"]


# -----------------------------------------------------------------------------
# forward: one program per (query tile, batch * head)

@triton.jit(do_not_specialize=_LENGTHS)
def _fwd_kernel(Q, K, V, O, LSE, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh, som,
                QKIND, QSTEP, QSEQ, QPOS, KKIND, KSTEP, KSEQ, KPOS,
                TABLE, max_dist, BIAS, sbb, sbh, sbm, sbn,
                LIST, COUNT, SPLIT, H, Lq, Lk, n_qt, n_kt, qk_scale,
                D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr,
                REL: tl.constexpr, DENSE: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = pid_m * BM + tl.arange(0, BM)
    offs_n, offs_d = tl.arange(0, BN), tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + offs_d[None, :], mask=rows[:, None] < Lq, other=0.0)
    qk, qs, qq, qp = _meta_of(QKIND, QSTEP, QSEQ, QPOS, b, rows, Lq, 0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    entry = b * n_qt + pid_m
    count, split = tl.load(COUNT + entry), tl.load(SPLIT + entry)
    for t in range(0, split):  # PARTIAL and FULL tiles: the bias per pair, the rule where not FULL
        code = tl.load(LIST + entry * n_kt + t)
        cols, k, v = _kv_tile(K, V, b, h, code, offs_n, offs_d, Lk, skb, skh, skn, svb, svh, svn, BN)
        kk, ks, kq, kp = _meta_of(KKIND, KSTEP, KSEQ, KPOS, b, cols, Lk, -1)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = _scores(s, b, h, rows, cols, Lq, Lk, code % 2, qk, qs, qq, qp, kk, ks, kq, kp,
                    TABLE, max_dist, BIAS, sbb, sbh, sbm, sbn, HAS_SEQ, REL, DENSE)
        m_i, l_i, acc = _softmax_step(s, v, m_i, l_i, acc, PRECISION)
    if REL:
        for t in range(split, count):  # FAR tiles: plain FlashAttention plus one scalar bias
            code = tl.load(LIST + entry * n_kt + t)
            cols, k, v = _kv_tile(K, V, b, h, code, offs_n, offs_d, Lk, skb, skh, skn, svb, svh, svn, BN)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + _far_bias(TABLE, h, code, max_dist)
            m_i, l_i, acc = _softmax_step(s, v, m_i, l_i, acc, PRECISION)
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    tl.store(O + b * sob + h * soh + rows[:, None] * som + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=rows[:, None] < Lq)
    tl.store(LSE + bh.to(tl.int64) * Lq + rows, tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("inf")),
             mask=rows < Lq)


# -----------------------------------------------------------------------------
# backward: delta = rowsum(dO * O); dK, dV (and the bias gradients) per key tile; dQ per query tile

@triton.jit(do_not_specialize=["Lq"])
def _delta_kernel(O, DO, DELTA, sob, soh, som, sdob, sdoh, sdom, H, Lq, D: tl.constexpr, BM: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = pid_m * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    inside = rows[:, None] < Lq
    o = tl.load(O + b * sob + h * soh + rows[:, None] * som + offs_d[None, :], mask=inside, other=0.0)
    do = tl.load(DO + b * sdob + h * sdoh + rows[:, None] * sdom + offs_d[None, :], mask=inside, other=0.0)
    tl.store(DELTA + bh.to(tl.int64) * Lq + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=rows < Lq)


@triton.jit(do_not_specialize=_LENGTHS)
def _bwd_kv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn,
                   sdob, sdoh, sdom, sdkb, sdkh, sdkn, sdvb, sdvh, sdvn,
                   QKIND, QSTEP, QSEQ, QPOS, KKIND, KSTEP, KSEQ, KPOS,
                   TABLE, DTABLE, max_dist, BIAS, sbb, sbh, sbm, sbn, DBIAS,
                   LIST, COUNT, SPLIT, H, Lq, Lk, n_qt, n_kt, qk_scale, scale,
                   D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr,
                   REL: tl.constexpr, DENSE: tl.constexpr, DENSE_GRAD: tl.constexpr,
                   PRECISION: tl.constexpr):
    pid_n, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    bh64 = bh.to(tl.int64)
    cols = pid_n * BN + tl.arange(0, BN)
    offs_m, offs_d = tl.arange(0, BM), tl.arange(0, D)
    col_in = cols < Lk
    k = tl.load(K + b * skb + h * skh + cols[:, None] * skn + offs_d[None, :], mask=col_in[:, None], other=0.0)
    v = tl.load(V + b * svb + h * svh + cols[:, None] * svn + offs_d[None, :], mask=col_in[:, None], other=0.0)
    kk, ks, kq, kp = _meta_of(KKIND, KSTEP, KSEQ, KPOS, b, cols, Lk, -1)
    dk = tl.zeros((BN, D), tl.float32)
    dv = tl.zeros((BN, D), tl.float32)
    entry = b * n_kt + pid_n
    # this program's own (2M+1) row of the table gradient: atomics contend only within the program
    drow = DTABLE + (entry * H + h) * (2 * max_dist + 1) + max_dist
    count, split = tl.load(COUNT + entry), tl.load(SPLIT + entry)
    for t in range(0, split):  # PARTIAL and FULL tiles
        code = tl.load(LIST + entry * n_qt + t)
        rows = (code // 2) * BM + offs_m
        row_in = rows < Lq
        q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + offs_d[None, :], mask=row_in[:, None], other=0.0)
        do = tl.load(DO + b * sdob + h * sdoh + rows[:, None] * sdom + offs_d[None, :], mask=row_in[:, None], other=0.0)
        lse = tl.load(LSE + bh64 * Lq + rows, mask=row_in, other=float("inf"))
        delta = tl.load(DELTA + bh64 * Lq + rows, mask=row_in, other=0.0)
        qk, qs, qq, qp = _meta_of(QKIND, QSTEP, QSEQ, QPOS, b, rows, Lq, 0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = _scores(s, b, h, rows, cols, Lq, Lk, code % 2, qk, qs, qq, qp, kk, ks, kq, kp,
                    TABLE, max_dist, BIAS, sbb, sbh, sbm, sbn, HAS_SEQ, REL, DENSE)
        dk, dv, ds = _dkdv_step(s, q, do, v, lse, delta, dk, dv, PRECISION)
        if REL:
            d = tl.minimum(tl.maximum(kp[None, :] - qp[:, None], -max_dist), max_dist)
            tl.atomic_add(drow + d, ds, mask=row_in[:, None] & col_in[None, :], sem="relaxed")
        if DENSE_GRAD:
            tl.store(DBIAS + ((bh64 * Lq) + rows[:, None]) * Lk + cols[None, :], ds,
                     mask=row_in[:, None] & col_in[None, :])
    if REL:
        for t in tl.range(split, count, num_stages=1):  # FAR tiles: one bias value, one add of the dS sum
            code = tl.load(LIST + entry * n_qt + t)
            rows = (code // 2) * BM + offs_m
            row_in = rows < Lq
            q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + offs_d[None, :], mask=row_in[:, None], other=0.0)
            do = tl.load(DO + b * sdob + h * sdoh + rows[:, None] * sdom + offs_d[None, :], mask=row_in[:, None],
                         other=0.0)
            lse = tl.load(LSE + bh64 * Lq + rows, mask=row_in, other=float("inf"))
            delta = tl.load(DELTA + bh64 * Lq + rows, mask=row_in, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + _far_bias(TABLE, h, code, max_dist)
            dk, dv, ds = _dkdv_step(s, q, do, v, lse, delta, dk, dv, PRECISION)
            tl.atomic_add(drow + (code % 2) * 2 * max_dist - max_dist, tl.sum(tl.sum(ds, 1), 0), sem="relaxed")
    tl.store(DK + b * sdkb + h * sdkh + cols[:, None] * sdkn + offs_d[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=col_in[:, None])
    tl.store(DV + b * sdvb + h * sdvh + cols[:, None] * sdvn + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=col_in[:, None])


@triton.jit(do_not_specialize=_LENGTHS)
def _bwd_q_kernel(Q, K, V, DO, LSE, DELTA, DQ, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn,
                  sdob, sdoh, sdom, sdqb, sdqh, sdqm,
                  QKIND, QSTEP, QSEQ, QPOS, KKIND, KSTEP, KSEQ, KPOS,
                  TABLE, max_dist, BIAS, sbb, sbh, sbm, sbn,
                  LIST, COUNT, SPLIT, H, Lq, Lk, n_qt, n_kt, qk_scale, scale,
                  D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr,
                  REL: tl.constexpr, DENSE: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    bh64 = bh.to(tl.int64)
    rows = pid_m * BM + tl.arange(0, BM)
    offs_n, offs_d = tl.arange(0, BN), tl.arange(0, D)
    row_in = rows < Lq
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + offs_d[None, :], mask=row_in[:, None], other=0.0)
    do = tl.load(DO + b * sdob + h * sdoh + rows[:, None] * sdom + offs_d[None, :], mask=row_in[:, None], other=0.0)
    lse = tl.load(LSE + bh64 * Lq + rows, mask=row_in, other=float("inf"))
    delta = tl.load(DELTA + bh64 * Lq + rows, mask=row_in, other=0.0)
    qk, qs, qq, qp = _meta_of(QKIND, QSTEP, QSEQ, QPOS, b, rows, Lq, 0)
    dq = tl.zeros((BM, D), tl.float32)
    entry = b * n_qt + pid_m
    count, split = tl.load(COUNT + entry), tl.load(SPLIT + entry)
    for t in range(0, split):  # PARTIAL and FULL tiles
        code = tl.load(LIST + entry * n_kt + t)
        cols, k, v = _kv_tile(K, V, b, h, code, offs_n, offs_d, Lk, skb, skh, skn, svb, svh, svn, BN)
        kk, ks, kq, kp = _meta_of(KKIND, KSTEP, KSEQ, KPOS, b, cols, Lk, -1)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        s = _scores(s, b, h, rows, cols, Lq, Lk, code % 2, qk, qs, qq, qp, kk, ks, kq, kp,
                    TABLE, max_dist, BIAS, sbb, sbh, sbm, sbn, HAS_SEQ, REL, DENSE)
        dq = _dq_step(s, do, k, v, lse, delta, dq, PRECISION)
    if REL:
        for t in range(split, count):  # FAR tiles
            code = tl.load(LIST + entry * n_kt + t)
            cols, k, v = _kv_tile(K, V, b, h, code, offs_n, offs_d, Lk, skb, skh, skn, svb, svh, svn, BN)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale + _far_bias(TABLE, h, code, max_dist)
            dq = _dq_step(s, do, k, v, lse, delta, dq, PRECISION)
    tl.store(DQ + b * sdqb + h * sdqh + rows[:, None] * sdqm + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=row_in[:, None])


# -----------------------------------------------------------------------------
# launchers

def _blocks(device, D, backward):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages). Small tiles under the interpreter, where a tile
    costs Python time, and so that the tests cross many tile boundaries. The CUDA choices follow
    the usual FlashAttention-2 settings for H100 and are not tuned yet (bench/RESULTS.md)."""
    if device.type != "cuda":
        return 16, 16, 1, 1
    # 8 warps at every head dim: with the metadata, the bias gather and the mask on top of the
    # FlashAttention tiles, 4 warps need more than 255 registers a thread and spill (kernels/aot.py).
    # At D = 128 the backward takes 32-key tiles and one stage: 64 x 64 spills in dK/dV; the price
    # is that dK/dV's 32-row matmuls compile to mma.sync instead of wgmma
    return ((64, 32, 8, 1) if D > 64 else (64, 64, 8, 3)) if backward else (128, 64, 8, 2 if D > 64 else 3)


def _new(like, dtype=None):
    if POISON:
        return torch.full(like.shape, float("nan"), dtype=dtype or like.dtype, device=like.device)
    return torch.empty(like.shape, dtype=dtype or like.dtype, device=like.device)


def _bias_args(meta):
    """Pointer and strides of the dense bias, expanded to (B, H, Lq, Lk) (zero strides broadcast)."""
    if meta["dense"] is None:
        return (meta["q_kind"], 0, 0, 0, 0)
    d = meta["dense"]
    return (d, *d.stride())


def _meta_args(meta):
    return (meta["q_kind"], meta["q_step"], meta["q_seq"], meta["q_pos"],
            meta["k_kind"], meta["k_step"], meta["k_seq"], meta["k_pos"])


def _forward(q, k, v, meta, scale, tiles, blocks):
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    BM, BN, warps, stages = blocks
    o = _new(q)
    lse = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device)
    n_qt, n_kt = triton.cdiv(Lq, BM), triton.cdiv(Lk, BN)
    _fwd_kernel[(n_qt, B * H)](
        q, k, v, o, lse, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        *_meta_args(meta), meta["table"], meta["max_dist"], *_bias_args(meta),
        tiles.q_list, tiles.q_count, tiles.q_split, H, Lq, Lk, n_qt, n_kt, scale * 1.4426950408889634,
        D=D, BM=BM, BN=BN, HAS_SEQ=meta["has_seq"], REL=meta["rel"], DENSE=meta["dense"] is not None,
        PRECISION=meta["precision"], num_warps=warps, num_stages=stages)
    return o, lse


def _backward(q, k, v, o, lse, do, meta, scale, tiles, blocks, dense_grad):
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    BM, BN, warps, stages = blocks
    n_qt, n_kt = triton.cdiv(Lq, BM), triton.cdiv(Lk, BN)
    delta = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device)  # rowsum(dO * O)
    _delta_kernel[(n_qt, B * H)](o, do, delta, *o.stride()[:3], *do.stride()[:3], H, Lq, D=D, BM=BM,
                                 num_warps=warps)
    dq, dk, dv = _new(q), _new(k), _new(v)
    rel = meta["rel"]
    width = 2 * meta["max_dist"] + 1
    dtable = torch.zeros((B * n_kt, H, width) if rel else (1,), dtype=torch.float32, device=q.device)
    dbias = torch.zeros((B, H, Lq, Lk) if dense_grad else (1,), dtype=torch.float32, device=q.device)
    common = (*_meta_args(meta),)
    qk_scale = scale * 1.4426950408889634
    flags = dict(D=D, BM=BM, BN=BN, HAS_SEQ=meta["has_seq"], REL=rel, DENSE=meta["dense"] is not None,
                 PRECISION=meta["precision"], num_warps=warps, num_stages=stages)
    _bwd_kv_kernel[(n_kt, B * H)](
        q, k, v, do, lse, delta, dk, dv, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *do.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], *common,
        meta["table"], dtable, meta["max_dist"], *_bias_args(meta), dbias,
        tiles.k_list, tiles.k_count, tiles.k_split, H, Lq, Lk, n_qt, n_kt, qk_scale, scale, DENSE_GRAD=dense_grad,
        **flags)
    _bwd_q_kernel[(n_qt, B * H)](
        q, k, v, do, lse, delta, dq, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *do.stride()[:3], *dq.stride()[:3], *common,
        meta["table"], meta["max_dist"], *_bias_args(meta),
        tiles.q_list, tiles.q_count, tiles.q_split, H, Lq, Lk, n_qt, n_kt, qk_scale, scale, **flags)
    return dq, dk, dv, (dtable.sum(0) if rel else None), (dbias if dense_grad else None)


def _sum_to(grad, shape):
    """Reduce a (B, H, Lq, Lk) gradient to the shape of the bias that was broadcast to it."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    dims = [i for i in range(4) if shape[i] == 1 and grad.shape[i] != 1]
    return grad.sum(dims, keepdim=True) if dims else grad  # sum([]) would reduce every dim


class _PseudoAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, dense, meta, scale, cache):
        D = q.shape[-1]
        blocks = _blocks(q.device, D, backward=False)
        tiles = _cached_tilemap(cache, meta, blocks, transposed=_blocks(q.device, D, True) == blocks)
        o, lse = _forward(q, k, v, meta, scale, tiles, blocks)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.meta, ctx.scale, ctx.tiles, ctx.blocks, ctx.cache = meta, scale, tiles, blocks, cache
        ctx.dense_shape = None if dense is None else dense.shape
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        if do.stride(-1) != 1:
            do = do.contiguous()
        blocks = _blocks(q.device, q.shape[-1], backward=True)
        tiles = ctx.tiles if ctx.tiles.k_list is not None and blocks == ctx.blocks else \
            _cached_tilemap(ctx.cache, ctx.meta, blocks, transposed=True)
        dense_grad = ctx.needs_input_grad[4]
        dq, dk, dv, dtable, dbias = _backward(q, k, v, o, lse, do, ctx.meta, ctx.scale, tiles, blocks, dense_grad)
        if dtable is not None and ctx.needs_input_grad[3]:
            dtable = dtable.to(ctx.meta["table_dtype"])
        else:
            dtable = None
        if dbias is not None:
            dbias = _sum_to(dbias, ctx.dense_shape).view(ctx.dense_shape).to(ctx.meta["dense_dtype"])
        return dq, dk, dv, dtable, dbias, None, None, None


def _cached_tilemap(cache, meta, blocks, transposed):
    """The tile map of `meta` for `blocks`, built once per cache: a caller that gives the same dict
    for the same metadata (every layer of a forward, and the backward) builds it once."""
    if cache is None:
        return tilemap_for(meta, blocks, transposed)
    key = (blocks, transposed)
    if key not in cache and (blocks, True) in cache:
        key = (blocks, True)  # a map with the k-major lists serves a forward too
    if key not in cache:
        cache[key] = tilemap_for(meta, blocks, transposed)
    return cache[key]


def tilemap_for(meta, blocks, transposed=True):
    rel = dict(q_pos=meta["q_pos"], k_pos=meta["k_pos"], max_dist=meta["max_dist"]) if meta["rel"] else {}
    return build_tile_map(meta["q_kind"], meta["q_step"], meta["q_seq"] if meta["has_seq"] else None,
                          meta["k_kind"], meta["k_step"], meta["k_seq"] if meta["has_seq"] else None,
                          blocks[0], blocks[1], transposed, **rel)


def prepare(q, k, v, q_kind, q_step, k_kind, k_step, k_valid=None, q_seq=None, k_seq=None, bias=None):
    """Check shapes, dtypes and layouts; return the metadata the kernels read (int32, contiguous,
    invalid keys folded into kind NEVER) and the bias pieces."""
    assert q.dim() == 4, f"pseudo_attention: q must be (B, H, Lq, D), got {tuple(q.shape)}"
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    assert k.dim() == 4 and k.shape == v.shape and k.shape[:2] == (B, H) and k.shape[3] == D, \
        f"pseudo_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match"
    assert D in HEAD_DIMS, f"pseudo_attention: head dim {D} not in {HEAD_DIMS}"
    assert q.dtype in DTYPES and k.dtype == q.dtype and v.dtype == q.dtype, \
        f"pseudo_attention: q, k, v must share one of {DTYPES}, got {q.dtype}, {k.dtype}, {v.dtype}"
    assert q.device == k.device == v.device, "pseudo_attention: q, k, v on different devices"
    for name, x in (("q", q), ("k", k), ("v", v)):
        assert x.stride(-1) == 1, f"pseudo_attention: {name} must be contiguous in its last (head) dim"
    assert Lq >= 1 and Lk >= 1, "pseudo_attention: empty query or key sequence"

    def ints(x, name, L):
        assert x.shape == (B, L), f"pseudo_attention: {name} must be (B, L) = {(B, L)}, got {tuple(x.shape)}"
        assert not x.is_floating_point(), f"pseudo_attention: {name} must be an integer tensor, got {x.dtype}"
        assert x.device == q.device, f"pseudo_attention: {name} is on {x.device}, q on {q.device}"
        return x.to(torch.int32).contiguous()

    meta = dict(q_kind=ints(q_kind, "q_kind", Lq), q_step=ints(q_step, "q_step", Lq),
                k_kind=ints(k_kind, "k_kind", Lk), k_step=ints(k_step, "k_step", Lk))
    if k_valid is not None:
        assert k_valid.shape == (B, Lk), f"pseudo_attention: k_valid must be (B, Lk) = {(B, Lk)}"
        meta["k_kind"] = torch.where(k_valid.to(q.device).bool(), meta["k_kind"], NEVER).to(torch.int32).contiguous()
    assert (q_seq is None) == (k_seq is None), "pseudo_attention: give both q_seq and k_seq, or neither"
    meta["has_seq"] = q_seq is not None
    meta["q_seq"] = ints(q_seq, "q_seq", Lq) if q_seq is not None else meta["q_kind"]
    meta["k_seq"] = ints(k_seq, "k_seq", Lk) if k_seq is not None else meta["k_kind"]
    meta["precision"] = "ieee" if q.dtype == torch.float32 else "tf32"
    meta["rel"] = isinstance(bias, RelPosBias)
    table = dense = None
    if meta["rel"]:
        table = bias.by_distance
        M = int(bias.max_distance)
        assert table.dim() == 2 and table.shape == (H, 2 * M + 1), \
            f"pseudo_attention: by_distance must be (H, 2M+1) = {(H, 2 * M + 1)}, got {tuple(table.shape)}"
        meta.update(q_pos=ints(bias.q_pos, "q_pos", Lq), k_pos=ints(bias.k_pos, "k_pos", Lk),
                    table=table.detach().float().contiguous(), max_dist=M, table_dtype=table.dtype)
    else:
        meta.update(q_pos=meta["q_kind"], k_pos=meta["k_kind"], table=meta["q_kind"], max_dist=0)
    meta["dense"] = None
    if bias is not None and not meta["rel"]:
        dense = bias
        assert dense.is_floating_point() and dense.device == q.device, \
            "pseudo_attention: a dense bias must be a float tensor on q's device"
        assert dense.dim() <= 4, f"pseudo_attention: bias {tuple(dense.shape)} has more than 4 dims"
        meta["dense"] = dense.detach().expand(B, H, Lq, Lk)
        meta["dense_dtype"] = dense.dtype
    return meta, table, dense


def pseudo_attention(q, k, v, q_kind, q_step, k_kind, k_step, k_valid=None, q_seq=None, k_seq=None,
                     bias=None, scale=None, cache=None):
    """Masked attention from per-token metadata (see kernels.attention for the rule).

    q: (B, H, Lq, D), k, v: (B, H, Lk, D), fp16 / bf16 / fp32, D in (16, 32, 64, 128), last dim
    contiguous. Metadata: (B, Lq) / (B, Lk) int tensors; k_valid (B, Lk) bool. bias: None, a
    RelPosBias (computed in the kernel, gradient to by_distance) or a float tensor broadcastable to
    (B, H, Lq, Lk) (gradient supported). Returns (B, H, Lq, D) in q's dtype; a query that sees no
    key returns 0 and passes back zero gradients. cache: an optional dict the caller keeps for as
    long as the metadata is unchanged; the tile maps are built once into it and reused."""
    assert q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1", \
        "pseudo_attention: CPU tensors need TRITON_INTERPRET=1 set before triton is imported"
    meta, table, dense = prepare(q, k, v, q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, bias)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    return _PseudoAttention.apply(q, k, v, table, dense, meta, scale, cache)


# -----------------------------------------------------------------------------
# ahead-of-time compile cases (kernels/aot.py): the launchers on CPU tensors shaped like the model's

def aot_cases():
    """[(case name, thunk)]: each thunk runs the forward and backward launchers with the CUDA block
    choice on CPU tensors like a base-size layer's (B=2, H=12, L=768, PMLM layout). Variants: no bias,
    relative bias (the model's self-attention), packed sequences, a dense bias without and with its
    gradient, decoding (one query against 768 cached keys), and MLAE decoder (b)'s cross-attention
    with its relative bias (the [MASK]s of 15% of 768 positions against the other 85%, the latents,
    at their original positions, padded)."""
    cuda = torch.device("cuda")
    cases = []
    for variant in ("norel", "rel", "seq", "dense", "dense_grad", "decode", "cross"):
        for dtype in (torch.bfloat16, torch.float16):
            for D in (64, 128):
                cases.append((f"{variant}-{str(dtype)[6:]}-d{D}",
                              lambda variant=variant, dtype=dtype, D=D: _aot_launch(cuda, variant, dtype, D)))
    return cases


def _aot_launch(cuda, variant, dtype, D, B=2, H=12, L=768):
    g = torch.Generator().manual_seed(0)
    if variant == "cross":
        return _aot_cross(cuda, dtype, D, B, H, L, g)
    Lq = 1 if variant == "decode" else L
    q = torch.randn(B, Lq, H, D, generator=g).to(dtype).transpose(1, 2)  # the model's (B, L, H, D) view
    k, v = (torch.randn(B, L, H, D, generator=g).to(dtype).transpose(1, 2) for _ in range(2))
    kind = torch.zeros(B, L, dtype=torch.long)
    kind[:, 512:], kind[:, 640:] = 1, 2
    step = torch.zeros(B, L, dtype=torch.long)
    step[:, 512:640] = step[:, 640:] = torch.arange(128) // 8 + 1
    pos = torch.arange(L).expand(B, L)
    q_kind, q_step, q_pos = (x[:, -Lq:] for x in (kind, step, pos))
    seq = (torch.arange(L) // 384).expand(B, L) if variant == "seq" else None
    bias = rel_pos_bias(torch.randn(H, 32, generator=g), q_pos, pos, 128)
    if variant == "norel":
        bias = None
    elif variant.startswith("dense"):
        bias = torch.randn(1, H, Lq, L, generator=g).to(dtype)
    meta, _, _ = prepare(q, k, v, q_kind, q_step, kind, step, None, None if seq is None else seq[:, -Lq:], seq, bias)
    scale = D ** -0.5
    fb, bb = _blocks(cuda, D, backward=False), _blocks(cuda, D, backward=True)
    o, lse = _forward(q, k, v, meta, scale, tilemap_for(meta, fb), fb)
    _backward(q, k, v, torch.zeros_like(q), torch.zeros(B, H, Lq), torch.randn_like(q), meta, scale,
              tilemap_for(meta, bb), bb, dense_grad=variant == "dense_grad")


def _aot_cross(cuda, dtype, D, B, H, L, g):
    masked = torch.stack([torch.randperm(L, generator=g) < round(0.15 * L) for _ in range(B)])  # (B, L)
    q_pos = torch.stack([m.nonzero()[:, 0] for m in masked])  # every row masks as many
    keep = [(~m).nonzero()[:, 0] for m in masked]
    Lk = len(keep[0])
    k_pos = torch.stack([keep[0], torch.cat([keep[1][:-9], keep[1].new_zeros(9)])])  # the second row 9 shorter
    k_valid = torch.arange(Lk)[None] < torch.tensor([Lk, Lk - 9])[:, None]
    Lq = q_pos.shape[1]
    q = torch.randn(B, Lq, H, D, generator=g).to(dtype).transpose(1, 2)
    k, v = (torch.randn(B, Lk, H, D, generator=g).to(dtype).transpose(1, 2) for _ in range(2))
    q_kind, k_kind = torch.zeros(B, Lq, dtype=torch.long), torch.zeros(B, Lk, dtype=torch.long)
    bias = rel_pos_bias(torch.randn(H, 32, generator=g), q_pos, k_pos, 128)
    meta, _, _ = prepare(q, k, v, q_kind, q_kind, k_kind, k_kind, k_valid, None, None, bias)
    scale = D ** -0.5
    fb, bb = _blocks(cuda, D, backward=False), _blocks(cuda, D, backward=True)
    _forward(q, k, v, meta, scale, tilemap_for(meta, fb), fb)
    _backward(q, k, v, torch.zeros_like(q), torch.zeros(B, H, Lq), torch.randn_like(q), meta, scale,
              tilemap_for(meta, bb), bb, dense_grad=False)
