"""What the pseudo-mask attention kernels (kernels/pseudo_attention.py) read besides q, k and v,
and how it is launched: the block configurations per head dim, and the plan of a call (the codes
and tile map of kernels/tilemap.py, the bias table scaled to base 2), built once per metadata into
the caller's cache and checked on the host only.
"""
from typing import NamedTuple

import torch
import triton

from .reference import RelPosBias
from .tilemap import build_map, code_tensor

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
LOG2E = 1.4426950408889634
WINDOW_PAD = 128  # the extended bias table reaches M + WINDOW_PAD: no key block may be wider


# -----------------------------------------------------------------------------
# launch configurations

class Config(NamedTuple):
    """Blocks, warps and stages of the three kernels. The forward and dQ share the q-major lists
    (BM x BN); dK/dV reads the k-major lists (BMK query rows x BNK keys)."""
    BM: int
    BN: int
    fwd_warps: int
    fwd_stages: int
    BMK: int
    BNK: int
    kv_warps: int
    kv_stages: int
    dq_warps: int
    dq_stages: int


# The forward's blocks: the fastest forward+backward of bench/bench_attention.py --sweep's
# candidates on a GPU, PMLM at D 64 and s2s-1k at D 128 (bench/RESULTS.md). The dK/dV kernel's at
# D 64: one warpgroup on 64 keys x 32 queries, so that each product is computed once (with two
# warpgroups on 64 keys, Triton lays a product that feeds another along all the warps' rows and the
# second repeats the first's S^T and dP^T) and two programs fit an SM without spills; at D 128 one
# warpgroup spills, so the kernel keeps two. The compiled counts of each: docs/kernels.md ("The
# backward without doubled work", python -m tools.aot --loops).
CUDA_CONFIGS = {
    64: Config(64, 64, 4, 3, 32, 64, 4, 4, 4, 3),
    128: Config(64, 64, 4, 2, 32, 64, 8, 2, 4, 3),
}
# Each loop reads its tile list a tile ahead (attention_tiles._entry), so at 3 stages the pipeliner
# keeps K and V two tiles ahead and the forward's shared memory grows by a third buffer: at D 128
# that leaves one block an SM, so the D 128 forward runs 2 stages until a sweep says otherwise
# (the shared memory of each case: python -m tools.aot).
# The backward's structure: False, two kernels (dK/dV per key tile, dQ per query tile, each
# recomputing the probabilities of its tiles); True, one at head dims up to 64 (the dK/dV kernel adds
# each tile's dQ into a float32 buffer by atomics), measured faster there (bench/RESULTS.md) and the
# cheaper by count: per 32 x 64 tile at D 64, fused costs one product (dQ^T = K^T dS^T) and 2,048
# float32 atomic adds; apart, the dQ kernel redoes S and dP (two products) besides dS K, reloads K and
# V (16 KB a 64-key tile) and recomputes the tile's exponentials, bias and rule. At D 128 the dK/dV
# kernel is at its registers' limit without dQ, so D 128 keeps two kernels. A plan records the
# choice it was made with (meta["fused"]).
# The atomics make dQ's float32 sums order-dependent on a GPU (as the bias table's gradient already
# was): equal to within rounding, not bit for bit, from run to run.
FUSED_DQ = True
# The table's gradient summed by windows in registers (kernels/attention_backward.py) up to this head
# dim; past it every pair is added by an atomic (at D 128 the dK/dV kernel is at its registers' limit).
GRAD_WINDOWS_MAX_D = 64
MAP_WARPS = 4  # of the tile map's cell programs (kernels/tilemap.py _class_kernel) on a GPU
# The relative bias table in q's dtype (16-bit q only) instead of float32. A FULL tile reads its bias
# as a (BM, BN) window of the table, through shared memory like K and V: in float32 that is as many
# bytes as K and V together at D 64. 16 bits halve that shared memory but add conversions to the
# forward's loop (docs/LOG.md has the compiles), and the bias then carries bf16's 8 bits of
# mantissa, as q and k do. Off until a GPU has timed both (bench/bench_attention.py).
TABLE_16BIT = False
# under the interpreter a tile costs Python time, and small tiles make the tests cross many tile
# boundaries; the two orientations differ so that the tests check each list on its own
INTERPRET_CONFIG = Config(16, 16, 1, 1, 16, 32, 1, 1, 1, 1)
OVERRIDE = {}  # head dim -> Config: what a benchmark sweep sets to try another


def config(device, D):
    if device.type != "cuda":
        return INTERPRET_CONFIG
    cfg = OVERRIDE.get(D) or CUDA_CONFIGS[64 if D <= 64 else 128]
    assert max(cfg.BN, cfg.BNK) <= WINDOW_PAD, f"key blocks wider than WINDOW_PAD = {WINDOW_PAD}: {cfg}"
    return cfg


# -----------------------------------------------------------------------------
# the kernels' arguments, grouped: each a NamedTuple the launcher fills and a kernel reads by field

class Rows(NamedTuple):
    """A (B, H, L, D) tensor: its pointer and its batch, head and row strides (the last is 1)."""
    ptr: object
    sb: int
    sh: int
    sm: int


def rows_of(x):
    return Rows(x, *x.stride()[:3])


class Codes(NamedTuple):
    """The codes of kernels/tilemap.py, (6, B, Lp) int32 each: q's and k's, planes sq and sk apart,
    rows rq and rk apart."""
    QC: object
    KC: object
    sq: int
    sk: int
    rq: int
    rk: int


class Lists(NamedTuple):
    """One orientation's tile lists (kernels/tilemap.TileMap): (B, n, 4, m) entries, (B, n, 4) counts."""
    LIST: object
    COUNT: object


class RelBias(NamedTuple):
    """The relative bias as the kernels read it: the extended table (H, 4, TW) (extended_table) and
    its max distance M; DTABLE, the dK/dV programs' rows of its gradient (P, H, NB * BN), or any
    pointer where none is asked."""
    TABLE: object
    DTABLE: object
    max_dist: int


class DenseBias(NamedTuple):
    """A dense additive bias expanded to (B, H, Lq, Lk) (zero strides broadcast), and DBIAS, the
    (B, H, Lq, Lk) float32 buffer of its gradient, or any pointer where none is asked."""
    BIAS: object
    sb: int
    sh: int
    sm: int
    sn: int
    DBIAS: object


class Flags(NamedTuple):
    """The compile-time flags of the attention kernels (one constexpr): head dim, blocks (BM x BN: query
    rows x keys), the extended table's row width TW (table_width), the blocks NB of a dK/dV program's
    gradient row (grad_blocks), and what a kernel computes besides its outputs."""
    D: int
    BM: int
    BN: int
    TW: int
    NB: int
    HAS_SEQ: bool
    REL: bool
    REL_GRAD: bool
    DENSE: bool
    DENSE_GRAD: bool
    FUSED_DQ: bool
    GRAD_WINDOWS: bool
    PRECISION: str


# -----------------------------------------------------------------------------
# the plan: codes, map and scaled bias table, built once per metadata

def _cached(cache, key, refs, build):
    """cache[key] built by build() and kept with `refs`, the tensors it was made from: an entry whose
    tensors are not these (an id reused, or a caller that changed them) is built again."""
    if cache is None:
        return build()
    entry = cache.get(key)
    if entry is None or len(entry[0]) != len(refs) or any(a is not b for a, b in zip(entry[0], refs)):
        entry = cache[key] = (refs, build())
    return entry[1]


def plan(cache, cfg, q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, q_pos, k_pos, max_dist, backward):
    """(q codes, k codes, TileMap): 1-3 launches the first time, none after (same cache, same
    tensors). The k-major lists are built only when a backward will need them."""
    refs = (q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, q_pos, k_pos)

    def codes():
        kc = code_tensor(k_kind, k_step, k_valid, k_seq, k_pos)
        same = q_kind is k_kind and q_step is k_step and q_seq is k_seq and q_pos is k_pos
        return (kc if same else code_tensor(q_kind, q_step, None, q_seq, q_pos)), kc
    qc, kc = _cached(cache, "codes", refs, codes)

    def tiles():
        return build_map(qc, kc, (cfg.BM, cfg.BN), (cfg.BMK, cfg.BNK) if backward else None, q_seq is not None,
                         max_dist, MAP_WARPS if q_kind.is_cuda else 1, Lq=q_kind.shape[1], Lk=k_kind.shape[1])
    key = ("map", cfg, max_dist)
    if cache is not None and key in cache and backward and cache[key][1].k_list is None:
        del cache[key]  # built for a forward without gradient; now a backward needs the k-major lists
    return qc, kc, _cached(cache, key, refs, tiles)


def prepare(q, k, v, q_kind, q_step, k_kind, k_step, k_valid=None, q_seq=None, k_seq=None, bias=None,
            cache=None, backward=True, scale=None):
    """Check shapes, dtypes and layouts (host-side only); return what the kernels read: the codes,
    the tile map and the bias pieces, from `cache` where it holds them."""
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
        return x
    ints(q_kind, "q_kind", Lq), ints(q_step, "q_step", Lq), ints(k_kind, "k_kind", Lk), ints(k_step, "k_step", Lk)
    if k_valid is not None:
        assert k_valid.shape == (B, Lk), f"pseudo_attention: k_valid must be (B, Lk) = {(B, Lk)}"
        assert k_valid.device == q.device, f"pseudo_attention: k_valid is on {k_valid.device}, q on {q.device}"
    assert (q_seq is None) == (k_seq is None), "pseudo_attention: give both q_seq and k_seq, or neither"
    if q_seq is not None:
        ints(q_seq, "q_seq", Lq), ints(k_seq, "k_seq", Lk)
    scale = D ** -0.5 if scale is None else float(scale)
    rel = isinstance(bias, RelPosBias)
    table = dense = q_pos = k_pos = ext = None
    M = 0
    if rel:
        table, M = bias.by_distance, int(bias.max_distance)
        assert table.dim() == 2 and table.shape == (H, 2 * M + 1), \
            f"pseudo_attention: by_distance must be (H, 2M+1) = {(H, 2 * M + 1)}, got {tuple(table.shape)}"
        q_pos, k_pos = ints(bias.q_pos, "q_pos", Lq), ints(bias.k_pos, "k_pos", Lk)
        dt = table_dtype(q)
        ext = _cached(cache, ("table", dt), (table,), lambda: extended_table(table, M, dt))
    elif bias is not None:
        dense = bias
        assert dense.is_floating_point() and dense.device == q.device, \
            "pseudo_attention: a dense bias must be a float tensor on q's device"
        assert dense.dim() <= 4, f"pseudo_attention: bias {tuple(dense.shape)} has more than 4 dims"
    qc, kc, tiles = plan(cache, config(q.device, D), q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, q_pos,
                         k_pos, M if rel else None, backward)
    return launch_meta(q, k, qc, kc, tiles, table, ext, dense, M, scale, q_seq is not None), table, dense


def table_dtype(q):
    """The dtype of the extended bias table the kernels read (TABLE_16BIT)."""
    return q.dtype if TABLE_16BIT and q.dtype != torch.float32 else torch.float32


def launch_meta(q, k, qc, kc, tiles, table, ext, dense, max_dist, scale, has_seq):
    """What the launchers (kernels/pseudo_attention.py) read of a call: its codes, tile map, bias pieces
    (table: the (H, 2M+1) bias table or None, ext its extended_table; dense: a dense bias or None),
    configuration and flags."""
    B, H, Lq, D = q.shape
    meta = dict(precision="ieee" if q.dtype == torch.float32 else "tf32", rel=table is not None, scale=scale,
                has_seq=has_seq, dense=None, max_dist=max_dist if table is not None else 0, qc=qc, kc=kc, tiles=tiles,
                cfg=config(q.device, D), fused=FUSED_DQ and D <= 64, table=qc)  # a pointer the kernels never read
    if table is not None:
        meta.update(table=ext, table_dtype=table.dtype)
    if dense is not None:
        meta["dense"], meta["dense_dtype"] = dense.detach().expand(B, H, Lq, k.shape[2]), dense.dtype
    return meta


# -----------------------------------------------------------------------------
# the relative bias as the kernels read it

_INDEX = {}  # the gather indices of the extended table and the fold of the gradient rows, made once


def table_width(M):
    """Row length of the extended table: 2E+1 entries for E = M + WINDOW_PAD, padded to a multiple
    of 16 (with the 3 entries the shifted copies read past its end)."""
    return -(-(2 * (M + WINDOW_PAD) + 1 + 3) // 16) * 16


def _extension(M, H, device):
    E, width = M + WINDOW_PAD, table_width(M)
    key = (M, H, str(device))
    if key not in _INDEX:
        t = torch.arange(width + 3, device=device)
        d = (t - E).clamp(-M, M) + M  # slot t of the extended row -> column of the (H, 2M+1) table
        shifted = torch.stack([d[s:s + width] for s in range(4)])  # (4, width): copy s starts s entries later
        flat = shifted[None] + (2 * M + 1) * torch.arange(H, device=device)[:, None, None]  # (H, 4, width)
        _INDEX[key] = flat
    return _INDEX[key]


def extended_table(by_distance, M, dtype=torch.float32):
    """(H, 4, width) in dtype (float32 unless TABLE_16BIT): copy s of the extended table W,
    W[h, E + d] = by_distance[h, M + clamp(d, -M, M)] * log2(e) for d in [-E, E] (E = M + WINDOW_PAD; the kernels'
    scores are in
    base 2), shifted left by s entries. Past +-M W holds the clamped values, so that a FULL tile's
    rows are plain windows of it; the four shifted copies let a window that starts anywhere be read
    16 bytes at a time in float32 (kernels/attention_tiles.py `_window`; 8 in 16 bits).
    Float32 by default: TABLE_16BIT says why and what 16 bits would change."""
    flat = _extension(M, by_distance.shape[0], by_distance.device)
    w = by_distance.detach().reshape(-1)[flat].float() * LOG2E  # two launches: the gather, the scaling
    return w if dtype == torch.float32 else w.to(dtype)  # and a cast in 16 bits


def grad_blocks(M, BN):
    """Blocks of BN slots in a dK/dV program's row of the table's gradient (kernels/attention_backward.py):
    slot a holds distance clamp(a - M - BN, -M, M), a in [0, 2M + 2BN), so that a window of BN keys
    that starts anywhere in [-M - BN, M] lands inside it. A power of two, 16 at least (a tl.dot's width)."""
    return max(16, triton.next_power_of_2(-(-(2 * M + 2 * BN) // BN)))


def fold_table_grad(dw, M, BN):
    """The gradient of by_distance (H, 2M+1) from the dK/dV programs' rows (P, H, NB * BN) summed over
    programs: slot a is distance a - M - BN, and a distance past +-M belongs to the entry it clamps to."""
    width = dw.shape[2]
    key = ("fold", M, BN, width, str(dw.device))
    if key not in _INDEX:
        _INDEX[key] = (torch.arange(width, device=dw.device) - M - BN).clamp(-M, M) + M
    return torch.zeros(dw.shape[1], 2 * M + 1, device=dw.device).index_add_(1, _INDEX[key], dw.sum(0))
