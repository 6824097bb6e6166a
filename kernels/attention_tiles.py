"""The per-tile pieces of the pseudo-mask attention kernels (kernels/pseudo_attention.py): a tile's
codes, keys and values, its bias, its mask, and one step of the online softmax and of each backward
kernel. All @triton.jit functions called from inside the kernels; the conventions (base-2 scores,
the codes, the classes PARTIAL / FULL / FAR) are in kernels/pseudo_attention.py and
kernels/tilemap.py.

Every piece takes the tile's class as a compile-time flag, so that each of a kernel's loops
compiles only what its class needs: PARTIAL tiles load with bounds masks, apply the rule and
gather the bias pair by pair; FULL tiles (wholly inside, every pair visible) load without masks,
skip the rule and read the bias as table windows; GATHER tiles are FULL ones whose bias must be
gathered; FAR tiles read one bias scalar.
"""

from typing import NamedTuple

import triton
import triton.language as tl

from .tilemap import _BIG, _KA, _KB, _NONE_K, _NONE_Q, _POS, _QA, _QB, _SEQ

LOG2E = tl.constexpr(1.4426950408889634)
# lengths change with every batch: without this Triton would compile a variant per "== 1" and
# "divisible by 16" pattern of each of them
_LENGTHS = ["Lq", "Lk", "n_qt", "n_kt"]
_PARTIAL, _FULL, _FAR, _GATHER, _EDGE = (tl.constexpr(c) for c in range(1, 6))  # a loop's tile class
# kernels/attention_plan.py WINDOW_PAD; a global a @triton.jit function reads must be a tl.constexpr object
WINDOW_PAD = tl.constexpr(128)


class Program(NamedTuple):
    """What every tile of a program reads besides its own rows: the codes (attention_plan.Codes), the
    dense bias (attention_plan.DenseBias), the program's batch row b and head h, the lengths, and the
    scores' scale in base 2."""

    C: object
    X: object
    b: object
    h: object
    Lq: object
    Lk: object
    qk_scale: object


class BiasRead(NamedTuple):
    """A program's relative bias: W, distance 0 of its head's extended table (copy 0, base 2); the two
    values a FAR tile may have (_far_pair); the max distance M."""

    W: object
    far_lo: object
    far_hi: object
    max_dist: object


class QTile(NamedTuple):
    """The query rows of a q-major program (the forward's, the dQ kernel's): q, its codes, the rows."""

    q: object
    qa: object
    qb: object
    qq: object
    qp: object
    rows: object


class KeySide(NamedTuple):
    """Where a q-major program reads its key tiles: K and V of its (b, h), rows skn and svn apart."""

    K: object
    V: object
    skn: object
    svn: object


@triton.jit
def _q_codes(QC, sq, rq, b, rows, Lq, MASKED: tl.constexpr):
    """(qa, qb, seq, pos) of query rows of row b (codes: kernels/tilemap.py, planes sq apart, rows rq
    apart); rows past Lq see nothing."""
    base = QC + b * rq + rows
    if MASKED:
        inside = rows < Lq
        qa = tl.load(base + _QA * sq, mask=inside, other=-_BIG - 1)
        qb = tl.load(base + _QB * sq, mask=inside, other=_NONE_Q)
        qq = tl.load(base + _SEQ * sq, mask=inside, other=-1)
        qp = tl.load(base + _POS * sq, mask=inside, other=0)
    else:
        qa = tl.load(base + _QA * sq)
        qb = tl.load(base + _QB * sq)
        qq = tl.load(base + _SEQ * sq)
        qp = tl.load(base + _POS * sq)
    return qa, qb, qq, qp


@triton.jit
def _k_codes(KC, sk, rk, b, cols, Lk, MASKED: tl.constexpr):
    """(ka, kb, seq, pos) of key columns of row b; columns past Lk are dead keys."""
    base = KC + b * rk + cols
    if MASKED:
        inside = cols < Lk
        ka = tl.load(base + _KA * sk, mask=inside, other=_BIG)
        kb = tl.load(base + _KB * sk, mask=inside, other=_NONE_K)
        kq = tl.load(base + _SEQ * sk, mask=inside, other=-2)
        kp = tl.load(base + _POS * sk, mask=inside, other=0)
    else:
        ka = tl.load(base + _KA * sk)
        kb = tl.load(base + _KB * sk)
        kq = tl.load(base + _SEQ * sk)
        kp = tl.load(base + _POS * sk)
    return ka, kb, kq, kp


@triton.jit
def _k0(KC, sk, rk, b, col):
    """The position of key `col` of row b (the first key of a FULL tile: its keys run k0, k0 + 1, ...)."""
    return tl.load(KC + _POS * sk + b * rk + col)


@triton.jit
def _rows(X, rows, offs_d, stride, L, MASKED: tl.constexpr):
    """A (len(rows), D) tile of a (L, D) matrix with row stride `stride`; rows past L read 0."""
    ptrs = X + rows[:, None] * stride + offs_d[None, :]
    if MASKED:
        return tl.load(ptrs, mask=rows[:, None] < L, other=0.0)
    return tl.load(ptrs)


@triton.jit
def _rows_t(X, rows, offs_d, stride, L, MASKED: tl.constexpr):
    """The same tile transposed, (D, len(rows))."""
    ptrs = X + rows[None, :] * stride + offs_d[:, None]
    if MASKED:
        return tl.load(ptrs, mask=rows[None, :] < L, other=0.0)
    return tl.load(ptrs)


@triton.jit
def _vec(X, rows, L, other, MASKED: tl.constexpr):
    if MASKED:
        return tl.load(X + rows, mask=rows < L, other=other)
    return tl.load(X + rows)


@triton.jit
def _see(qa, qb, qq, ka, kb, kq, HAS_SEQ: tl.constexpr):
    """(BM, BN) bool: the rule on codes (queries along dim 0)."""
    see = (ka[None, :] <= qa[:, None]) | (kb[None, :] == qb[:, None])
    if HAS_SEQ:
        see = see & (kq[None, :] == qq[:, None])
    return see


@triton.jit
def _see_t(qa, qb, qq, ka, kb, kq, HAS_SEQ: tl.constexpr):
    """(BN, BM) bool: the same with keys along dim 0 (the dK/dV kernel's orientation)."""
    see = (ka[:, None] <= qa[None, :]) | (kb[:, None] == qb[None, :])
    if HAS_SEQ:
        see = see & (kq[:, None] == qq[None, :])
    return see


@triton.jit
def _near(W, qp, kp, max_dist):
    """(BM, BN) relative bias of a GATHER or PARTIAL tile, pair by pair: W points at distance 0 of
    a head's extended table (kernels/attention_plan.py, base 2), read at the distance clamped to
    [-M, M]."""
    d = tl.minimum(tl.maximum(kp[None, :] - qp[:, None], -max_dist), max_dist)
    return tl.load(W + d)


@triton.jit
def _near_t(W, qp, kp, max_dist):
    """(BN, BM), keys along dim 0; also returns the clamped distances (where a pair's gradient goes)."""
    d = tl.minimum(tl.maximum(kp[:, None] - qp[None, :], -max_dist), max_dist)
    return tl.load(W + d), d


@triton.jit
def _window_rows(qp, k0, max_dist, BN: tl.constexpr):
    """For a FULL tile whose key positions are k0 + j: query row i's bias is the window W[r_i, r_i +
    BN) of the extended table, r_i = k0 - q_pos_i, which holds the clamped values past +-M; so r_i
    is clamped once per row (to [-M - BN, M], where a window is constant anyway), not per pair.
    Returns (copy, start): the window starts at slot start + j of shifted copy `copy`, start a
    multiple of 4 (16-byte aligned loads)."""
    a = tl.minimum(tl.maximum(k0 - qp, -max_dist - BN), max_dist) + max_dist + WINDOW_PAD  # slot in the row, >= 0
    start = (a >> 2) << 2  # written so, the compiler knows it is a multiple of 4 (and a >= 0: no signed division)
    return a & 3, start


@triton.jit
def _window(TROW, plane, qp, k0, max_dist, offs_n, BN: tl.constexpr):
    """(BM, BN) relative bias of a FULL tile (see _window_rows). TROW: this head's row of copy 0,
    plane: the distance between copies (a constexpr: the row address is then one multiply-add)."""
    copy, start = _window_rows(qp, k0, max_dist, BN)
    row = TROW + copy * plane + start
    return tl.load(row[:, None] + offs_n[None, :])


@triton.jit
def _window_t(TROW, plane, qp, k0, max_dist, offs_n, BN: tl.constexpr):
    """(BN, BM), keys along dim 0."""
    copy, start = _window_rows(qp, k0, max_dist, BN)
    row = TROW + copy * plane + start
    return tl.load(row[None, :] + offs_n[:, None])


@triton.jit
def _far_pair(W, max_dist, REL: tl.constexpr):
    """The two bias values a FAR tile may have, distance -M and +M, read once per program. Read
    inside the FAR loop (one load per tile), the scalar made the software pipeliner wait for every
    outstanding copy at the top of each iteration (sm_90a SASS: DEPBAR.LE SB0, 0x0), so that no
    tile's K and V were fetched while the one before computed."""
    if REL:
        return tl.load(W - max_dist), tl.load(W + max_dist)
    else:
        return 0.0, 0.0


@triton.jit
def _far(code, far_lo, far_hi):
    """The one bias value of a FAR tile: distance +M if the entry's bit is set, else -M."""
    return tl.where(code % 2 == 1, far_hi, far_lo)


@triton.jit
def _dense(BIAS, b, h, sbb, sbh, sbm, sbn, rows, cols, Lq, Lk):
    """(BM, BN) of a dense additive bias in base 2 (zero strides broadcast). Always bounds-checked:
    a kernel's own tile (the query rows of the forward) may straddle its length in any class."""
    ptrs = BIAS + b * sbb + h * sbh + rows[:, None].to(tl.int64) * sbm + cols[None, :] * sbn
    x = tl.load(ptrs, mask=(rows < Lq)[:, None] & (cols < Lk)[None, :], other=0.0)
    return x.to(tl.float32) * LOG2E


@triton.jit
def _dense_t(BIAS, b, h, sbb, sbh, sbm, sbn, rows, cols, Lq, Lk):
    ptrs = BIAS + b * sbb + h * sbh + rows[None, :].to(tl.int64) * sbm + cols[:, None] * sbn
    x = tl.load(ptrs, mask=(rows < Lq)[None, :] & (cols < Lk)[:, None], other=0.0)
    return x.to(tl.float32) * LOG2E


@triton.jit
def _softmax_step(s, v, m_i, l_i, acc, GUARD: tl.constexpr, PRECISION: tl.constexpr):
    """One key tile of the online softmax. GUARD: s may hold -inf (masked pairs), so a row may
    have seen nothing yet; FULL and FAR tiles see every pair and need no guard."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    if GUARD:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def _dq_step(s, do, k, v, lse, delta, dq, PRECISION: tl.constexpr):
    p = tl.exp2(s - lse[:, None])
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    return dq + tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)


@triton.jit
def _dkdv_step(s_t, q_t, do, k, v, lse, delta, dk, dv, PRECISION: tl.constexpr):
    """dK, dV of one query tile in the keys-first orientation: s_t (BN, BM) base-2 scores,
    q_t (D, BM), do (BM, D). Also returns dS^T = dLoss / d(score) in natural units (the bias's
    gradient), 0 where masked, past Lq, or for a row that sees nothing."""
    p_t = tl.exp2(s_t - lse[None, :])
    dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
    dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
    ds_t = p_t * (dp_t - delta[None, :])
    dk += tl.dot(ds_t.to(q_t.dtype), tl.trans(q_t), input_precision=PRECISION)
    return dk, dv, ds_t


# -----------------------------------------------------------------------------
# a tile's scores, shared by the forward and the dQ kernel


@triton.jit
def _entry(lst, t, n):
    """Entry t of a tile list of n entries, 0 past its end. Each loop reads entry t + 1 during
    iteration t into a register (`code, nxt = nxt, _entry(lst, t + 1, n)`): an entry read where it
    is used was pipelined as an indirect load, one stage ahead of its tile's K and V, and the loop
    then waited for every outstanding copy at the top of each iteration (sm_90a: DEPBAR.LE SB0, 0x0),
    so that K and V were fetched one tile ahead at most; read a tile early, they are fetched two
    ahead, as in a plain FlashAttention loop (DEPBAR.LE SB0, 0x2)."""
    return tl.load(lst + t, mask=t < n, other=0)


@triton.jit
def _edge(lst, n_part, n_tiles, L, BLOCK: tl.constexpr):
    """1 if the last PARTIAL entry is the tile that straddles L (it is last: lists are in increasing
    order), which is then run by a loop compiled with bounds checks (EDGE); the others need none."""
    last = tl.load(lst + tl.maximum(n_part - 1, 0))
    return ((n_part > 0) & (last == n_tiles - 1) & (L % BLOCK != 0)).to(tl.int32)


@triton.jit
def _scores(q, k, code, k0, qp, kp, bias, qk_scale, F: tl.constexpr, CLASS: tl.constexpr):
    """Base-2 scores of a (query, key) tile with its relative bias (the table is in base 2), read as
    windows (FULL), pair by pair (PARTIAL, GATHER, EDGE) or as one scalar (FAR). The bias is added
    after the product, not given as its accumulator: registers that non-wgmma instructions define
    inside a wgmma's pipeline stage make ptxas serialise every wgmma of the kernel (C7515)."""
    s = tl.dot(q, tl.trans(k), input_precision=F.PRECISION) * qk_scale
    if F.REL:
        if CLASS == 2:
            s += _window(bias.W - bias.max_dist - WINDOW_PAD, F.TW, qp, k0, bias.max_dist, tl.arange(0, F.BN), F.BN)
        elif CLASS == 3:
            s += _far(code, bias.far_lo, bias.far_hi)
        else:
            s += _near(bias.W, qp, kp, bias.max_dist)
    return s


@triton.jit
def _tile_scores(code, k0, qt, ks, bias, P, F: tl.constexpr, CLASS: tl.constexpr):
    """(scores, K, V) of one key tile against the program's query rows qt (QTile), compiled for one
    class (PARTIAL, FULL, FAR, GATHER or EDGE): the forward's and the dQ kernel's common part. ks:
    KeySide, bias: BiasRead, P: Program, F: attention_plan.Flags. k0: a FULL tile's first key position
    (_k0, read by the loop a tile ahead, as the entry itself); unused otherwise."""
    MASKED: tl.constexpr = CLASS == 5  # EDGE: the PARTIAL tile that straddles Lk, loaded with bounds checks
    if CLASS == 3:
        kt = code // 2
    else:
        kt = code
    offs_d = tl.arange(0, F.D)
    cols = kt * F.BN + tl.arange(0, F.BN)
    k = _rows(ks.K, cols, offs_d, ks.skn, P.Lk, MASKED)
    v = _rows(ks.V, cols, offs_d, ks.svn, P.Lk, MASKED)
    ka, kb, kq, kp = _k_codes(P.C.KC, P.C.sk, P.C.rk, P.b, cols, P.Lk, MASKED)
    s = _scores(qt.q, k, code, k0, qt.qp, kp, bias, P.qk_scale, F, CLASS)
    if F.DENSE:
        X = P.X
        s += _dense(X.BIAS, P.b, P.h, X.sb, X.sh, X.sm, X.sn, qt.rows, cols, P.Lq, P.Lk)
    if CLASS % 4 == 1:  # PARTIAL or EDGE: the rule, pair by pair
        s = tl.where(_see(qt.qa, qt.qb, qt.qq, ka, kb, kq, F.HAS_SEQ), s, float("-inf"))
    return s, k, v


@triton.jit
def _q_loop(lst, start, end, carry, qt, ks, bias, P, step, F: tl.constexpr, CLASS: tl.constexpr):
    """Entries start..end-1 of one class's list of a q-major program (the forward's, the dQ kernel's):
    for each key tile, carry = step(carry, scores, K, V, qt, F, CLASS). The next entry is read a tile
    ahead (_entry), and for FULL tiles the first key position k0 with it."""
    nxt = _entry(lst, start, end)
    k0n = 0
    if CLASS == 2:
        k0n = _k0(P.C.KC, P.C.sk, P.C.rk, P.b, nxt * F.BN)
    for t in range(start, end):
        code, nxt = nxt, _entry(lst, t + 1, end)
        k0 = k0n
        if CLASS == 2:
            k0n = _k0(P.C.KC, P.C.sk, P.C.rk, P.b, nxt * F.BN)
        s, k, v = _tile_scores(code, k0, qt, ks, bias, P, F, CLASS)
        carry = step(carry, s, k, v, qt, F, CLASS)
    return carry


@triton.jit
def _q_program(lst, cnt, n_tiles, carry, qt, ks, bias, P, step, F: tl.constexpr):
    """Every tile of a q-major program's lists (lst: its 4 lists of n_tiles entries, cnt: its 4
    counts), one loop per class, each compiled for its class: FAR, FULL, GATHER, then PARTIAL and
    the EDGE tile that straddles Lk. The order only moves rounding, and it matters to the compiler,
    which lays out a loop's softmax as the loop before it left its running max and sums."""
    if F.REL:
        carry = _q_loop(lst + 2 * n_tiles, 0, tl.load(cnt + 2), carry, qt, ks, bias, P, step, F, _FAR)
    carry = _q_loop(lst + n_tiles, 0, tl.load(cnt + 1), carry, qt, ks, bias, P, step, F, _FULL)
    if F.REL:
        carry = _q_loop(lst + 3 * n_tiles, 0, tl.load(cnt + 3), carry, qt, ks, bias, P, step, F, _GATHER)
    n_part = tl.load(cnt)
    edge = _edge(lst, n_part, n_tiles, P.Lk, F.BN)
    carry = _q_loop(lst, 0, n_part - edge, carry, qt, ks, bias, P, step, F, _PARTIAL)
    return _q_loop(lst, n_part - edge, n_part, carry, qt, ks, bias, P, step, F, _EDGE)
