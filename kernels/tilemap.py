"""The tile map of pseudo-mask attention: which (query tile, key tile) pairs the kernels visit.

The attention rule (kernels/reference.py) depends only on small per-token integers, so a tile of
BLOCK tokens can be summarised by a few numbers: which kinds occur in it, the smallest and largest
step of each kind, the smallest and largest sequence id, and whether every key is a real, valid
key. From two summaries alone we can tell, conservatively, that a pair of tiles is

  EMPTY   (0): no query of the tile sees any key of the tile. The kernels never load it.
  PARTIAL (1): some pairs may be visible. The kernels apply the rule element by element.
  FULL    (2): every query of the tile sees every key of the tile. No mask arithmetic at all.
  FAR     (3): FULL, and with a relative position bias every (query, key) pair of the tile clamps to
               the same distance, +M or -M (M the bias's max distance): one bias value for the whole
               tile. The kernels run these in a loop of their own that is plain FlashAttention plus
               one scalar load, and whose bias gradient is one atomic add of the tile's sum.

"Conservative" means a pair is called EMPTY or FULL only when that is certain; anything in doubt
is PARTIAL, which is always correct, only slower.

The map is then compacted into lists, so that a kernel's loops run over the non-EMPTY tiles only:
  q-major: for each (batch, query tile) the non-EMPTY key tiles and a count (forward pass and dQ);
  k-major: for each (batch, key tile) the non-EMPTY query tiles and a count (dK, dV).
Each list holds the PARTIAL and FULL tiles first, in increasing order, then the FAR ones; `split`
counts the former. An entry packs the tile index and one bit as `2 * tile + bit`, one load in the
kernel: the FULL flag before `split`, the sign of the clamped distance (1 for +M) after it.
Everything is built with torch ops on the metadata's device: no .item(), no host sync, and the
kernels read the lists as runtime data, so a new mask or batch never recompiles anything.
"""
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from .reference import CONTEXT, ORIGINAL, PSEUDO

EMPTY, PARTIAL, FULL, FAR = 0, 1, 2, 3
NEVER = -1  # the kind given to padding keys and to the padding of the last tile: seen by no query
_BIG = 2 ** 30


class TileSummary(NamedTuple):
    present: torch.Tensor   # (B, T, 3) bool: kind c occurs among the live tokens of the tile
    step_min: torch.Tensor  # (B, T, 3) smallest step of kind c (meaningless when absent)
    step_max: torch.Tensor  # (B, T, 3) largest step of kind c
    seq_min: torch.Tensor   # (B, T) smallest sequence id of the live tokens
    seq_max: torch.Tensor   # (B, T)
    all_live: torch.Tensor  # (B, T) bool: every slot of the tile holds a live token
    pos_min: torch.Tensor   # (B, T) smallest position id of the live tokens
    pos_max: torch.Tensor   # (B, T)


class TileMap(NamedTuple):
    block_m: int
    block_n: int
    cls: torch.Tensor                  # (B, n_qt, n_kt) int8: EMPTY, PARTIAL or FULL
    q_list: torch.Tensor               # (B, n_qt, n_kt) int32: 2 * key tile + full, non-EMPTY first
    q_count: torch.Tensor              # (B, n_qt) int32: how many entries of q_list are real
    q_split: torch.Tensor              # (B, n_qt) int32: how many of them are PARTIAL or FULL (not FAR)
    k_list: Optional[torch.Tensor]     # (B, n_kt, n_qt) int32: 2 * query tile + bit
    k_count: Optional[torch.Tensor]    # (B, n_kt) int32
    k_split: Optional[torch.Tensor]    # (B, n_kt) int32


def summarise(kind, step, seq, block, pos=None):
    """Per-tile summary of (B, L) metadata; kind NEVER marks tokens that take no part."""
    B, L = kind.shape
    n = -(-L // block)
    pad = n * block - L
    kind = F.pad(kind, (0, pad), value=NEVER).view(B, n, block)
    step = F.pad(step, (0, pad)).view(B, n, block)
    seq = F.pad(seq, (0, pad)).view(B, n, block)
    pos = torch.zeros_like(seq) if pos is None else F.pad(pos, (0, pad)).view(B, n, block)
    live = kind != NEVER
    of_kind = kind[..., None] == torch.arange(3, device=kind.device)  # (B, n, block, 3)
    big = torch.full((), _BIG, dtype=step.dtype, device=step.device)
    step_min = torch.where(of_kind, step[..., None], big).amin(2)
    step_max = torch.where(of_kind, step[..., None], -big).amax(2)
    seq_min = torch.where(live, seq, big).amin(2)
    seq_max = torch.where(live, seq, -big).amax(2)
    pos_min = torch.where(live, pos, big).amin(2)
    pos_max = torch.where(live, pos, -big).amax(2)
    return TileSummary(of_kind.any(2), step_min, step_max, seq_min, seq_max, live.all(2), pos_min, pos_max)


def classify(qs: TileSummary, ks: TileSummary, max_dist=None):
    """(B, n_qt, n_kt) int8 EMPTY / PARTIAL / FULL / FAR from a query and a key summary, and the
    (B, n_qt, n_kt) bool sign of a FAR tile's distance (True: every k_pos - q_pos >= max_dist).
    max_dist None: no relative bias, no FAR tiles."""
    qp, qlo, qhi = (t[:, :, None] for t in (qs.present, qs.step_min, qs.step_max))  # (B, Tq, 1, 3)
    kp, klo, khi = (t[:, None] for t in (ks.present, ks.step_min, ks.step_max))     # (B, 1, Tk, 3)
    C, O, P = CONTEXT, ORIGINAL, PSEUDO
    q_any = qp.any(-1)
    # some pair may be visible: one (query kind, key kind) combination whose step intervals allow it
    maybe = kp[..., C] & q_any
    maybe = maybe | (qp[..., O] & kp[..., O] & (klo[..., O] <= qhi[..., O]))
    maybe = maybe | (qp[..., P] & kp[..., O] & (klo[..., O] < qhi[..., P]))
    maybe = maybe | (qp[..., P] & kp[..., P] & (klo[..., P] <= qhi[..., P]) & (qlo[..., P] <= khi[..., P]))
    q_seq_lo, q_seq_hi = qs.seq_min[:, :, None], qs.seq_max[:, :, None]
    k_seq_lo, k_seq_hi = ks.seq_min[:, None], ks.seq_max[:, None]
    maybe = maybe & (q_seq_lo <= k_seq_hi) & (k_seq_lo <= q_seq_hi)
    # every pair visible: every key slot live, one sequence, and every combination that occurs
    # allows every step it can meet (a CONTEXT query sees CONTEXT keys only)
    ok_c = ~qp[..., C] | ~(kp[..., O] | kp[..., P])
    ok_o = ~qp[..., O] | (~kp[..., P] & (~kp[..., O] | (khi[..., O] <= qlo[..., O])))
    one_step = (klo[..., P] == khi[..., P]) & (qlo[..., P] == qhi[..., P]) & (klo[..., P] == qlo[..., P])
    ok_p = ~qp[..., P] | ((~kp[..., O] | (khi[..., O] < qlo[..., P])) & (~kp[..., P] | one_step))
    one_seq = (q_seq_lo == q_seq_hi) & (k_seq_lo == k_seq_hi) & (q_seq_lo == k_seq_lo)
    full = maybe & ks.all_live[:, None] & ok_c & ok_o & ok_p & one_seq
    cls = maybe.to(torch.int8) + full.to(torch.int8)
    ahead = (ks.pos_min[:, None] - qs.pos_max[:, :, None]) >= (max_dist or 0)
    if max_dist is None:
        return cls, ahead
    behind = (ks.pos_max[:, None] - qs.pos_min[:, :, None]) <= -max_dist
    return cls + (full & (ahead | behind)).to(torch.int8), ahead


def compact(cls, ahead):
    """(B, R, T) classes and FAR signs -> the (B, R, T) int32 list of 2 * tile + bit (PARTIAL and FULL
    tiles first in increasing order with bit = full, then FAR tiles with bit = ahead), the (B, R)
    int32 count of non-EMPTY tiles and the (B, R) int32 count of PARTIAL and FULL ones."""
    rank = torch.where(cls == EMPTY, 2, torch.where(cls == FAR, 1, 0)).to(torch.int8)
    order = torch.sort(rank, dim=-1, stable=True).indices
    c = torch.gather(cls, -1, order)
    bit = torch.where(c == FAR, torch.gather(ahead, -1, order), c == FULL)
    entries = (2 * order + bit).to(torch.int32).contiguous()
    count = (cls != EMPTY).sum(-1).to(torch.int32).contiguous()
    split = ((cls == PARTIAL) | (cls == FULL)).sum(-1).to(torch.int32).contiguous()
    return entries, count, split


def build_tile_map(q_kind, q_step, q_seq, k_kind, k_step, k_seq, block_m, block_n, transposed=True,
                   q_pos=None, k_pos=None, max_dist=None):
    """Tile map from (B, L) int metadata. k_kind must already hold NEVER for invalid keys;
    q_seq / k_seq may be None (one sequence per row). `transposed` also builds the k-major lists.
    With the position ids and max distance of a relative bias, FULL tiles whose pairs all clamp to
    one distance become FAR."""
    if q_seq is None:
        q_seq, k_seq = torch.zeros_like(q_kind), torch.zeros_like(k_kind)
    cls, ahead = classify(summarise(q_kind, q_step, q_seq, block_m, q_pos),
                          summarise(k_kind, k_step, k_seq, block_n, k_pos), max_dist)
    q_list, q_count, q_split = compact(cls, ahead)
    k_list = k_count = k_split = None
    if transposed:
        k_list, k_count, k_split = compact(cls.transpose(1, 2), ahead.transpose(1, 2))
    return TileMap(block_m, block_n, cls, q_list, q_count, q_split, k_list, k_count, k_split)
