"""What the pseudo-mask attention kernels read besides q, k and v: per-token codes and a tile map.

Both are built once per metadata (every layer of a forward and its backward share them), by small
Triton kernels: one launch per side for the codes, two for the whole map.

**Codes.** The attention rule (kernels/reference.py `visible`) over (kind, step, valid) reduces to
two comparisons once each token carries two integers. With BIG = 2^30 and steps in (-BIG, BIG):

    key   ka = -BIG (CONTEXT), step (ORIGINAL), BIG (PSEUDO, and any invalid key)
          kb = step (PSEUDO), NONE_K otherwise (invalid keys too)
    query qa = -BIG (CONTEXT), step (ORIGINAL), step - 1 (PSEUDO)
          qb = step (PSEUDO), NONE_Q otherwise

    query i sees key j  <=>  ka_j <= qa_i  or  kb_j == qb_i      (and seq_i == seq_j when packed)

The first comparison gives CONTEXT keys to everyone and ORIGINAL keys of step <= s (ORIGINAL
query) or < s (PSEUDO query); the second PSEUDO keys of the query's own step. A key with
ka == BIG and kb == NONE_K is dead (padding): no query sees it. `codes` is the readable version;
`_codes_kernel` writes the same six int32 planes [qa, qb, ka, kb, seq, pos] in one launch.

**Tile map.** For a block shape (BM query rows, BN key columns) every (query tile, key tile) pair is
  EMPTY   no pair visible: never loaded;
  PARTIAL some pairs visible: the kernels apply the rule element by element;
  FULL    every pair visible, the tile wholly inside Lq x Lk: no mask, no bounds checks; under a
          relative position bias the tile's key positions are consecutive (k0, k0 + 1, ...), so a
          query row's bias is a window of an extended table starting at k0 - q_pos: one load per
          pair with a constant offset, no clamp (kernels/attention_tiles.py `_window`);
  FAR     FULL, and under a relative position bias of max distance M every pair clamps to the same
          distance, +M or -M: one bias value for the whole tile (plain FlashAttention plus a scalar);
  GATHER  FULL, but its key positions are not consecutive: the bias gathered pair by pair.
The classes are exact: the rule is evaluated on every pair (B * Lq * Lk comparisons), instead of
reasoning from per-tile summaries. Two launches, neither with a loop:
    `_class_kernel`, one program per cell of a grid as fine as both block shapes (min(BM, BMk) x
        min(BN, BNk); at the CUDA configurations of head dim 64 the cells are the tiles): whether
        some and whether every pair of the cell is visible, and the positions' range of its rows
        and of its columns (whether the columns run k0, k0 + 1, ...);
    `_list_kernel`, one program per query tile (q-major) and per key tile (k-major): the class of
        each of its tiles from their cells, as one vector, and each list written through a prefix
        sum over it.
Every cell is evaluated once for both orientations, and no program loops: a program that walked
its row of tiles would classify each tile twice (once per orientation) and run its row serially,
at a cost that shows beside the forward kernel's (docs/kernels.md, "The tile map").

Lists, so that each of a kernel's loops (one per class, specialised at compile time) runs over its
own tiles only:
    q-major, blocks (BM, BN): per (batch, query tile) four lists of key tiles, PARTIAL | FULL | FAR |
        GATHER (slot = class - 1), each of capacity n_kt, and four counts (forward pass and dQ);
    k-major, blocks (BMk, BNk): per (batch, key tile) the same for query tiles (dK, dV).
A FAR entry is 2 * tile + (1 if the distance is +M); the others are the tile index.
The two orientations may use different blocks: each is exact for its own. Everything stays on
the device: no .item(), no host sync, and the kernels read the lists as data, so a new mask never
recompiles anything.
"""

from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .reference import CONTEXT, ORIGINAL, PSEUDO

EMPTY, PARTIAL, FULL, FAR, GATHER = 0, 1, 2, 3, 4
SLOTS = 4  # lists per row: PARTIAL, FULL, FAR, GATHER (slot = class - 1)
NEVER = -1  # a kind that marks a padding key
BIG = 2**30
NONE_K, NONE_Q = -(2**31), -(2**31) + 1  # kb of a non-PSEUDO key, qb of a non-PSEUDO query: never equal
QA, QB, KA, KB, SEQ, POS = range(6)  # the planes of a code tensor
# the same numbers as the kernels see them (a global a @triton.jit function reads must be a constexpr)
_BIG, _NONE_K, _NONE_Q = tl.constexpr(BIG), tl.constexpr(NONE_K), tl.constexpr(NONE_Q)
_QA, _QB, _KA, _KB, _SEQ, _POS = (tl.constexpr(i) for i in range(6))


# -----------------------------------------------------------------------------
# the readable versions (tests compare the kernels against these)


def codes(kind, step, valid=None, seq=None, pos=None):
    """(6, B, L) int32 planes [qa, qb, ka, kb, seq, pos] of (B, L) metadata, as documented above."""
    kind, step = kind.long(), step.long()
    live = kind >= 0 if valid is None else (kind >= 0) & valid.bool()
    qa = torch.where(kind == CONTEXT, -BIG, torch.where(kind == ORIGINAL, step, step - 1))
    qb = torch.where(kind == PSEUDO, step, NONE_Q)
    ka = torch.where(kind == CONTEXT, -BIG, torch.where(kind == ORIGINAL, step, BIG))
    ka = torch.where(live, ka, BIG)
    kb = torch.where(live & (kind == PSEUDO), step, NONE_K)
    zero = torch.zeros_like(kind)
    planes = [qa, qb, ka, kb, zero if seq is None else seq.long(), zero if pos is None else pos.long()]
    return torch.stack(planes).to(torch.int32)


def see_from_codes(qc, kc, has_seq=False):
    """(B, Lq, Lk) bool from two code tensors: the rule as the kernels evaluate it."""
    see = (kc[KA][:, None, :] <= qc[QA][:, :, None]) | (kc[KB][:, None, :] == qc[QB][:, :, None])
    if has_seq:
        see = see & (kc[SEQ][:, None, :] == qc[SEQ][:, :, None])
    return see


def reference_classes(see, BM, BN, q_pos=None, k_pos=None, max_dist=None):
    """(B, n_qt, n_kt) int8 classes of a dense (B, Lq, Lk) visibility, and the FAR signs (bool,
    True for +M). max_dist None: no relative bias, so neither FAR nor GATHER."""
    B, Lq, Lk = see.shape
    n_qt, n_kt = -(-Lq // BM), -(-Lk // BN)
    pad = torch.zeros(B, n_qt * BM, n_kt * BN, dtype=torch.bool, device=see.device)
    pad[:, :Lq, :Lk] = see
    tiles = pad.view(B, n_qt, BM, n_kt, BN)
    cls = tiles.any(4).any(2).to(torch.int8) + tiles.all(4).all(2).to(torch.int8)  # tails are not visible
    ahead = torch.zeros_like(cls, dtype=torch.bool)
    if max_dist is not None:

        def tiled(p, L, n, block):
            x = torch.zeros(B, n * block, dtype=torch.long, device=see.device)
            x[:, :L] = p
            return x.view(B, n, block)

        qt, kt = tiled(q_pos, Lq, n_qt, BM), tiled(k_pos, Lk, n_kt, BN)
        ahead = (kt.amin(2)[:, None, :] - qt.amax(2)[:, :, None]) >= max_dist
        behind = (kt.amax(2)[:, None, :] - qt.amin(2)[:, :, None]) <= -max_dist
        far = (cls == FULL) & (ahead | behind)
        run = kt - torch.arange(BN, device=see.device)  # k_pos - slot: constant over a consecutive tile
        consecutive = (run.amax(2) == run.amin(2))[:, None, :]
        cls = torch.where(far, FAR, torch.where((cls == FULL) & ~consecutive, GATHER, cls)).to(torch.int8)
    return cls, ahead


def lists_from_classes(cls, ahead):
    """(B, R, SLOTS, T) int32 lists (unused slots -1) and (B, R, SLOTS) int32 counts from (B, R, T)
    classes, as the map kernels write them, each list in increasing tile order."""
    B, R, T = cls.shape
    lists = torch.full((B, R, SLOTS, T), -1, dtype=torch.int32)
    counts = torch.zeros(B, R, SLOTS, dtype=torch.int32)
    for b in range(B):
        for r in range(R):
            for j, c in enumerate((PARTIAL, FULL, FAR, GATHER)):
                tiles = (cls[b, r] == c).nonzero().flatten()
                entries = 2 * tiles + ahead[b, r, tiles].long() if c == FAR else tiles
                lists[b, r, j, : len(tiles)] = entries.to(torch.int32)
                counts[b, r, j] = len(tiles)
    return lists, counts


# -----------------------------------------------------------------------------
# the kernels


@triton.jit
def _codes_kernel(
    KIND,
    STEP,
    VALID,
    SEQ,
    POS,
    OUT,
    n,
    L,
    Lp,
    s_kind,
    s_step,
    s_valid,
    s_seq,
    s_pos,
    HAS_VALID: tl.constexpr,
    HAS_SEQ: tl.constexpr,
    HAS_POS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The six code planes of n = B * L tokens (module docstring) into OUT (6, B, Lp) int32, rows
    padded to Lp (a multiple of 16, so that the kernels load a tile's codes 16 bytes at a time).
    Inputs are (B, L) with row stride s_* and unit column stride (an expanded (1, L) row has s 0)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    row, col = offs // L, offs % L
    dst = row * Lp + col
    n_out = (n // L) * Lp
    kind = tl.load(KIND + row * s_kind + col, mask=inside, other=0).to(tl.int32)
    step = tl.load(STEP + row * s_step + col, mask=inside, other=0).to(tl.int32)
    live = kind >= 0
    if HAS_VALID:
        live = live & (tl.load(VALID + row * s_valid + col, mask=inside, other=0) != 0)
    qa = tl.where(kind == 0, -_BIG, tl.where(kind == 1, step, step - 1))
    qb = tl.where(kind == 2, step, _NONE_Q)
    ka = tl.where(live, tl.where(kind == 0, -_BIG, tl.where(kind == 1, step, _BIG)), _BIG)
    kb = tl.where(live & (kind == 2), step, _NONE_K)
    tl.store(OUT + dst, qa, mask=inside)
    tl.store(OUT + n_out + dst, qb, mask=inside)
    tl.store(OUT + 2 * n_out + dst, ka, mask=inside)
    tl.store(OUT + 3 * n_out + dst, kb, mask=inside)
    if HAS_SEQ:
        tl.store(
            OUT + 4 * n_out + dst, tl.load(SEQ + row * s_seq + col, mask=inside, other=0).to(tl.int32), mask=inside
        )
    else:
        tl.store(OUT + 4 * n_out + dst, tl.zeros((BLOCK,), tl.int32), mask=inside)
    if HAS_POS:
        tl.store(
            OUT + 5 * n_out + dst, tl.load(POS + row * s_pos + col, mask=inside, other=0).to(tl.int32), mask=inside
        )
    else:
        tl.store(OUT + 5 * n_out + dst, tl.zeros((BLOCK,), tl.int32), mask=inside)


@triton.jit
def _tile_codes(C, plane_stride, row_stride, b, idx, L, QUERY: tl.constexpr):
    """(a, b, seq, pos) codes of tokens idx of row b from a (6, B, Lp) code tensor; slots past L get
    a query code that sees nothing (QUERY) or a dead key's."""
    inside = idx < L
    base = C + b * row_stride + idx
    if QUERY:
        a = tl.load(base + _QA * plane_stride, mask=inside, other=-_BIG - 1)
        bb = tl.load(base + _QB * plane_stride, mask=inside, other=_NONE_Q)
    else:
        a = tl.load(base + _KA * plane_stride, mask=inside, other=_BIG)
        bb = tl.load(base + _KB * plane_stride, mask=inside, other=_NONE_K)
    seq = tl.load(base + _SEQ * plane_stride, mask=inside, other=-1)
    pos = tl.load(base + _POS * plane_stride, mask=inside, other=0)
    return a, bb, seq, pos


@triton.jit
def _class_kernel(
    QC,
    KC,
    sq,
    sk,
    rq,
    rk,
    SEEN,
    QSUM,
    KSUM,
    Lq,
    Lk,
    n_r,
    n_c,
    GR: tl.constexpr,
    GC: tl.constexpr,
    HAS_SEQ: tl.constexpr,
):
    """Map phase 1, one program per (key cell, query cell, row b) of a grid of GR x GC cells, every
    pair evaluated: SEEN[b, r, c] = 1 if some pair of cell (r, c) is visible, + 2 if every pair is
    (a cell that straddles Lq or Lk has invisible pairs). Programs of key cell 0 also write their
    query cell's position summary QSUM[b, r] = (min, max), programs of query cell 0 their key cell's
    KSUM[b, c] = (min, max, first position, 1 if the positions run first, first + 1, ...)."""
    c, r, b = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    rows = r * GR + tl.arange(0, GR)
    cols = c * GC + tl.arange(0, GC)
    qa, qb, qq, qp = _tile_codes(QC, sq, rq, b, rows, Lq, True)
    ka, kb, kq, kp = _tile_codes(KC, sk, rk, b, cols, Lk, False)
    see = (ka[None, :] <= qa[:, None]) | (kb[None, :] == qb[:, None])
    if HAS_SEQ:
        see = see & (kq[None, :] == qq[:, None])
    see = see & (rows < Lq)[:, None]
    n_seen = tl.sum(tl.sum(see.to(tl.int32), 1), 0)
    tl.store(
        SEEN + (b * n_r + r) * n_c + c, ((n_seen > 0).to(tl.int32) + 2 * (n_seen == GR * GC).to(tl.int32)).to(tl.int8)
    )
    if c == 0:
        tl.store(QSUM + (b * n_r + r) * 2, tl.min(qp, 0))
        tl.store(QSUM + (b * n_r + r) * 2 + 1, tl.max(qp, 0))
    if r == 0:
        run = kp - tl.arange(0, GC)
        base = KSUM + (b * n_c + c) * 4
        tl.store(base, tl.min(kp, 0))
        tl.store(base + 1, tl.max(kp, 0))
        tl.store(base + 2, tl.max(run, 0))  # the first position, when they run
        tl.store(base + 3, (tl.max(run, 0) == tl.min(run, 0)).to(tl.int32))


@triton.jit
def _tile_class(
    SEEN,
    QSUM,
    KSUM,
    b,
    n_r,
    n_c,
    qt,
    kt,
    ok,
    RT: tl.constexpr,
    CT: tl.constexpr,
    GC: tl.constexpr,
    max_dist,
    REL: tl.constexpr,
):
    """(class, ahead) of tiles (qt, kt), vectors of query and key tile indices (one of them a scalar)
    whose tiles are RT x CT cells of phase 1; ok masks the vector's slots past the last tile. A cell
    past the grid (a tile that straddles Lq or Lk) reads as invisible, so its tile is never FULL."""
    zero = qt * 0 + kt * 0  # every index below a vector (the interpreter rejects a scalar mask in a vector one)
    seen_any = zero
    seen_all = seen_any + 1
    q_lo = seen_any + 2147483647
    q_hi = -q_lo
    for i in tl.static_range(RT):
        r = qt * RT + i + zero
        for j in tl.static_range(CT):
            cc = kt * CT + j + zero
            m = ok & (r < n_r) & (cc < n_c)
            cell = tl.load(SEEN + (b * n_r + r) * n_c + cc, mask=m, other=0).to(tl.int32)
            seen_any = seen_any | (cell & 1)
            seen_all = seen_all & (cell >> 1)
        if REL:
            q_lo = tl.minimum(q_lo, tl.load(QSUM + (b * n_r + r) * 2, mask=ok & (r < n_r), other=2147483647))
            q_hi = tl.maximum(q_hi, tl.load(QSUM + (b * n_r + r) * 2 + 1, mask=ok & (r < n_r), other=-2147483647))
    cls = seen_any + seen_all
    ahead = cls < 0
    if REL:
        k_lo = q_lo * 0 + 2147483647
        k_hi = -k_lo
        consecutive = seen_all * 0 + 1
        first = k_lo * 0
        for j in tl.static_range(CT):
            cc = kt * CT + j + zero
            m = ok & (cc < n_c)
            base = KSUM + (b * n_c + cc) * 4
            k_lo = tl.minimum(k_lo, tl.load(base, mask=m, other=2147483647))
            k_hi = tl.maximum(k_hi, tl.load(base + 1, mask=m, other=-2147483647))
            start = tl.load(base + 2, mask=m, other=0)
            consecutive = consecutive & tl.load(base + 3, mask=m, other=0)
            if j == 0:
                first = start
            else:
                consecutive = consecutive & (start == first + j * GC).to(tl.int32)
        ahead = k_lo - q_hi >= max_dist
        behind = k_hi - q_lo <= -max_dist
        far = (cls == 2) & (ahead | behind)
        cls = tl.where(far, 3, tl.where((cls == 2) & (consecutive == 0), 4, cls))
    return cls, ahead


@triton.jit
def _write_lists(lst, counts, cap, tile, cls, ahead, ok):
    """The tiles of each class in its list, in increasing order (a prefix sum gives each its slot),
    and the four counts."""
    for c in tl.static_range(1, 5):
        hit = ok & (cls == c)
        slot = tl.cumsum(hit.to(tl.int32), 0) - 1
        value = 2 * tile + ahead.to(tl.int32) if c == 3 else tile
        tl.store(lst + (c - 1) * cap + slot, value, mask=hit)
        tl.store(counts + c - 1, tl.sum(hit.to(tl.int32), 0))


@triton.jit(do_not_specialize=["n_r", "n_c", "n_qt", "n_kt", "n_qs", "n_ks"])
def _list_kernel(
    SEEN,
    QSUM,
    KSUM,
    QLIST,
    QCOUNT,
    KLIST,
    KCOUNT,
    n_r,
    n_c,
    n_qt,
    n_kt,
    n_qs,
    n_ks,
    max_dist,
    RQ: tl.constexpr,
    CQ: tl.constexpr,
    RK: tl.constexpr,
    CK: tl.constexpr,
    GC: tl.constexpr,
    NKT: tl.constexpr,
    NQS: tl.constexpr,
    REL: tl.constexpr,
):
    """Map phase 2, no loop: programs 0..n_qt-1 write the q-major lists of query tile pid (each
    tile RQ x CQ cells; its n_kt key tiles as one vector of NKT >= n_kt slots), programs n_qt..
    n_qt+n_ks-1 the k-major lists of key tile pid - n_qt (RK x CK cells, n_qs query tiles in NQS
    slots). Grid (n_qt + n_ks, B)."""
    pid, b = tl.program_id(0), tl.program_id(1).to(tl.int64)
    if pid < n_qt:  # (the two branches' values have other shapes: other names)
        kt = tl.arange(0, NKT)
        kt_ok = kt < n_kt
        q_cls, q_ahead = _tile_class(SEEN, QSUM, KSUM, b, n_r, n_c, pid, kt, kt_ok, RQ, CQ, GC, max_dist, REL)
        _write_lists(
            QLIST + (b * n_qt + pid) * 4 * n_kt, QCOUNT + (b * n_qt + pid) * 4, n_kt, kt, q_cls, q_ahead, kt_ok
        )
    else:
        jt = pid - n_qt
        it = tl.arange(0, NQS)
        it_ok = it < n_qs
        k_cls, k_ahead = _tile_class(SEEN, QSUM, KSUM, b, n_r, n_c, it, jt, it_ok, RK, CK, GC, max_dist, REL)
        _write_lists(KLIST + (b * n_ks + jt) * 4 * n_qs, KCOUNT + (b * n_ks + jt) * 4, n_qs, it, k_cls, k_ahead, it_ok)


# -----------------------------------------------------------------------------
# launchers


def code_tensor(kind, step, valid=None, seq=None, pos=None):
    """The codes of (B, L) metadata in one launch: what `codes` computes, in a (6, B, Lp) int32
    tensor whose rows are padded to Lp, the next multiple of 16 (the padding is never read)."""
    return _codes_launch(kind, step, valid, seq, pos, kind.device.type)


def _codes_launch(kind, step, valid, seq, pos, device_type):
    B, L = kind.shape
    out = torch.empty((6, B, -(-L // 16) * 16), dtype=torch.int32, device=kind.device)
    n = B * L
    if n == 0:
        return out

    def rows(x):  # (B, L) with unit column stride, as it is or copied once (no copy for the model's tensors)
        if x is None:
            return kind, 0
        if x.shape[1] > 1 and x.stride(1) != 1:
            x = x.contiguous()
        return x, (x.stride(0) if B > 1 else 0)

    (kind_, sk_), (step_, ss_), (valid_, sv_), (seq_, sq_), (pos_, sp_) = map(rows, (kind, step, valid, seq, pos))
    block = 1024 if device_type == "cuda" else 64
    _codes_kernel[(triton.cdiv(n, block),)](
        kind_,
        step_,
        valid_,
        seq_,
        pos_,
        out,
        n,
        L,
        out.shape[2],
        sk_,
        ss_,
        sv_,
        sq_,
        sp_,
        HAS_VALID=valid is not None,
        HAS_SEQ=seq is not None,
        HAS_POS=pos is not None,
        BLOCK=block,
        num_warps=4 if device_type == "cuda" else 1,
    )
    return out


class TileMap(NamedTuple):
    q_blocks: tuple  # (BM, BN) of the q-major lists
    k_blocks: tuple  # (BMk, BNk) of the k-major lists
    q_list: torch.Tensor  # (B, n_qt, SLOTS, n_kt) int32: PARTIAL | FULL | FAR | GATHER key tiles
    q_count: torch.Tensor  # (B, n_qt, SLOTS) int32
    k_list: Optional[torch.Tensor]  # (B, n_ks, SLOTS, n_qs) int32: the same per key tile, query tiles of BMk
    k_count: Optional[torch.Tensor]  # (B, n_ks, SLOTS) int32


def build_map(qc, kc, q_blocks, k_blocks, has_seq, max_dist=None, warps=4, device_type=None, Lq=None, Lk=None):
    """The TileMap of two code tensors (6, B, Lq or more) and (6, B, Lk or more): two launches, the
    pairs of a grid of cells as fine as both block shapes (_class_kernel), then every list at once
    from the cells (_list_kernel). max_dist: that of the relative bias (FAR and GATHER tiles), or
    None. k_blocks None: no k-major lists (a forward without backward). Lq, Lk: the lengths, when the
    rows are padded. warps: of the cell programs on a GPU."""
    _, B, rq = qc.shape
    rk = kc.shape[2]
    Lq, Lk = Lq or rq, Lk or rk
    BM, BN = q_blocks
    BMk, BNk = k_blocks or (BM, BN)
    GR, GC = min(BM, BMk), min(BN, BNk)  # powers of two: each block is a whole number of cells
    n_qt, n_kt = triton.cdiv(Lq, BM), triton.cdiv(Lk, BN)
    n_qs, n_ks = triton.cdiv(Lq, BMk), triton.cdiv(Lk, BNk)
    n_r, n_c = triton.cdiv(Lq, GR), triton.cdiv(Lk, GC)
    dev = qc.device
    cuda = (device_type or dev.type) == "cuda"
    seen = torch.empty((B, n_r, n_c), dtype=torch.int8, device=dev)
    qsum = torch.empty((B, n_r, 2), dtype=torch.int32, device=dev)
    ksum = torch.empty((B, n_c, 4), dtype=torch.int32, device=dev)
    q_list = torch.empty((B, n_qt, SLOTS, n_kt), dtype=torch.int32, device=dev)
    q_count = torch.empty((B, n_qt, SLOTS), dtype=torch.int32, device=dev)
    k_list = torch.empty((B, n_ks, SLOTS, n_qs), dtype=torch.int32, device=dev) if k_blocks else q_list
    k_count = torch.empty((B, n_ks, SLOTS), dtype=torch.int32, device=dev) if k_blocks else q_count
    _class_kernel[(n_c, n_r, B)](
        qc,
        kc,
        B * rq,
        B * rk,
        rq,
        rk,
        seen,
        qsum,
        ksum,
        Lq,
        Lk,
        n_r,
        n_c,
        GR=GR,
        GC=GC,
        HAS_SEQ=has_seq,
        num_warps=warps if cuda else 1,
    )
    _list_kernel[(n_qt + (n_ks if k_blocks else 0), B)](
        seen,
        qsum,
        ksum,
        q_list,
        q_count,
        k_list,
        k_count,
        n_r,
        n_c,
        n_qt,
        n_kt,
        n_qs,
        n_ks,
        0 if max_dist is None else int(max_dist),
        RQ=BM // GR,
        CQ=BN // GC,
        RK=BMk // GR,
        CK=BNk // GC,
        GC=GC,
        NKT=triton.next_power_of_2(n_kt),
        NQS=triton.next_power_of_2(n_qs),
        REL=max_dist is not None,
        num_warps=4 if cuda else 1,
    )
    return TileMap(
        (BM, BN),
        (BMk, BNk) if k_blocks else None,
        q_list,
        q_count,
        k_list if k_blocks else None,
        k_count if k_blocks else None,
    )
