"""Block-sparse pseudo-mask attention in Triton: forward, backward, autograd wrapper.

    out = pseudo_attention(q, k, v, meta, bias, scale, cache, tuning)

Same contract as kernels.attention and the same numbers as kernels/reference.py. The algorithm is
FlashAttention-2 (Dao, 2023): the forward pass streams key tiles through an online softmax and
saves only the log-sum-exp of each query row; the backward pass recomputes the probabilities tile
by tile, one kernel for dK/dV (a program per key tile) and one for dQ (a program per query tile),
so that no gradient of q, k or v needs an atomic add (kernels/attention_backward.py). With
kernels/attention_plan.Tuning's fused_dq (the default) the dK/dV kernel also adds each tile's dQ by
atomics and the dQ kernel does not run (head dims up to 64), as FlashAttention-2's own backward
does. What is added for the pseudo-masked LM (UniLMv2, Bao et al. 2020, section 3.2):

  * the mask is never stored: each token carries two int32 codes from which the rule is two
    comparisons per pair (kernels/tilemap.py), computed once per metadata by one launch;
  * a tile map (kernels/tilemap.py, one launch per metadata for forward and backward) lists the
    PARTIAL, FULL and FAR tiles of every query tile (and of every key tile, for dK/dV) apart, and
    each kernel has a loop compiled for each class, all run by one helper (attention_tiles._q_program,
    attention_backward._kv_loop): EMPTY tiles are never touched, FULL tiles skip the rule and every
    bounds check, FAR tiles also read one bias scalar;
  * a T5 relative position bias (Raffel et al. 2020, section 2.1) is read from a small (H, 2M+1)
    table (pre-scaled by log2 e once per call) by clamped position distance, inside the kernel; its
    gradient is summed per distance inside each dK/dV program, in registers where the program's keys
    run at consecutive positions (atomics pair by pair where they do not), written once per program
    and folded to the table afterwards (kernels/attention_backward.py);
  * a dense additive bias broadcastable to (B, H, Lq, Lk) is also accepted: it is loaded tile by
    tile through (possibly zero) strides, and when it needs a gradient the dK/dV kernel writes dS
    for every visited tile into a zeroed (B, H, Lq, Lk) float32 buffer, reduced to its shape after.

What a call costs besides the kernels: nothing on the device when `cache` (a dict the caller keeps
for as long as the metadata is unchanged; the model keeps one per forward) already holds the codes,
the map and the bias table, else 3-4 launches for the codes and map and 2 for the table. One
training step of an n-layer model with a relative bias therefore launches 5 + 7 n times for its
attention in float32: codes, map and table once (5), and per layer the forward (1) and the
backward's delta and dK/dV kernels, the dQ buffer's zeroing (the dQ kernel, with dQ apart),
the table gradient's sum over programs and its fold into a zeroed table (3 + 3); in 16 bits a
fused dQ's cast adds one. No host sync (tests/test_attention_in_model.py counts them).

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
from .attention_plan import DTYPES, HEAD_DIMS, Config, Tuning, extended_table  # noqa: F401
from .attention_plan import (
    LOG2E,
    TUNING,
    Codes,
    DenseBias,
    Flags,
    Lists,
    RelBias,
    fold_table_grad,
    grad_blocks,
    prepare,
    rows_of,
)
from .attention_tiles import (
    _LENGTHS,
    WINDOW_PAD,
    BiasRead,
    KeySide,
    Program,
    QTile,
    _far_pair,
    _q_codes,
    _q_program,
    _rows,
    _softmax_step,
)
from .reference import RelPosBias


# -----------------------------------------------------------------------------
# forward: one program per (query tile, batch * head)


@triton.jit
def _fwd_tile(carry, s, k, v, qt, F: tl.constexpr, CLASS: tl.constexpr):
    """One key tile of the online softmax (PARTIAL and EDGE tiles may hold -inf: guarded)."""
    m_i, l_i, acc = carry
    return _softmax_step(s, v, m_i, l_i, acc, CLASS % 4 == 1, F.PRECISION)


@triton.jit(do_not_specialize=_LENGTHS)
def _fwd_kernel(Q, K, V, O, LSE, C, T, R, X, H, Lq, Lk, n_qt, n_kt, qk_scale, F: tl.constexpr):
    """Grid (n_qt, B * H), a program per query tile of F.BM rows, visiting its key tiles from the
    q-major lists T (attention_plan.Lists). Q, K, V, O: attention_plan.Rows; C: Codes; R: RelBias; X:
    DenseBias; F: Flags."""
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = pid_m * F.BM + tl.arange(0, F.BM)
    offs_d = tl.arange(0, F.D)
    q = _rows(Q.ptr + b * Q.sb + h * Q.sh, rows, offs_d, Q.sm, Lq, True)
    qa, qb, qq, qp = _q_codes(C.QC, C.sq, C.rq, b, rows, Lq, True)
    W = R.TABLE + h * 4 * F.TW + R.max_dist + WINDOW_PAD  # distance 0 of this head's extended table (copy 0)
    far_lo, far_hi = _far_pair(W, R.max_dist, F.REL)  # the bias of FAR tiles, read before their loop
    carry = (
        tl.full((F.BM,), float("-inf"), tl.float32),
        tl.zeros((F.BM,), tl.float32),
        tl.zeros((F.BM, F.D), tl.float32),
    )
    entry = b * n_qt + pid_m
    m_i, l_i, acc = _q_program(
        T.LIST + entry * 4 * n_kt,
        T.COUNT + entry * 4,
        n_kt,
        carry,
        QTile(q, qa, qb, qq, qp, rows),
        KeySide(K.ptr + b * K.sb + h * K.sh, V.ptr + b * V.sb + h * V.sh, K.sm, V.sm),
        BiasRead(W, far_lo, far_hi, R.max_dist),
        Program(C, X, b, h, Lq, Lk, qk_scale),
        _fwd_tile,
        F,
    )
    seen = l_i > 0.0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    tl.store(
        O.ptr + b * O.sb + h * O.sh + rows[:, None] * O.sm + offs_d[None, :],
        out.to(O.ptr.dtype.element_ty),
        mask=rows[:, None] < Lq,
    )
    tl.store(
        LSE + bh.to(tl.int64) * Lq + rows,
        tl.where(seen, m_i + tl.log2(tl.where(seen, l_i, 1.0)), float("inf")),
        mask=rows < Lq,
    )


# -----------------------------------------------------------------------------
# launchers


def _new(like, dtype=None):
    """The uninitialised buffer of an output or gradient the kernels write whole (the tests fill it
    with NaN instead, so that an element left unwritten fails)."""
    return torch.empty(like.shape, dtype=dtype or like.dtype, device=like.device)


def _dense(launch, dbias=None):
    """The dense bias expanded to (B, H, Lq, Lk) (zero strides broadcast) and its gradient's buffer, as
    attention_plan.DenseBias; pointers the kernels never read where there is none."""
    d = launch.dense
    if d is None:
        return DenseBias(launch.qc, 0, 0, 0, 0, launch.qc if dbias is None else dbias)
    return DenseBias(d, *d.stride(), launch.qc if dbias is None else dbias)


def _codes(launch):
    qc, kc = launch.qc, launch.kc
    return Codes(qc, kc, qc.shape[1] * qc.shape[2], kc.shape[1] * kc.shape[2], qc.shape[2], kc.shape[2])


def _flags(launch, D, blocks, **grads):
    """The kernels' constexpr (attention_plan.Flags) for blocks (BM, BN); grads: REL_GRAD, DENSE_GRAD,
    FUSED_DQ where a dK/dV kernel computes them."""
    rel = launch.rel
    return Flags(
        D=D,
        BM=blocks[0],
        BN=blocks[1],
        TW=launch.table.shape[2] if rel else 16,
        NB=grad_blocks(launch.max_dist, blocks[1]),
        HAS_SEQ=launch.has_seq,
        REL=rel,
        REL_GRAD=grads.get("REL_GRAD", False),
        DENSE=launch.dense is not None,
        DENSE_GRAD=grads.get("DENSE_GRAD", False),
        FUSED_DQ=grads.get("FUSED_DQ", False),
        GRAD_WINDOWS=launch.windows and grads.get("REL_GRAD", False),
        PRECISION=launch.precision,
    )


def _forward(q, k, v, launch):
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    cfg, tiles = launch.cfg, launch.tiles
    o = _new(q)
    lse = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device)
    n_qt, n_kt = triton.cdiv(Lq, cfg.BM), triton.cdiv(Lk, cfg.BN)
    _fwd_kernel[(n_qt, B * H)](
        rows_of(q),
        rows_of(k),
        rows_of(v),
        rows_of(o),
        lse,
        _codes(launch),
        Lists(tiles.q_list, tiles.q_count),
        RelBias(launch.table, lse, launch.max_dist),
        _dense(launch),
        H,
        Lq,
        Lk,
        n_qt,
        n_kt,
        launch.scale * LOG2E,
        F=_flags(launch, D, (cfg.BM, cfg.BN)),
        num_warps=cfg.fwd_warps,
        num_stages=cfg.fwd_stages,
    )
    return o, lse


def _backward(q, k, v, o, lse, do, launch, dense_grad, table_grad=True):
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    cfg, tiles = launch.cfg, launch.tiles
    n_qt, n_kt = triton.cdiv(Lq, cfg.BM), triton.cdiv(Lk, cfg.BN)
    n_qs, n_ks = triton.cdiv(Lq, cfg.BMK), triton.cdiv(Lk, cfg.BNK)
    delta = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device)  # rowsum(dO * O)
    _delta_kernel[(n_qt, B * H)](
        o, do, delta, *o.stride()[:3], *do.stride()[:3], H, Lq, D=D, BM=cfg.BM, num_warps=cfg.dq_warps
    )
    fused = launch.fused
    dk, dv = _new(k), _new(v)
    # fused: the dK/dV kernel adds every tile's dQ into a zeroed float32 buffer
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if fused else _new(q)
    rel_grad = launch.rel and table_grad
    flags = _flags(launch, D, (cfg.BMK, cfg.BNK), REL_GRAD=rel_grad, DENSE_GRAD=dense_grad, FUSED_DQ=fused)
    # a row of the table's gradient per dK/dV program, each written whole by its program
    dtable = (
        torch.empty((B * n_ks, H, flags.NB * flags.BN), dtype=torch.float32, device=q.device) if rel_grad else delta
    )
    dbias = torch.zeros((B, H, Lq, Lk), dtype=torch.float32, device=q.device) if dense_grad else None
    scale = launch.scale
    codes, rel, qk_scale = _codes(launch), RelBias(launch.table, dtable, launch.max_dist), scale * LOG2E
    _bwd_kv_kernel[(n_ks, B * H)](
        rows_of(q),
        rows_of(k),
        rows_of(v),
        rows_of(do),
        rows_of(dk),
        rows_of(dv),
        rows_of(dq),
        lse,
        delta,
        codes,
        Lists(tiles.k_list, tiles.k_count),
        rel,
        _dense(launch, dbias),
        H,
        Lq,
        Lk,
        n_qs,
        n_ks,
        qk_scale,
        scale,
        F=flags,
        num_warps=cfg.kv_warps,
        num_stages=cfg.kv_stages,
    )
    if fused:
        dq = dq.to(q.dtype)
    else:
        _bwd_q_kernel[(n_qt, B * H)](
            rows_of(q),
            rows_of(k),
            rows_of(v),
            rows_of(do),
            rows_of(dq),
            lse,
            delta,
            codes,
            Lists(tiles.q_list, tiles.q_count),
            rel,
            _dense(launch),
            H,
            Lq,
            Lk,
            n_qt,
            n_kt,
            qk_scale,
            scale,
            F=_flags(launch, D, (cfg.BM, cfg.BN)),
            num_warps=cfg.dq_warps,
            num_stages=cfg.dq_stages,
        )
    return dq, dk, dv, (fold_table_grad(dtable, launch.max_dist, cfg.BNK) if rel_grad else None), dbias


def _sum_to(grad, shape):
    """Reduce a (B, H, Lq, Lk) gradient to the shape of the bias that was broadcast to it."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    dims = [i for i in range(4) if shape[i] == 1 and grad.shape[i] != 1]
    return grad.sum(dims, keepdim=True) if dims else grad  # sum([]) would reduce every dim


class _PseudoAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, dense, launch):
        o, lse = _forward(q, k, v, launch)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.launch = launch
        ctx.dense_shape = None if dense is None else dense.shape
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        if do.stride(-1) != 1:
            do = do.contiguous()
        dense_grad = ctx.needs_input_grad[4]
        dq, dk, dv, dtable, dbias = _backward(
            q, k, v, o, lse, do, ctx.launch, dense_grad, table_grad=ctx.needs_input_grad[3]
        )
        dtable = dtable.to(ctx.launch.table_dtype) if dtable is not None else None
        if dbias is not None:
            dbias = _sum_to(dbias, ctx.dense_shape).view(ctx.dense_shape).to(ctx.launch.dense_dtype)
        return dq, dk, dv, dtable, dbias, None


def pseudo_attention(q, k, v, meta, bias=None, scale=None, cache=None, tuning=TUNING):
    """Masked attention from per-token metadata (see kernels.attention for the rule).

    q: (B, H, Lq, D), k, v: (B, H, Lk, D), fp16 / bf16 / fp32, D in (16, 32, 64, 128), last dim
    contiguous. meta: a MaskMeta, (B, Lq) / (B, Lk) int tensors, steps in (-2^30, 2^30); k_valid
    (B, Lk) bool. bias: None, a RelPosBias (computed in the kernel, gradient to by_distance) or a float
    tensor broadcastable to (B, H, Lq, Lk) (gradient supported). Returns (B, H, Lq, D) in q's
    dtype; a query that sees no key returns 0 and passes back zero gradients. cache: an optional
    dict the caller keeps for as long as the metadata is unchanged; the codes, the tile map and the
    scaled bias table are built once into it and reused. tuning: how the kernels are launched
    (attention_plan.Tuning)."""
    assert q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1", (
        "pseudo_attention: CPU tensors need TRITON_INTERPRET=1 set before triton is imported"
    )
    grad = torch.is_grad_enabled() and any(
        x is not None and x.requires_grad
        for x in (q, k, v, bias if not isinstance(bias, RelPosBias) else bias.by_distance)
    )
    launch, table, dense = prepare(q, k, v, meta, bias, cache, grad, scale, tuning)
    return _PseudoAttention.apply(q, k, v, table, dense, launch)
