"""The tile map of pseudo-mask attention: which (query tile, key tile) pairs the kernels visit.

The attention rule (kernels/reference.py) depends only on small per-token integers, so a tile of
BLOCK tokens can be summarised by a few numbers: which kinds occur in it, the smallest and largest
step of each kind, the smallest and largest sequence id, and whether every key is a real, valid
key. From two summaries alone we can tell, conservatively, that a pair of tiles is

  EMPTY   (0): no query of the tile sees any key of the tile. The kernels never load it.
  PARTIAL (1): some pairs may be visible. The kernels apply the rule element by element.
  FULL    (2): every query of the tile sees every key of the tile. No mask arithmetic at all.

"Conservative" means a pair is called EMPTY or FULL only when that is certain; anything in doubt
is PARTIAL, which is always correct, only slower.

The map is then compacted into lists, so that a kernel's loop runs over the non-EMPTY tiles only:
  q-major: for each (batch, query tile) the non-EMPTY key tiles, in increasing order, and a count
           (forward pass and dQ);
  k-major: for each (batch, key tile) the non-EMPTY query tiles and a count (dK, dV).
Each entry packs the tile index and the FULL flag as `2 * tile + full`, one load in the kernel.
Everything is built with torch ops on the metadata's device: no .item(), no host sync, and the
kernels read the lists as runtime data, so a new mask or batch never recompiles anything.
"""
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from .reference import CONTEXT, ORIGINAL, PSEUDO

EMPTY, PARTIAL, FULL = 0, 1, 2
NEVER = -1  # the kind given to padding keys and to the padding of the last tile: seen by no query
_BIG = 2 ** 30


class TileSummary(NamedTuple):
    present: torch.Tensor   # (B, T, 3) bool: kind c occurs among the live tokens of the tile
    step_min: torch.Tensor  # (B, T, 3) smallest step of kind c (meaningless when absent)
    step_max: torch.Tensor  # (B, T, 3) largest step of kind c
    seq_min: torch.Tensor   # (B, T) smallest sequence id of the live tokens
    seq_max: torch.Tensor   # (B, T)
    all_live: torch.Tensor  # (B, T) bool: every slot of the tile holds a live token


class TileMap(NamedTuple):
    block_m: int
    block_n: int
    cls: torch.Tensor                  # (B, n_qt, n_kt) int8: EMPTY, PARTIAL or FULL
    q_list: torch.Tensor               # (B, n_qt, n_kt) int32: 2 * key tile + full, non-EMPTY first
    q_count: torch.Tensor              # (B, n_qt) int32: how many entries of q_list are real
    k_list: Optional[torch.Tensor]     # (B, n_kt, n_qt) int32: 2 * query tile + full
    k_count: Optional[torch.Tensor]    # (B, n_kt) int32


def summarise(kind, step, seq, block):
    """Per-tile summary of (B, L) metadata; kind NEVER marks tokens that take no part."""
    B, L = kind.shape
    n = -(-L // block)
    pad = n * block - L
    kind = F.pad(kind, (0, pad), value=NEVER).view(B, n, block)
    step = F.pad(step, (0, pad)).view(B, n, block)
    seq = F.pad(seq, (0, pad)).view(B, n, block)
    live = kind != NEVER
    of_kind = kind[..., None] == torch.arange(3, device=kind.device)  # (B, n, block, 3)
    big = torch.full((), _BIG, dtype=step.dtype, device=step.device)
    step_min = torch.where(of_kind, step[..., None], big).amin(2)
    step_max = torch.where(of_kind, step[..., None], -big).amax(2)
    seq_min = torch.where(live, seq, big).amin(2)
    seq_max = torch.where(live, seq, -big).amax(2)
    return TileSummary(of_kind.any(2), step_min, step_max, seq_min, seq_max, live.all(2))


def classify(qs: TileSummary, ks: TileSummary):
    """(B, n_qt, n_kt) int8 EMPTY / PARTIAL / FULL from a query and a key summary."""
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
    return (maybe.to(torch.int8) + full.to(torch.int8))


def compact(cls):
    """(B, R, T) classes -> (B, R, T) int32 list of 2 * tile + full, non-EMPTY tiles first in
    increasing order, and the (B, R) int32 count of non-EMPTY tiles."""
    order = torch.sort((cls == EMPTY).to(torch.int8), dim=-1, stable=True).indices
    full = torch.gather(cls, -1, order) == FULL
    entries = (2 * order + full).to(torch.int32).contiguous()
    return entries, (cls != EMPTY).sum(-1).to(torch.int32).contiguous()


def build_tile_map(q_kind, q_step, q_seq, k_kind, k_step, k_seq, block_m, block_n, transposed=True):
    """Tile map from (B, L) int metadata. k_kind must already hold NEVER for invalid keys;
    q_seq / k_seq may be None (one sequence per row). `transposed` also builds the k-major lists."""
    if q_seq is None:
        q_seq, k_seq = torch.zeros_like(q_kind), torch.zeros_like(k_kind)
    cls = classify(summarise(q_kind, q_step, q_seq, block_m), summarise(k_kind, k_step, k_seq, block_n))
    q_list, q_count = compact(cls)
    k_list = k_count = None
    if transposed:
        k_list, k_count = compact(cls.transpose(1, 2))
    return TileMap(block_m, block_n, cls, q_list, q_count, k_list, k_count)
