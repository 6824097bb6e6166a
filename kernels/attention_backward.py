"""The backward kernels of the pseudo-mask attention (kernels/pseudo_attention.py has the forward,
the launchers and the conventions): delta = rowsum(dO * O); dK and dV per key tile, with the bias
table's gradient; dQ per query tile. Each recomputes the probabilities of the tiles it visits from
the saved log-sum-exp, through the same per-class loops as the forward (kernels/attention_tiles.py).
"""
import triton
import triton.language as tl

from .attention_tiles import (_EDGE, _FAR, _FULL, _GATHER, _LENGTHS, _PARTIAL, WINDOW_PAD, _dense_t, _dkdv_step,
                              _dq_step, _edge, _entry, _far, _far_pair, _k0, _k_codes, _near_t, _q_codes, _rows,
                              _rows_t, _see_t, _tile_scores, _vec, _window_t)


# -----------------------------------------------------------------------------
# backward: delta = rowsum(dO * O); dK, dV (and the bias gradients) per key tile; dQ per query tile

@triton.jit(do_not_specialize=["Lq"])
def _delta_kernel(O, DO, DELTA, sob, soh, som, sdob, sdoh, sdom, H, Lq, D: tl.constexpr, BM: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    rows = pid_m * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    o = _rows(O + b * sob + h * soh, rows, offs_d, som, Lq, True)
    do = _rows(DO + b * sdob + h * sdoh, rows, offs_d, sdom, Lq, True)
    tl.store(DELTA + bh.to(tl.int64) * Lq + rows, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=rows < Lq)


@triton.jit
def _kv_tile(code, k, v, ka, kb, kq, kp, k0, dk, dv, Qb, DOb, LSEb, DELTAb, QC, sq, rq, b, h, offs_m, offs_n, offs_d,
             sqm, sdom, Lq, Lk, cols, qk_scale, W, plane, far_lo, far_hi, drow, max_dist, BIAS, sbb, sbh, sbm, sbn,
             DBIAS, bh64, DQb, sdqm, scale,
             CLASS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr, REL: tl.constexpr,
             REL_GRAD: tl.constexpr, DENSE: tl.constexpr, DENSE_GRAD: tl.constexpr, FUSED_DQ: tl.constexpr,
             PRECISION: tl.constexpr):
    """One query tile of the dK/dV kernel (keys along dim 0), compiled for one class; EDGE is the
    PARTIAL query tile that straddles Lq. REL_GRAD: add the tile's share of the bias table's gradient.
    FUSED_DQ: add the tile's share of dQ, dS K * scale, to the float32 buffer DQb by atomic adds."""
    MASKED: tl.constexpr = CLASS == 5
    RULE: tl.constexpr = CLASS % 4 == 1
    if CLASS == 3:
        qt = code // 2
    else:
        qt = code
    rows = qt * BM + offs_m
    q_t = _rows_t(Qb, rows, offs_d, sqm, Lq, MASKED)
    do = _rows(DOb, rows, offs_d, sdom, Lq, MASKED)
    lse = _vec(LSEb, rows, Lq, float("inf"), MASKED)
    delta = _vec(DELTAb, rows, Lq, 0.0, MASKED)
    qa, qb, qq, qp = _q_codes(QC, sq, rq, b, rows, Lq, MASKED)
    d = 0
    s_t = tl.dot(k, q_t, input_precision=PRECISION) * qk_scale
    if REL:
        if CLASS == 2:
            bias_t, d = _window_t(W - max_dist - WINDOW_PAD, plane, qp, k0, max_dist, offs_n, BN)
            s_t += bias_t
        elif CLASS == 3:
            s_t += _far(code, far_lo, far_hi)
        else:
            bias_t, d = _near_t(W, qp, kp, max_dist)
            s_t += bias_t
    if DENSE:
        s_t += _dense_t(BIAS, b, h, sbb, sbh, sbm, sbn, rows, cols, Lq, Lk)
    if RULE:
        s_t = tl.where(_see_t(qa, qb, qq, ka, kb, kq, HAS_SEQ), s_t, float("-inf"))
    dk, dv, ds_t = _dkdv_step(s_t, q_t, do, k, v, lse, delta, dk, dv, PRECISION)
    if FUSED_DQ:
        dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k, input_precision=PRECISION) * scale  # (BM, D)
        tl.atomic_add(DQb + rows[:, None] * sdqm + offs_d[None, :], dq, mask=(rows < Lq)[:, None], sem="relaxed")
    if REL_GRAD:
        if CLASS == 3:
            tl.atomic_add(drow + (code % 2) * 2 * max_dist - max_dist, tl.sum(tl.sum(ds_t, 1), 0), sem="relaxed")
        else:
            tl.atomic_add(drow + d, ds_t, sem="relaxed")
    if DENSE_GRAD:
        tl.store(DBIAS + (bh64 * Lq + rows[None, :]) * Lk + cols[:, None], ds_t,
                 mask=(rows < Lq)[None, :] & (cols < Lk)[:, None])
    return dk, dv


@triton.jit(do_not_specialize=_LENGTHS)
def _bwd_kv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn,
                   sdob, sdoh, sdom, sdkb, sdkh, sdkn, sdvb, sdvh, sdvn,
                   QC, KC, sq, sk, rq, rk, TABLE, DTABLE, max_dist, BIAS, sbb, sbh, sbm, sbn, DBIAS,
                   LIST, COUNT, H, Lq, Lk, n_qt, n_kt, qk_scale, scale, DQ, sdqb, sdqh, sdqm, TW: tl.constexpr,
                   D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr,
                   REL: tl.constexpr, REL_GRAD: tl.constexpr, DENSE: tl.constexpr, DENSE_GRAD: tl.constexpr,
                   FUSED_DQ: tl.constexpr, PRECISION: tl.constexpr):
    """Grid (n_kt, B * H), blocks BN keys x BM queries; LIST / COUNT: the k-major lists (n_qt query
    tiles of BM rows per list). REL_GRAD: the bias table's gradient (REL and the table requires it).
    FUSED_DQ: also dQ, added by atomics into the float32 DQ (zeroed by the launcher); the dQ
    kernel then does not run, and no tile's probabilities are computed twice."""
    pid_n, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    bh64 = bh.to(tl.int64)
    cols = pid_n * BN + tl.arange(0, BN)
    offs_m, offs_n, offs_d = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    k = _rows(K + b * skb + h * skh, cols, offs_d, skn, Lk, True)
    v = _rows(V + b * svb + h * svh, cols, offs_d, svn, Lk, True)
    ka, kb, kq, kp = _k_codes(KC, sk, rk, b, cols, Lk, True)
    k0 = _k0(KC, sk, rk, b, pid_n * BN)
    dk, dv = tl.zeros((BN, D), tl.float32), tl.zeros((BN, D), tl.float32)
    Qb, DOb = Q + b * sqb + h * sqh, DO + b * sdob + h * sdoh
    LSEb, DELTAb = LSE + bh64 * Lq, DELTA + bh64 * Lq
    DQb = DQ + b * sdqb + h * sdqh
    entry = b * n_kt + pid_n
    # this program's own row of the extended table's gradient: atomics contend only within the program
    drow = DTABLE + (entry * H + h) * TW + max_dist + WINDOW_PAD
    W = TABLE + h * 4 * TW + max_dist + WINDOW_PAD
    far_lo, far_hi = _far_pair(W, max_dist, REL)
    plane = TW
    if REL_GRAD:  # the program zeroes its own row first (no zeroing launch), then adds to it
        for c in tl.static_range(0, TW, 16):  # TW: a multiple of 16
            tl.store(DTABLE + (entry * H + h) * TW + c + tl.arange(0, 16), tl.zeros((16,), tl.float32))
        tl.debug_barrier()
    lst, cnt = LIST + entry * 4 * n_qt, COUNT + entry * 4
    if REL:
        n = tl.load(cnt + 2)
        nxt = _entry(lst + 2 * n_qt, 0, n)
        for t in range(0, n):
            code, nxt = nxt, _entry(lst + 2 * n_qt, t + 1, n)
            dk, dv = _kv_tile(code, k, v, ka, kb, kq, kp, k0, dk, dv, Qb, DOb, LSEb, DELTAb, QC, sq, rq, b, h, offs_m,
                              offs_n, offs_d, sqm, sdom, Lq, Lk, cols, qk_scale, W, plane, far_lo, far_hi, drow,
                              max_dist, BIAS, sbb, sbh, sbm, sbn, DBIAS, bh64, DQb, sdqm, scale, _FAR, BM, BN, HAS_SEQ,
                              REL, REL_GRAD, DENSE, DENSE_GRAD, FUSED_DQ, PRECISION)
    n = tl.load(cnt + 1)
    nxt = _entry(lst + n_qt, 0, n)
    for t in range(0, n):
        code, nxt = nxt, _entry(lst + n_qt, t + 1, n)
        dk, dv = _kv_tile(code, k, v, ka, kb, kq, kp, k0, dk, dv, Qb, DOb, LSEb, DELTAb, QC, sq, rq, b, h, offs_m,
                          offs_n, offs_d, sqm, sdom, Lq, Lk, cols, qk_scale, W, plane, far_lo, far_hi, drow, max_dist,
                          BIAS, sbb, sbh, sbm, sbn, DBIAS, bh64, DQb, sdqm, scale, _FULL, BM, BN, HAS_SEQ, REL,
                          REL_GRAD, DENSE, DENSE_GRAD, FUSED_DQ, PRECISION)
    if REL:
        n = tl.load(cnt + 3)
        nxt = _entry(lst + 3 * n_qt, 0, n)
        for t in range(0, n):
            code, nxt = nxt, _entry(lst + 3 * n_qt, t + 1, n)
            dk, dv = _kv_tile(code, k, v, ka, kb, kq, kp, k0, dk, dv, Qb, DOb, LSEb, DELTAb, QC, sq, rq, b, h, offs_m,
                              offs_n, offs_d, sqm, sdom, Lq, Lk, cols, qk_scale, W, plane, far_lo, far_hi, drow,
                              max_dist, BIAS, sbb, sbh, sbm, sbn, DBIAS, bh64, DQb, sdqm, scale, _GATHER, BM, BN,
                              HAS_SEQ, REL, REL_GRAD, DENSE, DENSE_GRAD, FUSED_DQ, PRECISION)
    n_part = tl.load(cnt)
    edge = _edge(lst, n_part, n_qt, Lq, BM)
    n = n_part - edge
    nxt = _entry(lst, 0, n)
    for t in range(0, n):
        code, nxt = nxt, _entry(lst, t + 1, n)
        dk, dv = _kv_tile(code, k, v, ka, kb, kq, kp, k0, dk, dv, Qb, DOb, LSEb, DELTAb, QC, sq, rq, b, h, offs_m,
                          offs_n, offs_d, sqm, sdom, Lq, Lk, cols, qk_scale, W, plane, far_lo, far_hi, drow, max_dist,
                          BIAS, sbb, sbh, sbm, sbn, DBIAS, bh64, DQb, sdqm, scale, _PARTIAL, BM, BN, HAS_SEQ, REL,
                          REL_GRAD, DENSE, DENSE_GRAD, FUSED_DQ, PRECISION)
    for t in range(n_part - edge, n_part):
        dk, dv = _kv_tile(tl.load(lst + t), k, v, ka, kb, kq, kp, k0, dk, dv, Qb, DOb, LSEb, DELTAb, QC, sq, rq, b, h,
                          offs_m, offs_n, offs_d, sqm, sdom, Lq, Lk, cols, qk_scale, W, plane, far_lo, far_hi, drow,
                          max_dist, BIAS, sbb, sbh, sbm, sbn, DBIAS, bh64, DQb, sdqm, scale, _EDGE, BM, BN, HAS_SEQ,
                          REL, REL_GRAD, DENSE, DENSE_GRAD, FUSED_DQ, PRECISION)
    mask = cols[:, None] < Lk
    tl.store(DK + b * sdkb + h * sdkh + cols[:, None] * sdkn + offs_d[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=mask)
    tl.store(DV + b * sdvb + h * sdvh + cols[:, None] * sdvn + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=mask)


@triton.jit
def _q_tile(code, k0, q, do, lse, delta, qa, qb, qq, qp, dq, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d, Lk, skn, svn,
            qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows, Lq,
            CLASS: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr, REL: tl.constexpr,
            DENSE: tl.constexpr, PRECISION: tl.constexpr):
    """One key tile of the dQ kernel, compiled for one class."""
    s, k, v = _tile_scores(code, k0, q, qa, qb, qq, qp, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d, Lk, skn, svn,
                           qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows, Lq,
                           CLASS, BN, HAS_SEQ, REL, DENSE, PRECISION)
    return _dq_step(s, do, k, v, lse, delta, dq, PRECISION)


@triton.jit(do_not_specialize=_LENGTHS)
def _bwd_q_kernel(Q, K, V, DO, LSE, DELTA, DQ, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn,
                  sdob, sdoh, sdom, sdqb, sdqh, sdqm, QC, KC, sq, sk, rq, rk, TABLE, max_dist, BIAS, sbb, sbh, sbm, sbn,
                  LIST, COUNT, H, Lq, Lk, n_qt, n_kt, qk_scale, scale, TW: tl.constexpr,
                  D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_SEQ: tl.constexpr,
                  REL: tl.constexpr, DENSE: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    bh64 = bh.to(tl.int64)
    rows = pid_m * BM + tl.arange(0, BM)
    offs_n, offs_d = tl.arange(0, BN), tl.arange(0, D)
    q = _rows(Q + b * sqb + h * sqh, rows, offs_d, sqm, Lq, True)
    do = _rows(DO + b * sdob + h * sdoh, rows, offs_d, sdom, Lq, True)
    lse = _vec(LSE + bh64 * Lq, rows, Lq, float("inf"), True)
    delta = _vec(DELTA + bh64 * Lq, rows, Lq, 0.0, True)
    qa, qb, qq, qp = _q_codes(QC, sq, rq, b, rows, Lq, True)
    Kb, Vb = K + b * skb + h * skh, V + b * svb + h * svh
    W = TABLE + h * 4 * TW + max_dist + WINDOW_PAD
    far_lo, far_hi = _far_pair(W, max_dist, REL)
    plane = TW
    dq = tl.zeros((BM, D), tl.float32)
    entry = b * n_qt + pid_m
    lst, cnt = LIST + entry * 4 * n_kt, COUNT + entry * 4
    if REL:
        n = tl.load(cnt + 2)
        nxt = _entry(lst + 2 * n_kt, 0, n)
        for t in range(0, n):
            code, nxt = nxt, _entry(lst + 2 * n_kt, t + 1, n)
            dq = _q_tile(code, 0, q, do, lse, delta, qa, qb, qq, qp, dq, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d, Lk,
                         skn, svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows, Lq,
                         _FAR, BN, HAS_SEQ, REL, DENSE, PRECISION)
    n = tl.load(cnt + 1)
    nxt = _entry(lst + n_kt, 0, n)
    k0n = _k0(KC, sk, rk, b, nxt * BN)
    for t in range(0, n):
        code, nxt = nxt, _entry(lst + n_kt, t + 1, n)
        k0, k0n = k0n, _k0(KC, sk, rk, b, nxt * BN)
        dq = _q_tile(code, k0, q, do, lse, delta, qa, qb, qq, qp, dq, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d, Lk, skn,
                     svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows, Lq, _FULL, BN,
                     HAS_SEQ, REL, DENSE, PRECISION)
    if REL:
        n = tl.load(cnt + 3)
        nxt = _entry(lst + 3 * n_kt, 0, n)
        for t in range(0, n):
            code, nxt = nxt, _entry(lst + 3 * n_kt, t + 1, n)
            dq = _q_tile(code, 0, q, do, lse, delta, qa, qb, qq, qp, dq, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d, Lk,
                         skn, svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows, Lq,
                         _GATHER, BN, HAS_SEQ, REL, DENSE, PRECISION)
    n_part = tl.load(cnt)
    edge = _edge(lst, n_part, n_kt, Lk, BN)
    n = n_part - edge
    nxt = _entry(lst, 0, n)
    for t in range(0, n):
        code, nxt = nxt, _entry(lst, t + 1, n)
        dq = _q_tile(code, 0, q, do, lse, delta, qa, qb, qq, qp, dq, Kb, Vb, KC, sk, rk, b, h, offs_n, offs_d, Lk, skn,
                     svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows, Lq, _PARTIAL,
                     BN, HAS_SEQ, REL, DENSE, PRECISION)
    for t in range(n_part - edge, n_part):
        dq = _q_tile(tl.load(lst + t), 0, q, do, lse, delta, qa, qb, qq, qp, dq, Kb, Vb, KC, sk, rk, b, h, offs_n,
                     offs_d, Lk, skn, svn, qk_scale, W, plane, far_lo, far_hi, max_dist, BIAS, sbb, sbh, sbm, sbn, rows,
                     Lq, _EDGE, BN, HAS_SEQ, REL, DENSE, PRECISION)
    tl.store(DQ + b * sdqb + h * sdqh + rows[:, None] * sdqm + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=rows[:, None] < Lq)
