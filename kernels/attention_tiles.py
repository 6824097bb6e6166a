"""The per-tile pieces of the pseudo-mask attention kernels (kernels/pseudo_attention.py): the
metadata of a tile's tokens, its keys and values, the scores with bias and mask, and one step of
the online softmax and of each backward kernel. All @triton.jit functions called from inside the
kernels; see kernels/pseudo_attention.py for the conventions (base-2 scores, entries 2*tile+bit).
"""
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # a global a @triton.jit function reads must be a tl.constexpr object


# -----------------------------------------------------------------------------
# the tile: metadata, scores with bias and mask

@triton.jit
def _meta_of(KIND, STEP, SEQ, POS, b, idx, L, NEVER_KIND: tl.constexpr):
    """(kind, step, seq, pos) of tokens idx of row b; slots past L get kind NEVER_KIND."""
    inside = idx < L
    base = b * L + idx
    kind = tl.load(KIND + base, mask=inside, other=NEVER_KIND)
    step = tl.load(STEP + base, mask=inside, other=0)
    seq = tl.load(SEQ + base, mask=inside, other=0)
    pos = tl.load(POS + base, mask=inside, other=0)
    return kind, step, seq, pos


@triton.jit
def _kv_tile(K, V, b, h, code, offs_n, offs_d, Lk, skb, skh, skn, svb, svh, svn, BN: tl.constexpr):
    """The key tile a list entry names (code = 2 * tile + full): its columns, keys and values."""
    cols = (code // 2) * BN + offs_n
    col_in = cols[:, None] < Lk
    k = tl.load(K + b * skb + h * skh + cols[:, None] * skn + offs_d[None, :], mask=col_in, other=0.0)
    v = tl.load(V + b * svb + h * svh + cols[:, None] * svn + offs_d[None, :], mask=col_in, other=0.0)
    return cols, k, v


@triton.jit
def _scores(s, b, h, rows, cols, Lq, Lk, is_full, qk, qs, qq, qp, kk, ks, kq, kp,
            TABLE, max_dist, BIAS, sbb, sbh, sbm, sbn,
            HAS_SEQ: tl.constexpr, REL: tl.constexpr, DENSE: tl.constexpr):
    """Add the bias to the (BM, BN) base-2 scores s and mask them with -inf unless is_full.
    qk, qs, qq, qp: (BM,) kind, step, seq, pos of the queries; kk, ks, kq, kp: (BN,) of the keys."""
    if REL:
        d = tl.minimum(tl.maximum(kp[None, :] - qp[:, None], -max_dist), max_dist)
        s += tl.load(TABLE + h * (2 * max_dist + 1) + max_dist + d) * LOG2E
    if DENSE:
        ptrs = BIAS + b * sbb + h * sbh + rows[:, None].to(tl.int64) * sbm + cols[None, :] * sbn
        s += tl.load(ptrs, mask=(rows < Lq)[:, None] & (cols < Lk)[None, :], other=0.0).to(tl.float32) * LOG2E
    if is_full == 0:
        # the rule of reference.visible; padding keys and the tile's tail carry kind NEVER (-1)
        qk2, qs2, kk2, ks2 = qk[:, None], qs[:, None], kk[None, :], ks[None, :]
        see = (kk2 == 0) | ((qk2 == 1) & (kk2 == 1) & (ks2 <= qs2))
        see = see | ((qk2 == 2) & (((kk2 == 1) & (ks2 < qs2)) | ((kk2 == 2) & (ks2 == qs2))))
        if HAS_SEQ:
            see = see & (qq[:, None] == kq[None, :])
        s = tl.where(see, s, float("-inf"))
    return s


@triton.jit
def _far_bias(TABLE, h, code, max_dist):
    """The one bias value of a FAR tile (kernels/tilemap.py), in base 2: distance +M if the entry's
    bit is set, else -M."""
    return tl.load(TABLE + h * (2 * max_dist + 1) + (code % 2) * 2 * max_dist) * LOG2E


@triton.jit
def _softmax_step(s, v, m_i, l_i, acc, PRECISION: tl.constexpr):
    """One key tile of the online softmax: rescale the running sums, add this tile's share."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet: no NaN
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
def _dkdv_step(s, q, do, v, lse, delta, dk, dv, PRECISION: tl.constexpr):
    """dK, dV of one query tile; also returns dS = dLoss / d(score) in natural units (= the bias's
    gradient), 0 where masked, out of range, or for a row that sees nothing."""
    p = tl.exp2(s - lse[:, None])  # (BM, BN)
    dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    ds = p * (dp - delta[:, None])
    dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
    return dk, dv, ds
