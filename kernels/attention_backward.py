"""The backward kernels of the pseudo-mask attention (kernels/pseudo_attention.py has the forward, the
launchers and the conventions), FlashAttention-2's backward (Dao, 2023, section 3.1.2): delta =
rowsum(dO * O); dK and dV per key tile, with each tile's dQ added by atomics where dQ is fused
(attention_plan.Tuning.fused_dq), and the relative bias table's gradient; dQ per query tile where it is not.
Each kernel recomputes the probabilities of the tiles it visits from the saved log-sum-exp, one loop
per tile class (kernels/tilemap.py), each compiled for its class alone (kernels/attention_tiles.py).

The table's gradient (T5's bias, Raffel et al. 2020, section 2.1) is dS summed per clamped distance.
A dK/dV program owns one row of it, slot a holding distance clamp(a - M - BN, -M, M), and writes the
row once, at its end. Where the program's keys run at consecutive positions k0, k0 + 1, ... (a text's
key tiles: the PMLM context, a seq2seq source or target), query row i's pairs fill the window of
slots r_i .. r_i + BN - 1, r_i = clamp(k0 - pos_i, -M - BN, M) + M + BN, and the row is summed in
registers as acc[u, c] = slot c * BN + u: a gather turns each query's column so that row u holds its
pair whose slot is u modulo BN, and two products with 0/1 matrices add that to block r_i // BN or the
next (_window_grad). A FAR tile adds one sum at -M or +M. Where the keys do not run (MLAE's latents,
a key tile across the PMLM appended part), and at head dims past attention_plan.GRAD_WINDOWS_MAX_D,
each pair is added into the row by an atomic. Where the windows apply, the PARTIAL and EDGE loops are
compiled twice, once by windows and once by atomics, and each program runs the pair its keys take:
neither copy carries the other's code.
"""

from typing import NamedTuple

import triton
import triton.language as tl

from .attention_tiles import (
    _EDGE,
    _FAR,
    _FULL,
    _GATHER,
    _LENGTHS,
    _PARTIAL,
    WINDOW_PAD,
    BiasRead,
    KeySide,
    Program,
    QTile,
    _dense_t,
    _dkdv_step,
    _dq_step,
    _edge,
    _entry,
    _far,
    _far_pair,
    _k_codes,
    _near_t,
    _q_codes,
    _q_program,
    _rows,
    _rows_t,
    _see_t,
    _vec,
    _window_t,
)
from .tilemap import _BIG, _NONE_K


# -----------------------------------------------------------------------------
# delta = rowsum(dO * O)


@triton.jit(do_not_specialize=["Lq"])
def _delta_kernel(O, DO, DELTA, sob, soh, som, sdob, sdoh, sdom, H, Lq, D: tl.constexpr, BM: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = pid_m * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    o = _rows(O + b * sob + h * soh, rows, offs_d, som, Lq, True)
    do = _rows(DO + b * sdob + h * sdoh, rows, offs_d, sdom, Lq, True)
    tl.store(DELTA + bh.to(tl.int64) * Lq + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=rows < Lq)


# -----------------------------------------------------------------------------
# dK, dV (dQ fused, the table's gradient) per key tile


class _Keys(NamedTuple):
    """A dK/dV program's key tile, read once: K, V, their codes and columns, and k0, the first of the
    positions k0, k0 + 1, ... where its live keys run, if they do (the module docstring)."""

    k: object
    v: object
    ka: object
    kb: object
    kq: object
    kp: object
    cols: object
    k0: object


class _Queries(NamedTuple):
    """Where a dK/dV program reads its query tiles and adds their dQ: q, dO, log-sum-exp, delta and
    dQ of its (b, h), rows sqm, sdom and sdqm apart, and the softmax scale (dQ = dS K * scale); ROW, its
    row of the table's gradient; DBIAS, its (Lq, Lk) plane of the dense bias's gradient."""

    Q: object
    DO: object
    LSE: object
    DELTA: object
    DQ: object
    sqm: object
    sdom: object
    sdqm: object
    scale: object
    ROW: object
    DBIAS: object


class _Sums(NamedTuple):
    """What a dK/dV program sums over its tiles: dK, dV, its row of the table's gradient as (BN, NB)
    blocks (the module docstring), and its FAR tiles' dS at -M and +M."""

    dk: object
    dv: object
    table: object
    far_lo: object
    far_hi: object


@triton.jit
def _window_grad(table, ds, qp, k0, max_dist, F: tl.constexpr):
    """table (BN, NB) += the pairs of ds (BN keys at positions k0 + j, BM queries at qp; in q's dtype, as
    dK's product takes dS), pair (j, i) at slot r_i + j, r_i = clamp(k0 - qp_i, -M - BN, M) + M + BN (the
    module docstring). A window clamped at either end holds only distances past +-M, which the row's
    fold clamps the same way."""
    offs_n, offs_c = tl.arange(0, F.BN), tl.arange(0, F.NB)
    r = tl.minimum(tl.maximum(k0 - qp, -max_dist - F.BN), max_dist) + max_dist + F.BN  # (BM,) >= 0
    blk, rho = r // F.BN, r % F.BN
    g = tl.gather(ds, (offs_n[:, None] - rho[None, :]) & (F.BN - 1), 0)  # row u: the pair at slot u mod BN
    own = offs_n[:, None] >= rho[None, :]  # that slot is blk * BN + u; else it is (blk + 1) * BN + u
    table = tl.dot(
        tl.where(own, g, 0.0), (blk[:, None] == offs_c[None, :]).to(ds.dtype), table, input_precision=F.PRECISION
    )
    return tl.dot(
        tl.where(own, 0.0, g), (blk[:, None] + 1 == offs_c[None, :]).to(ds.dtype), table, input_precision=F.PRECISION
    )


@triton.jit
def _kv_tile(code, sums, keys, qs, bias, P, F: tl.constexpr, CLASS: tl.constexpr, RUN: tl.constexpr):
    """One query tile of the dK/dV kernel (keys along dim 0), compiled for one class; EDGE is the
    PARTIAL query tile that straddles Lq. Adds its dQ (FUSED_DQ), the table's gradient (REL_GRAD: by
    windows where the program's keys run, RUN, and F.GRAD_WINDOWS; else pair by pair by atomics) and
    writes its dS (DENSE_GRAD)."""
    MASKED: tl.constexpr = CLASS == 5
    if CLASS == 3:
        qt = code // 2
    else:
        qt = code
    offs_d = tl.arange(0, F.D)
    rows = qt * F.BM + tl.arange(0, F.BM)
    q_t = _rows_t(qs.Q, rows, offs_d, qs.sqm, P.Lq, MASKED)
    do = _rows(qs.DO, rows, offs_d, qs.sdom, P.Lq, MASKED)
    lse = _vec(qs.LSE, rows, P.Lq, float("inf"), MASKED)
    delta = _vec(qs.DELTA, rows, P.Lq, 0.0, MASKED)
    qa, qb, qq, qp = _q_codes(P.C.QC, P.C.sq, P.C.rq, P.b, rows, P.Lq, MASKED)
    d = 0
    s_t = tl.dot(keys.k, q_t, input_precision=F.PRECISION) * P.qk_scale
    if F.REL:
        if CLASS == 2:
            s_t += _window_t(
                bias.W - bias.max_dist - WINDOW_PAD, F.TW, qp, keys.k0, bias.max_dist, tl.arange(0, F.BN), F.BN
            )
        elif CLASS == 3:
            s_t += _far(code, bias.far_lo, bias.far_hi)
        else:
            bias_t, d = _near_t(bias.W, qp, keys.kp, bias.max_dist)
            s_t += bias_t
    if F.DENSE:
        X = P.X
        s_t += _dense_t(X.BIAS, P.b, P.h, X.sb, X.sh, X.sm, X.sn, rows, keys.cols, P.Lq, P.Lk)
    if CLASS % 4 == 1:  # PARTIAL or EDGE: the rule, pair by pair
        s_t = tl.where(_see_t(qa, qb, qq, keys.ka, keys.kb, keys.kq, F.HAS_SEQ), s_t, float("-inf"))
    dk, dv, ds_t = _dkdv_step(s_t, q_t, do, keys.k, keys.v, lse, delta, sums.dk, sums.dv, F.PRECISION)
    if F.FUSED_DQ:
        # dQ^T = K^T dS^T: D rows, so that a warpgroup's wgmma takes it at BM = 32 (dS K would have BM rows)
        dq_t = tl.dot(tl.trans(keys.k), ds_t.to(keys.k.dtype), input_precision=F.PRECISION) * qs.scale  # (D, BM)
        tl.atomic_add(
            qs.DQ + rows[None, :] * qs.sdqm + offs_d[:, None], dq_t, mask=(rows < P.Lq)[None, :], sem="relaxed"
        )
    table, far_lo, far_hi = sums.table, sums.far_lo, sums.far_hi
    if F.REL_GRAD:
        if CLASS == 3:
            total = tl.sum(tl.sum(ds_t, 1), 0)
            far_hi += tl.where(code % 2 == 1, total, 0.0)
            far_lo += tl.where(code % 2 == 1, 0.0, total)
        elif F.GRAD_WINDOWS and RUN:
            table = _window_grad(table, ds_t.to(keys.k.dtype), qp, keys.k0, bias.max_dist, F)
        else:
            if CLASS == 2:
                d = tl.minimum(tl.maximum(keys.kp[:, None] - qp[None, :], -bias.max_dist), bias.max_dist)
            tl.atomic_add(qs.ROW + d + bias.max_dist + F.BN, ds_t, sem="relaxed")
    if F.DENSE_GRAD:
        tl.store(
            qs.DBIAS + rows[None, :] * P.Lk + keys.cols[:, None],
            ds_t,
            mask=(rows < P.Lq)[None, :] & (keys.cols < P.Lk)[:, None],
        )
    return _Sums(dk, dv, table, far_lo, far_hi)


@triton.jit
def _kv_loop(lst, start, end, sums, keys, qs, bias, P, F: tl.constexpr, CLASS: tl.constexpr, RUN: tl.constexpr = True):
    """Entries start..end-1 of one class's list, the next entry read a tile ahead (attention_tiles._entry);
    RUN: the program's keys run (a FULL tile's do, a GATHER tile's do not: kernels/tilemap.py)."""
    nxt = _entry(lst, start, end)
    for t in range(start, end):
        code, nxt = nxt, _entry(lst, t + 1, end)
        sums = _kv_tile(code, sums, keys, qs, bias, P, F, CLASS, RUN)
    return sums


@triton.jit(do_not_specialize=_LENGTHS)
def _bwd_kv_kernel(
    Q, K, V, DO, DK, DV, DQ, LSE, DELTA, C, T, R, X, H, Lq, Lk, n_qt, n_kt, qk_scale, scale, F: tl.constexpr
):
    """Grid (n_kt, B * H), a program per key tile of F.BN keys, visiting its query tiles of F.BM rows
    from the k-major lists T (attention_plan.Lists). Q, K, V, DO, DK, DV, DQ: attention_plan.Rows; C:
    Codes; R: RelBias; X: DenseBias; F: Flags. FUSED_DQ: each tile's dQ is added into the float32 DQ
    (zeroed by the launcher), and the dQ kernel does not run. REL_GRAD: the program's row of the
    table's gradient, R.DTABLE[(b * n_kt + pid) * H + h]."""
    pid_n, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    bh64 = bh.to(tl.int64)
    offs_n, offs_d = tl.arange(0, F.BN), tl.arange(0, F.D)
    cols = pid_n * F.BN + offs_n
    k = _rows(K.ptr + b * K.sb + h * K.sh, cols, offs_d, K.sm, Lk, True)
    v = _rows(V.ptr + b * V.sb + h * V.sh, cols, offs_d, V.sm, Lk, True)
    ka, kb, kq, kp = _k_codes(C.KC, C.sk, C.rk, b, cols, Lk, True)
    # the live keys' positions run k0, k0 + 1, ... if position minus column is one value over them
    # (dead keys, padding and past Lk, are never seen: their dS is 0 wherever their slot falls)
    live = (ka != _BIG) | (kb != _NONE_K)
    k0 = tl.max(tl.where(live, kp - offs_n, -_BIG), 0)
    if F.GRAD_WINDOWS and F.REL_GRAD:
        krun = tl.min(tl.where(live, kp - offs_n, k0), 0) == k0
    else:  # every pair's gradient by an atomic, or no table's gradient: one PARTIAL and one EDGE loop
        krun = False
    keys = _Keys(k, v, ka, kb, kq, kp, cols, k0)
    entry = b * n_kt + pid_n
    ROW = R.DTABLE + (entry * H + h) * (F.NB * F.BN)
    slots = tl.arange(0, F.NB)[None, :] * F.BN + offs_n[:, None]  # (BN, NB): the row as its blocks
    if F.REL_GRAD:
        if krun == 0:  # pairs are added by atomics into a zeroed row
            tl.store(ROW + slots, tl.zeros((F.BN, F.NB), tl.float32))
            tl.debug_barrier()
    qs = _Queries(
        Q.ptr + b * Q.sb + h * Q.sh,
        DO.ptr + b * DO.sb + h * DO.sh,
        LSE + bh64 * Lq,
        DELTA + bh64 * Lq,
        DQ.ptr + b * DQ.sb + h * DQ.sh,
        Q.sm,
        DO.sm,
        DQ.sm,
        scale,
        ROW,
        X.DBIAS + bh64 * Lq * Lk,
    )
    W = R.TABLE + h * 4 * F.TW + R.max_dist + WINDOW_PAD
    far_lo, far_hi = _far_pair(W, R.max_dist, F.REL)
    bias = BiasRead(W, far_lo, far_hi, R.max_dist)
    P = Program(C, X, b, h, Lq, Lk, qk_scale)
    sums = _Sums(
        tl.zeros((F.BN, F.D), tl.float32),
        tl.zeros((F.BN, F.D), tl.float32),
        tl.zeros((F.BN, F.NB), tl.float32),
        0.0,
        0.0,
    )
    lst, cnt = T.LIST + entry * 4 * n_qt, T.COUNT + entry * 4
    if F.REL:
        sums = _kv_loop(lst + 2 * n_qt, 0, tl.load(cnt + 2), sums, keys, qs, bias, P, F, _FAR)
    sums = _kv_loop(lst + n_qt, 0, tl.load(cnt + 1), sums, keys, qs, bias, P, F, _FULL)
    if F.REL:
        sums = _kv_loop(lst + 3 * n_qt, 0, tl.load(cnt + 3), sums, keys, qs, bias, P, F, _GATHER, False)
    n_part = tl.load(cnt)
    edge = _edge(lst, n_part, n_qt, Lq, F.BM)
    # PARTIAL and EDGE compiled twice, chosen per program: the windows' loops carry no atomic, the
    # atomics' loops no window
    if krun:
        sums = _kv_loop(lst, 0, n_part - edge, sums, keys, qs, bias, P, F, _PARTIAL)
        sums = _kv_loop(lst, n_part - edge, n_part, sums, keys, qs, bias, P, F, _EDGE)
    else:
        sums = _kv_loop(lst, 0, n_part - edge, sums, keys, qs, bias, P, F, _PARTIAL, False)
        sums = _kv_loop(lst, n_part - edge, n_part, sums, keys, qs, bias, P, F, _EDGE, False)
    mask = cols[:, None] < Lk
    tl.store(
        DK.ptr + b * DK.sb + h * DK.sh + cols[:, None] * DK.sm + offs_d[None, :],
        (sums.dk * scale).to(DK.ptr.dtype.element_ty),
        mask=mask,
    )
    tl.store(
        DV.ptr + b * DV.sb + h * DV.sh + cols[:, None] * DV.sm + offs_d[None, :],
        sums.dv.to(DV.ptr.dtype.element_ty),
        mask=mask,
    )
    if F.REL_GRAD:
        table = sums.table + tl.where(slots == F.BN, sums.far_lo, 0.0)  # distance -M
        table += tl.where(slots == 2 * R.max_dist + F.BN, sums.far_hi, 0.0)  # +M
        if krun:
            tl.store(ROW + slots, table)
        else:
            tl.atomic_add(ROW + slots, table, sem="relaxed")


# -----------------------------------------------------------------------------
# dQ per query tile, where it is not fused

# A dQ program's query rows: attention_tiles.QTile's fields (what _q_program reads), and their dO,
# log-sum-exp and delta (what _dq_tile reads).
_DQRows = NamedTuple("_DQRows", [(name, object) for name in QTile._fields + ("do", "lse", "delta")])


@triton.jit
def _dq_tile(dq, s, k, v, qt, F: tl.constexpr, CLASS: tl.constexpr):
    return _dq_step(s, qt.do, k, v, qt.lse, qt.delta, dq, F.PRECISION)


@triton.jit(do_not_specialize=_LENGTHS)
def _bwd_q_kernel(Q, K, V, DO, DQ, LSE, DELTA, C, T, R, X, H, Lq, Lk, n_qt, n_kt, qk_scale, scale, F: tl.constexpr):
    """Grid (n_qt, B * H), a program per query tile, visiting its key tiles from the q-major lists T."""
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    bh64 = bh.to(tl.int64)
    rows = pid_m * F.BM + tl.arange(0, F.BM)
    offs_d = tl.arange(0, F.D)
    q = _rows(Q.ptr + b * Q.sb + h * Q.sh, rows, offs_d, Q.sm, Lq, True)
    do = _rows(DO.ptr + b * DO.sb + h * DO.sh, rows, offs_d, DO.sm, Lq, True)
    lse = _vec(LSE + bh64 * Lq, rows, Lq, float("inf"), True)
    delta = _vec(DELTA + bh64 * Lq, rows, Lq, 0.0, True)
    qa, qb, qq, qp = _q_codes(C.QC, C.sq, C.rq, b, rows, Lq, True)
    W = R.TABLE + h * 4 * F.TW + R.max_dist + WINDOW_PAD
    far_lo, far_hi = _far_pair(W, R.max_dist, F.REL)
    entry = b * n_qt + pid_m
    dq = _q_program(
        T.LIST + entry * 4 * n_kt,
        T.COUNT + entry * 4,
        n_kt,
        tl.zeros((F.BM, F.D), tl.float32),
        _DQRows(q, qa, qb, qq, qp, rows, do, lse, delta),
        KeySide(K.ptr + b * K.sb + h * K.sh, V.ptr + b * V.sb + h * V.sh, K.sm, V.sm),
        BiasRead(W, far_lo, far_hi, R.max_dist),
        Program(C, X, b, h, Lq, Lk, qk_scale),
        _dq_tile,
        F,
    )
    tl.store(
        DQ.ptr + b * DQ.sb + h * DQ.sh + rows[:, None] * DQ.sm + offs_d[None, :],
        (dq * scale).to(DQ.ptr.dtype.element_ty),
        mask=rows[:, None] < Lq,
    )
