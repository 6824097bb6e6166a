"""Readable PyTorch references for the kernels in this folder.

Every Triton kernel here is tested against the function of the same job in this file. These
functions materialise what the kernels never do (an (B, Lq, Lk) mask, a (B, H, Lq, Lk) bias) so
that a reader can check the rule in one screen.

The attention rule (UniLMv2 section 3.2, Figure 5): each token carries a kind (CONTEXT, ORIGINAL,
PSEUDO) and a factorization step.
  * every query sees every CONTEXT key;
  * an ORIGINAL query at step s also sees ORIGINAL keys at step <= s;
  * a PSEUDO query at step s also sees ORIGINAL keys at step < s and PSEUDO keys at step == s;
  * padding keys (k_valid False) and keys of another packed sequence are never seen.
A CONTEXT query therefore sees only CONTEXT keys.
"""

import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

CONTEXT, ORIGINAL, PSEUDO = 0, 1, 2


class MaskMeta(NamedTuple):
    """The per-token metadata an attention's mask is derived from, one value for every call of a
    forward that shares it: q_kind, q_step (B, Lq) and k_kind, k_step (B, Lk) int (kind CONTEXT,
    ORIGINAL or PSEUDO, step the factorization step); k_valid (B, Lk) bool, False for padding keys;
    q_seq (B, Lq) and k_seq (B, Lk) int sequence ids of a packed batch, both or neither.
    visible(*meta) is its mask."""

    q_kind: torch.Tensor
    q_step: torch.Tensor
    k_kind: torch.Tensor
    k_step: torch.Tensor
    k_valid: Optional[torch.Tensor] = None
    q_seq: Optional[torch.Tensor] = None
    k_seq: Optional[torch.Tensor] = None


class RelPosBias(NamedTuple):
    """T5-style relative position bias, described rather than materialised.

    by_distance: (H, 2 * max_distance + 1) float, the bias of head h for the clamped distance
                 d = clamp(k_pos - q_pos, -max_distance, max_distance), stored at d + max_distance.
    q_pos: (B, Lq) long position ids of the queries; k_pos: (B, Lk) long position ids of the keys.
    Build it with `rel_pos_bias` from the bucket table the model learns; gradients flow back to
    that table through `by_distance`.
    """

    by_distance: torch.Tensor
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    max_distance: int


def t5_bucket(distance, num_buckets=32, max_distance=128):
    """Bidirectional T5 bucket of each relative distance (k_pos - q_pos): exact buckets for small
    distances, logarithmic ones up to max_distance, one bucket for everything beyond."""
    half = num_buckets // 2
    bucket = (distance > 0).long() * half
    n = distance.abs()
    exact = half // 2
    log_ratio = torch.log(n.clamp_min(1).float() / exact) / math.log(max_distance / exact)
    large = exact + (log_ratio * (half - exact)).long()
    large = large.clamp_max(half - 1)
    return bucket + torch.where(n < exact, n, large)


def rel_pos_bias(table, q_pos, k_pos, max_distance=128):
    """Describe a relative position bias from a learnt (H, num_buckets) table.

    The bucket of every distance in [-max_distance, max_distance] is computed once here, on a
    vector of 2 * max_distance + 1 integers, so kernels only clamp a distance and read a table:
    no floating-point logarithm has to agree between two implementations."""
    num_buckets = table.shape[1]
    distances = torch.arange(-max_distance, max_distance + 1, device=table.device)
    buckets = t5_bucket(distances, num_buckets, max_distance)
    # gather, not table[:, buckets]: its backward is deterministic on the CPU, so that a resumed
    # run reproduces an uninterrupted one bit for bit
    by_distance = table.gather(1, buckets[None].expand(table.shape[0], -1))  # (H, 2M+1)
    return RelPosBias(by_distance, q_pos, k_pos, max_distance)


def dense_bias(rel):
    """The (B, H, Lq, Lk) tensor a RelPosBias stands for."""
    m = rel.max_distance
    d = (rel.k_pos[:, None, :] - rel.q_pos[:, :, None]).clamp(-m, m) + m  # (B, Lq, Lk)
    H, (B, Lq, Lk) = rel.by_distance.shape[0], d.shape
    bias = rel.by_distance.gather(1, d.reshape(1, -1).expand(H, -1))  # (H, B*Lq*Lk), see rel_pos_bias
    return bias.view(H, B, Lq, Lk).permute(1, 0, 2, 3)


def visible(q_kind, q_step, k_kind, k_step, k_valid=None, q_seq=None, k_seq=None):
    """(B, Lq, Lk) bool: may query i see key j? The whole rule, written out."""
    qk, qs = q_kind[:, :, None], q_step[:, :, None]
    kk, ks = k_kind[:, None, :], k_step[:, None, :]
    see = kk == CONTEXT
    see = see | ((qk == ORIGINAL) & (kk == ORIGINAL) & (ks <= qs))
    see = see | ((qk == PSEUDO) & (kk == ORIGINAL) & (ks < qs))
    see = see | ((qk == PSEUDO) & (kk == PSEUDO) & (ks == qs))
    if k_valid is not None:
        see = see & k_valid[:, None, :]
    if q_seq is not None:
        see = see & (q_seq[:, :, None] == k_seq[:, None, :])
    return see


def attention(q, k, v, meta, bias=None, scale=None):
    """Reference masked attention; same contract as kernels.attention (see its docstring), meta a
    MaskMeta.

    Computed in float32 (float64 for float64 inputs) and returned in q's dtype. A query that sees
    no key returns 0."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    dt = torch.promote_types(q.dtype, torch.float32)
    see = visible(*meta)[:, None]  # (B, 1, Lq, Lk)
    s = torch.einsum("bhqd,bhkd->bhqk", q.to(dt), k.to(dt)) * scale
    if isinstance(bias, RelPosBias):
        s = s + dense_bias(bias).to(dt)
    elif bias is not None:
        s = s + bias.to(dt)
    # a finite fill instead of -inf keeps rows with no visible key free of NaN (forward and backward);
    # multiplying by `see` then zeroes them, and is exact for rows with at least one visible key
    p = F.softmax(s.masked_fill(~see, -1e30), dim=-1) * see
    return torch.einsum("bhqk,bhkd->bhqd", p, v.to(dt)).to(q.dtype)


# -----------------------------------------------------------------------------
# early exit (ELMER, Li et al. 2022, section 4.2): the active tokens of a layer, and the off-ramp


def active_index(active):
    """(B, T) bool -> (N,) long flat indices (into B*T rows) of the True entries, in row-major
    order. The one place a count must reach the host (N is a shape): call it once per layer."""
    return active.reshape(-1).nonzero().squeeze(1)


def gather_rows(x, index):
    """x: (M, C); index: (N,) long -> (N, C), row i = x[index[i]]. Backward: a scatter-add."""
    return x.index_select(0, index)


def scatter_rows(base, index, rows):
    """base: (M, C); index: (N,) long, distinct; rows: (N, C) -> (M, C), a copy of base with
    row index[i] replaced by rows[i]; rows not named keep base's values (an exited token keeps its
    hidden state). Backward: base gets the gradient with the named rows zeroed, rows a gather."""
    return base.index_copy(0, index, rows)


def offramp(h, weight, bias=None):
    """The statistics an early exit needs from a vocabulary projection, without keeping it.

    h: (N, C) hidden states after the LM head's transform; weight: (V, C) (the tied embedding);
    bias: (V,) or None. Returns (argmax (N,) long, entropy (N,) float32 in nats of
    softmax(h W^T + b), logsumexp (N,) float32). The reference materialises the (N, V) logits; the
    kernel streams the vocabulary with an online max and sum and never writes them."""
    logits = F.linear(h.float(), weight.float(), None if bias is None else bias.float())  # (N, V)
    lse = torch.logsumexp(logits, -1)
    p = torch.softmax(logits, -1)
    entropy = lse - torch.where(p > 0, p * logits, 0.0).sum(-1)  # a -inf bias (a banned token) adds 0
    return logits.argmax(-1), entropy, lse


def offramp_cross_entropy(h, weight, bias, target, ignore_index=-100, stats=False):
    """Mean cross-entropy of softmax(h W^T + b) against target (N,) long over the rows whose
    target is not ignore_index: the off-ramp's training loss. Materialises the (N, V) logits,
    which the kernel never does. stats: also (argmax, entropy, per-row nll) without gradient, as
    offramp gives them (nll 0 where ignored)."""
    logits = F.linear(h.float(), weight.float(), None if bias is None else bias.float())  # (N, V)
    loss = F.cross_entropy(logits, target, ignore_index=ignore_index)
    if not stats:
        return loss
    with torch.no_grad():
        lse = torch.logsumexp(logits, -1)
        p = torch.softmax(logits, -1)
        entropy = lse - torch.where(p > 0, p * logits, 0.0).sum(-1)
        valid = target != ignore_index
        z_t = logits.gather(1, torch.where(valid, target, 0)[:, None])[:, 0]
        nll = torch.where(valid, lse - z_t, 0.0)
    return loss, logits.argmax(-1), entropy, nll
