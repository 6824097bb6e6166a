"""PyTorch's own attention under the contract of kernels.attention: the obvious alternatives to our
kernel, which a training step is measured against, and which a user picks where they are faster
(train.py --attention).

  sdpa         F.scaled_dot_product_attention with a dense additive (B, H, Lq, Lk) mask: the
               rule's -inf and the relative bias, built once per forward by gathers on the device
               and shared by every layer through `cache`, as a model built on SDPA would build
               it once per step; the bias table's gradient comes back through autograd.
  sdpa-nomask  the same call with no mask at all: every pair visible. Wrong for every layout
               here; the dense upper bound a benchmark compares with, never a training choice.
  flex         FlexAttention (compiled on CUDA) with a block mask built once per forward from
               int32 metadata, and a score_mod adding the bias from the (H, 2M+1) table that
               kernels.rel_pos_bias makes (its gradient through the captured table).

A query that sees no key gets 0, as from the reference.
"""

import torch
import torch.nn.functional as F

from .reference import CONTEXT, ORIGINAL, PSEUDO, RelPosBias, visible

BASELINES = ("sdpa", "sdpa-nomask", "flex")


def _entry(cache, key, make):
    """cache[key], made by make() the first time (no cache: made every call)."""
    if cache is None:
        return make()
    if key not in cache:
        cache[key] = make()
    return cache[key]


# -----------------------------------------------------------------------------
# SDPA with a dense mask


def gather_bias(by_distance, d, lookup):
    """(B, H, Lq, Lk) bias from the (H, 2M+1) table at the (B, Lq, Lk) distance indices d.
    "embedding": a lookup, as T5-style models gather their bias: its CUDA backward sums each
    distance's entries in parallel chunks, where advanced indexing's gives each of the 2M+1
    distances one warp (docs/kernels.md has the timings). "index": advanced indexing, whose
    backward is the faster of the two on a CPU. The same values and gradients either way."""
    if lookup == "embedding":
        return F.embedding(d, by_distance.t()).permute(0, 3, 1, 2)
    return by_distance[:, d].permute(1, 0, 2, 3)


# SDPA's memory-efficient kernel reads a mask whose rows start at multiples of 8 elements; another
# mask it copies into a padded one at every call (PyTorch's preprocess_mask / pad_bias)
MASK_ALIGN = 8


def dense_mask(meta, bias, dtype):
    """(additive (B, H or 1, Lq, Lk) mask in `dtype`, (B, 1, Lq, 1) bool of the queries that see no
    key) of a MaskMeta. The bias is gathered from the RelPosBias's (H, 2M+1) row per distance; a dense bias
    tensor is added as it is. The mask is built over Lk rounded up to MASK_ALIGN keys (the extra keys
    invalid) and returned as a view of its first Lk columns: its rows aligned as SDPA's kernel reads
    them, so that no layer's call copies it."""
    Lk = meta.k_kind.shape[1]
    pad = -Lk % MASK_ALIGN
    if pad:  # the padding keys: invalid, so never seen
        wide = lambda t, fill=0: None if t is None else F.pad(t, (0, pad), value=fill)  # noqa: E731
        valid = torch.ones_like(meta.k_kind, dtype=torch.bool) if meta.k_valid is None else meta.k_valid
        meta = meta._replace(
            k_kind=wide(meta.k_kind), k_step=wide(meta.k_step), k_seq=wide(meta.k_seq), k_valid=wide(valid, False)
        )
    see = visible(*meta)[:, None]  # (B, 1, Lq, Lk + pad)
    blind = ~see.any(-1, keepdim=True)
    see = see | blind  # a row that sees nothing attends everywhere, and its output is zeroed
    if isinstance(bias, RelPosBias):
        m, k_pos = bias.max_distance, F.pad(bias.k_pos, (0, pad)) if pad else bias.k_pos
        d = (k_pos[:, None, :] - bias.q_pos[:, :, None]).clamp(-m, m) + m  # (B, Lq, Lk + pad)
        add = gather_bias(bias.by_distance, d, "embedding" if d.is_cuda else "index")
    elif bias is not None:
        add = F.pad(bias.expand(*bias.shape[:-1], Lk), (0, pad)) if pad else bias
    else:
        add = torch.zeros(see.shape, device=see.device)
    return add.masked_fill(~see, float("-inf")).to(dtype)[..., :Lk], blind


def _sdpa_key(bias, dtype):
    """One mask per forward: the metadata cache's entry for this bias (every layer passes the same one)."""
    return ("sdpa", id(bias.by_distance if isinstance(bias, RelPosBias) else bias), dtype)


def _sdpa_entry(meta, bias, dtype, leaf=None):
    """The cache entry: (the bias it was built for, the mask, possibly through `leaf`, the blind rows)."""
    mask, blind = dense_mask(meta, bias, dtype)
    return bias, mask if leaf is None else leaf(mask), blind


def sdpa(q, k, v, meta, bias=None, scale=None, cache=None, masked=True):
    if not masked:
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    held, mask, blind = _entry(cache, _sdpa_key(bias, q.dtype), lambda: _sdpa_entry(meta, bias, q.dtype))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.masked_fill(blind, 0.0)


# -----------------------------------------------------------------------------
# FlexAttention

_compiled = []


def _flex_fn(device):
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":  # the CPU runs its unfused reference (tests)
        return flex_attention
    if not _compiled:
        _compiled.append(torch.compile(flex_attention, dynamic=False))
    return _compiled[0]


def block_mask(meta):
    """The rule of a MaskMeta as a FlexAttention block mask over int32 metadata, built once per forward."""
    from torch.nn.attention.flex_attention import create_block_mask

    i32 = lambda t: None if t is None else t.to(torch.int32).contiguous()
    qk, qs, kk, ks, qq, kq = map(i32, (meta.q_kind, meta.q_step, meta.k_kind, meta.k_step, meta.q_seq, meta.k_seq))
    kv = None if meta.k_valid is None else meta.k_valid.contiguous()

    def mask_mod(b, h, qi, ki):
        a, s, c, t = qk[b, qi], qs[b, qi], kk[b, ki], ks[b, ki]
        see = (c == CONTEXT) | ((a == ORIGINAL) & (c == ORIGINAL) & (t <= s))
        see = see | ((a == PSEUDO) & (((c == ORIGINAL) & (t < s)) | ((c == PSEUDO) & (t == s))))
        if kv is not None:
            see = see & kv[b, ki]
        if qq is not None:
            see = see & (qq[b, qi] == kq[b, ki])
        return see

    (B, Lq), Lk = meta.q_kind.shape, meta.k_kind.shape[1]
    device = meta.q_kind.device
    return create_block_mask(mask_mod, B, None, Lq, Lk, device=device, _compile=device.type == "cuda")


def flex(q, k, v, meta, bias=None, scale=None, cache=None):
    bm = _entry(cache, "flex-block-mask", lambda: block_mask(meta))
    out = _flex_fn(q.device)(q, k, v, score_mod=score_mod_of(bias, q.shape, k.shape[2]), block_mask=bm, scale=scale)
    return out.to(q.dtype)


def score_mod_of(bias, q_shape, Lk):
    """FlexAttention's score_mod adding `bias`: a RelPosBias read from its (H, 2M+1) table by the
    clamped distance of int32 position ids, a dense tensor by index; None for no bias."""
    if isinstance(bias, RelPosBias):
        table, qp, kp, m = bias.by_distance, bias.q_pos.to(torch.int32), bias.k_pos.to(torch.int32), bias.max_distance
        return lambda score, b, h, qi, ki: score + table[h, (kp[b, ki] - qp[b, qi]).clamp(-m, m) + m]
    if bias is not None:
        dense = bias.expand(*q_shape[:3], Lk)
        return lambda score, b, h, qi, ki: score + dense[b, h, qi, ki]
    return None


def prepare(name, meta, bias, dtype, cache, leaf=None):
    """Build into `cache` what NAME's layers read for one forward of a MaskMeta (SDPA's dense mask,
    Flex's block mask), as its first layer would. leaf: a function the dense mask goes through (a
    benchmark's stand-in whose gradient the layers sum)."""
    if name == "sdpa":
        cache[_sdpa_key(bias, dtype)] = _sdpa_entry(meta, bias, dtype, leaf)
    elif name == "flex":
        cache["flex-block-mask"] = block_mask(meta)
    return cache


def attention(name, *args, **kwargs):
    """One of BASELINES under kernels.attention's contract."""
    if name == "flex":
        return flex(*args, **kwargs)
    return sdpa(*args, **kwargs, masked=name == "sdpa")
