"""The key/value cache of incremental decoding (core/kv_cache.py): its bookkeeping, and that every
decoder that keeps one (T5's, UniLMv2's, MLAE's UniLM-style) gives at every step the logits of a
full forward over everything fed so far, across the reorders of a beam search; the fixed-slot cache
of core/static_beam.py gives the logits of the growing one."""

import pytest
import torch

import kernels
from core.config import preset
from core.kv_cache import KVCache
from core.mlae.model import MLAEUniLM, MLAEUniLMDecoder
from core.model import EncoderDecoder, Meta, UnifiedLM
from core.unilm.seq2seq import PMLMDecoder
from core.t5 import T5Decoder, encoder_input
from core.tokenizer import EOS, MASK, PAD, PSEUDO, SOS

V = 120


class Tok:
    pad_id, sos_id, eos_id, mask_id, pseudo_id, n_special = PAD, SOS, EOS, MASK, PSEUDO, 6


def report(name, a, b):
    d = (a - b).abs()
    return f"{name}: max diff {d.max().item():.3g}, mean {d.mean().item():.3g}"


def model_of(kind, seed=0):
    torch.manual_seed(seed)
    cfg = preset("tiny", vocab_size=V, n_dec_layers=2, dropout=0.0)
    model = dict(t5=EncoderDecoder, pmlm=UnifiedLM, mlae=MLAEUniLM)[kind](cfg).eval()
    with torch.no_grad():  # the relative tables start at zero: make the bias matter
        for name, p in model.named_parameters():
            if "rel_table" in name:
                p.normal_(0, 0.5)
    return model


DECODERS = dict(t5=T5Decoder, pmlm=PMLMDecoder, mlae=MLAEUniLMDecoder)
SOURCES = [[7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 17, 18, 19], [20]]


def test_keys_append_and_reorder():
    """keys: the cache's keys then the step's own; append keeps them; reorder moves every row's
    keys, metadata and memory together."""
    N, H, D = 3, 2, 4
    kv = lambda L, base: [
        (
            torch.full((N, H, L, D), base) + torch.arange(N)[:, None, None, None],  # noqa: E731
            torch.full((N, H, L, D), -base) - torch.arange(N)[:, None, None, None],
        )
    ]
    kind = torch.zeros(N, 2, dtype=torch.long)
    valid = torch.tensor([[True, True], [True, False], [True, True]])
    cross = kv(5, 100.0)
    cache = KVCache(
        kv(2, 0.0),
        Meta(kind, kind, valid),
        torch.arange(2).expand(N, 2),
        cross,
        Meta(kind[:, :1], kind[:, :1], valid[:, :1]),
    )
    assert (cache.rows, cache.length, cache.past(0)[0].shape) == (3, 2, (N, H, 2, D))
    q = torch.full((N, 1), kernels.ORIGINAL)
    meta, pos = cache.keys(q, q + 4, q + 1)
    assert meta.kind[:, -1].tolist() == [kernels.ORIGINAL] * N and meta.step[:, -1].tolist() == [5] * N
    assert meta.valid.tolist() == [[True, True, True], [True, False, True], [True, True, True]]
    assert pos.tolist() == [[0, 1, 2]] * N and cache.length == 2  # keys changes nothing
    cache.append(kv(1, 10.0), q, q + 4, q + 1)
    assert cache.length == 3 and cache.kv[0][0][:, 0, :, 0].tolist() == [[0, 0, 10], [1, 1, 11], [2, 2, 12]]
    index = torch.tensor([2, 1, 1, 0])
    cache.reorder(index)
    assert cache.rows == 4 and cache.kv[0][0][:, 0, -1, 0].tolist() == [12, 11, 11, 10]
    assert cache.cross[0][1][:, 0, 0, 0].tolist() == [-102, -101, -101, -100]
    assert cache.meta.valid[:, 1].tolist() == [True, False, False, True] and cache.pos.shape == (4, 3)
    empty = KVCache.empty(2, "cpu")
    assert empty.length == 0 and empty.past(0) is None and empty.meta.valid is None
    empty.append(kv(1, 0.0), q[:2], q[:2], q[:2])
    assert empty.length == 1 and empty.meta.valid is None  # keys that are all valid stay without a mask


@pytest.mark.parametrize("kind", DECODERS)
def test_cached_step_is_the_full_forward(kind):
    """At every step, through a beam search's expansion and reorders, the cached decoder's
    log-probabilities equal those of the decoder that recomputes everything, and the cache holds
    one key per token that later tokens may see (UniLMv2's [P] never joins it)."""
    model = model_of(kind)
    g = torch.Generator().manual_seed(3)
    cached, full = DECODERS[kind](model, SOURCES, Tok), DECODERS[kind](model, SOURCES, Tok, use_cache=False)
    start = cached.cache.length
    prev = None
    for t in range(7):
        if t in (2, 5):  # expand 3 rows to 4, then reorder them as beams do
            index = torch.tensor([2, 0, 0, 1]) if t == 2 else torch.tensor([3, 3, 1, 0])
            cached.reorder(index)
            full.reorder(index)
            prev = prev[index]
        a, b = cached.step(prev), full.step(prev)
        assert a.shape == (cached.rows, V) and cached.cache.rows == cached.rows
        assert torch.allclose(a, b, atol=1e-5, rtol=0), report(f"{kind} step {t}", a, b)
        # T5 and MLAE keep the token fed at each step; UniLMv2 the target token before the [P]
        assert cached.cache.length == start + (t if kind == "pmlm" else t + 1)
        prev = torch.randint(Tok.n_special, V, (cached.rows,), generator=g)


def test_fixed_slots_give_the_growing_caches_logits():
    """EncoderDecoder.decode_step_into, the keys written at their slot of a cache of M slots
    (core/static_beam.py), gives decode_step's logits at every step."""
    model, M = model_of("t5"), 6
    src, valid = encoder_input(model, SOURCES, Tok)
    N = src.shape[0]
    with torch.no_grad():
        memory = model.encode(src, torch.arange(src.shape[1]).expand_as(src), valid)
        growing = KVCache.empty(N, "cpu", model.cross_kv(memory), model.memory_meta(valid))
        H, D = model.cfg.n_heads, model.cfg.head_dim
        slots = torch.arange(M).expand(N, M)
        at = torch.zeros(1, dtype=torch.long)
        fixed = KVCache(
            [(torch.zeros(N, H, M, D), torch.zeros(N, H, M, D)) for _ in model.dec_layers],
            Meta(torch.full((N, M), kernels.ORIGINAL), slots),
            slots,
            model.cross_kv(memory),
            model.memory_meta(valid),
            at,
        )
        tokens = torch.full((N,), Tok.sos_id)
        g = torch.Generator().manual_seed(4)
        for t in range(M):
            pos = torch.full((N, 1), t)
            a = model.decode_step(tokens, growing)
            b = model.decode_step_into(tokens, pos, Meta(torch.full((N, 1), kernels.ORIGINAL), pos), fixed)
            assert torch.allclose(a, b, atol=1e-5, rtol=0), report(f"step {t}", a, b)
            assert torch.equal(fixed.kv[0][0][:, :, : t + 1], growing.kv[0][0])
            at += 1
            tokens = torch.randint(Tok.n_special, V, (N,), generator=g)
