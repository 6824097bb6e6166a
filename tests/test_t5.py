"""The T5 baseline: span corruption, the encoder-decoder's masks by perturbation, the key/value
cache against re-decoding the whole prefix, and a tiny model learning to copy."""

import os

import numpy as np
import pytest
import torch

from core.config import preset
from core.data import TokenStream
from core.model import EncoderDecoder
from core.t5 import (
    IGNORE,
    T5Decoder,
    corrupted_lengths,
    span_corruption,
    t5_batch,
    t5_loss_sums,
    t5_seq2seq_batch,
    t5_seq2seq_loss_sums,
)


def tiny_model(vocab_size, seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = preset("tiny", vocab_size=vocab_size, n_dec_layers=2, dropout=0.0, **overrides)
    model = EncoderDecoder(cfg).eval()
    with torch.no_grad():  # the tables start at zero; make the bias matter in these tests
        for table in (model.enc_rel_table, model.dec_rel_table):
            if table is not None:
                table.normal_(0, 0.5)
    return model


def random_ids(g, tok, *shape):
    return torch.randint(tok.n_special, tok.vocab_size, shape, generator=g)


def report(name, a, b):
    d = (a - b).abs()
    return f"{name}: max diff {d.max().item():.3g}, mean {d.mean().item():.3g}"


# -----------------------------------------------------------------------------
# span corruption


def reconstruct(src, tgt, tok):
    """Undo span corruption: each sentinel of the source replaced by its span from the target."""
    sentinels = {tok.sentinel(i) for i in range(64)}
    spans, cur = {}, None
    for x in tgt[:-1]:
        if x in sentinels:
            cur = spans.setdefault(x, [])
        else:
            cur.append(x)
    out = []
    for x in src[:-1]:
        out += spans[x] if x in sentinels else [x]
    return out


def test_span_corruption(tokenizer):
    tok = tokenizer
    rng = np.random.default_rng(0)
    sentinels = set(range(tok.sentinel(0), tok.sentinel(63) + 1))
    n_tok = n_noise = 0
    span_lengths = []
    for n in rng.integers(10, 300, 300):
        ids = rng.integers(tok.n_special, tok.vocab_size, n)
        seed = int(rng.integers(1 << 30))
        src, tgt = span_corruption(ids, np.random.default_rng(seed), tok)
        src2, tgt2 = span_corruption(ids, np.random.default_rng(seed), tok)
        assert np.array_equal(src, src2) and np.array_equal(tgt, tgt2)  # exact replay
        assert src[-1] == tok.eos_id and tgt[-1] == tok.eos_id
        s_src = [x for x in src if x in sentinels]
        s_tgt = [x for x in tgt if x in sentinels]
        assert s_src == s_tgt == [tok.sentinel(i) for i in range(len(s_src))]
        assert tgt[0] == tok.sentinel(0)
        assert reconstruct(list(src), list(tgt), tok) == list(ids)
        # spans never touch: two sentinels are never adjacent in the source
        assert not any(a in sentinels and b in sentinels for a, b in zip(src, src[1:]))
        noise = len(tgt) - 1 - len(s_tgt)
        assert noise == round(0.15 * n)
        n_tok, n_noise = n_tok + n, n_noise + noise
        at = list(np.flatnonzero(np.isin(tgt, list(sentinels)))) + [len(tgt) - 1]  # sentinels, [EOS]
        span_lengths += [b - a - 1 for a, b in zip(at, at[1:])]
    assert abs(n_noise / n_tok - 0.15) < 0.005, n_noise / n_tok
    assert abs(np.mean(span_lengths) - 3) < 0.15, np.mean(span_lengths)
    assert min(span_lengths) >= 1


def test_span_corruption_keeps_document_separators(tokenizer):
    """The [EOS] that ends each document of the pretraining stream is never corrupted: no target
    holds it before its end, the source keeps every one in order, and the lengths are those of a
    window without separators (the positions the checkpoint records depend on it)."""
    tok = tokenizer
    sentinels = set(range(tok.sentinel(0), tok.sentinel(63) + 1))
    rng = np.random.default_rng(1)
    straddled = 0
    for n in rng.integers(10, 200, 300):
        ids = rng.integers(tok.n_special, tok.vocab_size, n)
        ids[rng.random(n) < rng.choice([0.02, 0.1, 0.3])] = tok.eos_id
        src, tgt = span_corruption(ids, np.random.default_rng(int(rng.integers(1 << 30))), tok)
        assert (len(src), len(tgt)) == corrupted_lengths(n)
        assert tok.eos_id not in tgt[:-1]
        kept = [x for x in src[:-1] if x not in sentinels]
        assert kept.count(tok.eos_id) == list(ids).count(tok.eos_id)
        it = iter(ids)  # the kept tokens are a subsequence of the window
        assert all(any(x == y for y in it) for x in kept)
        assert sorted(kept + [x for x in tgt[:-1] if x not in sentinels]) == sorted(ids)
        straddled += sum(a in sentinels and b == tok.eos_id for a, b in zip(src, src[1:]))
    assert straddled > 0  # a span that reaches a separator goes on after it


def test_t5_batch(tokenizer):
    tok = tokenizer
    texts = ["the quick brown fox jumps over the lazy dog " * 3, "a library for parsing files"] * 20
    stream = TokenStream(tok.encode(texts), window=40, seed=1)
    b = t5_batch(stream, range(5), tok)
    b2 = t5_batch(stream, range(5), tok)
    assert all(torch.equal(b.tensors[k], b2.tensors[k]) for k in b.tensors)  # exact replay
    assert torch.equal(b.tgt_in[:, 0], torch.full((5,), tok.sos_id))
    assert torch.equal(b.tgt_in[:, 1:][b.tgt_valid[:, 1:]], b.tgt_out[:, :-1][b.tgt_valid[:, 1:]])
    assert (b.tgt_out[~b.tgt_valid] == IGNORE).all() and (b.src[~b.src_valid] == tok.pad_id).all()
    assert b.norm == b.tgt_valid.sum() and b.n_tokens == b.src_valid.sum() + b.tgt_valid.sum()
    assert torch.equal(b.src_valid.sum(1), torch.full((5,), 40 - 6 + 2 + 1))  # 6 corrupted, 2 spans

    # one pretraining step reaches every parameter (DistributedDataParallel requires it)
    model = tiny_model(tok.vocab_size).train()
    sums = t5_loss_sums(model, b)
    assert sums["n"].item() == b.norm and 0 <= sums["hit"].item() <= b.norm
    # the text tokens: the targets that are neither a sentinel nor [EOS] (2 spans + [EOS] of 9)
    gold = b.tgt_out[b.tgt_valid]
    text = gold >= tok.n_special
    assert sums["text_n"].item() == int(text.sum()) == 5 * 6
    with torch.no_grad():
        logits = model(b.src, b.src_valid, b.tgt_in, b.tgt_valid, predict=b.tgt_valid).float()
    want = torch.nn.functional.cross_entropy(logits[text], gold[text], reduction="sum")
    torch.testing.assert_close(sums["text_loss"], want, rtol=1e-4, atol=1e-3)
    sums["loss"].backward()
    assert all(p.grad is not None for p in model.parameters())


# -----------------------------------------------------------------------------
# the masks, by perturbation


def test_decoder_causal_and_encoder_blind_to_target(tokenizer):
    tok = tokenizer
    g = torch.Generator().manual_seed(0)
    model = tiny_model(tok.vocab_size)
    B, S, T = 2, 11, 9
    src, tgt = random_ids(g, tok, B, S), random_ids(g, tok, B, T)
    src_valid, tgt_valid = torch.ones(B, S, dtype=torch.bool), torch.ones(B, T, dtype=torch.bool)
    memories = []
    model.ln_enc.register_forward_hook(lambda m, i, o: memories.append(o))
    with torch.no_grad():
        base = model(src, src_valid, tgt, tgt_valid)  # (B, T, C)
        for t in (0, 3, T - 1):
            changed = tgt.clone()
            changed[:, t] = (changed[:, t] + 1 - tok.n_special) % (tok.vocab_size - tok.n_special) + tok.n_special
            out = model(src, src_valid, changed, tgt_valid)
            assert torch.equal(out[:, :t], base[:, :t]), report(f"positions < {t}", out[:, :t], base[:, :t])
            assert (out[:, t:] - base[:, t:]).abs().amax(-1).min() > 0  # every later position moves
            assert torch.equal(memories[-1], memories[0])  # the encoder never sees the target
        # the decoder does see the source, at every position, through the cross-attention
        changed = src.clone()
        changed[:, S // 2] = tok.sentinel(0)
        out = model(changed, src_valid, tgt, tgt_valid)
        assert (out - base).abs().amax(-1).min() > 0


def test_padding_invisible(tokenizer):
    tok = tokenizer
    g = torch.Generator().manual_seed(1)
    model = tiny_model(tok.vocab_size)
    src, tgt = random_ids(g, tok, 2, 12), random_ids(g, tok, 2, 7)
    src_valid, tgt_valid = torch.ones(2, 12, dtype=torch.bool), torch.ones(2, 7, dtype=torch.bool)
    src_valid[0, 8:] = False  # row 0: 8 source tokens and 5 target tokens, then padding
    tgt_valid[0, 5:] = False
    with torch.no_grad():
        out = model(src, src_valid, tgt, tgt_valid)
        alone = model(src[:1, :8], src_valid[:1, :8], tgt[:1, :5], tgt_valid[:1, :5])
        assert torch.allclose(out[:1, :5], alone, atol=1e-5, rtol=0), report("padded vs alone", out[:1, :5], alone)
        # whatever sits in the padding changes nothing at all
        junk_src, junk_tgt = src.clone(), tgt.clone()
        junk_src[0, 8:], junk_tgt[0, 5:] = random_ids(g, tok, 4), random_ids(g, tok, 2)
        out2 = model(junk_src, src_valid, junk_tgt, tgt_valid)
        assert torch.equal(out2[:, :5], out[:, :5]) and torch.equal(out2[1], out[1])


# -----------------------------------------------------------------------------
# decoding


@pytest.mark.parametrize("rel_pos", [True, False])
def test_kv_cache_matches_full_decoding(tokenizer, rel_pos):
    tok = tokenizer
    g = torch.Generator().manual_seed(2)
    model = tiny_model(tok.vocab_size, rel_pos=rel_pos)
    sources = [random_ids(g, tok, n).tolist() for n in (4, 9, 13)]
    cached, full = T5Decoder(model, sources, tok), T5Decoder(model, sources, tok, use_cache=False)
    assert cached.rows == full.rows == 3
    prev = None
    for t in range(8):
        if t == 3:  # expand and reorder rows, as a beam search does: 3 rows -> 4
            index = torch.tensor([2, 0, 0, 1])
            cached.reorder(index)
            full.reorder(index)
            prev = prev[index]
            assert cached.rows == full.rows == 4
        a, b = cached.step(prev), full.step(prev)
        assert a.shape == (cached.rows, tok.vocab_size) and a.dtype == torch.float32
        assert torch.allclose(a, b, atol=1e-5, rtol=0), report(f"step {t}", a, b)
        prev = random_ids(g, tok, cached.rows)
    # and the cache equals one teacher-forced pass over the tokens fed (row 1 is source 0)
    with torch.no_grad():
        src = torch.tensor([sources[0] + [tok.eos_id]])
        fed = cached.prefix[1:2]
        logits = model(
            src,
            torch.ones_like(src, dtype=torch.bool),
            fed,
            torch.ones_like(fed, dtype=torch.bool),
            predict=torch.ones_like(fed, dtype=torch.bool),
        )
    assert torch.allclose(a[1], logits[-1].log_softmax(-1), atol=1e-5, rtol=0)


@pytest.fixture
def one_thread():
    """Matrices this small gain nothing from threads, and lose a lot on a busy shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_copy_task_loss_falls(tokenizer, one_thread):
    """60 steps of copying 1-3 tokens out of 20: the loss falls, and the model has learnt to read
    the source (a shuffled source makes it worse), which the token frequencies alone cannot give."""
    tok = tokenizer
    model = tiny_model(tok.vocab_size).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)

    def copy_batch(size):
        xs = [rng.integers(100, 120, n).tolist() for n in rng.integers(1, 4, size)]
        return t5_seq2seq_batch([(x, x) for x in xs], tok, max_src=16, max_tgt=16)

    losses = []
    for step in range(60):
        batch = copy_batch(16)
        sums = t5_seq2seq_loss_sums(model, batch)
        if step == 0:
            plain = t5_seq2seq_loss_sums(model, batch, label_smoothing=0.0)
            assert torch.allclose(plain["loss"], sums["nll"]) and not torch.allclose(sums["loss"], sums["nll"])
        (sums["loss"] / sums["n"]).backward()
        opt.step()
        opt.zero_grad()
        losses.append(sums["nll"].item() / sums["n"].item())
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    assert last < 0.5 * first, (first, last)

    model.eval()
    batch = copy_batch(64)
    with torch.no_grad():
        right = t5_seq2seq_loss_sums(model, batch)
        shift = torch.roll(torch.arange(64), 1)
        batch.src, batch.src_valid = batch.src[shift], batch.src_valid[shift]
        shuffled = t5_seq2seq_loss_sums(model, batch)
    right, shuffled = (s["nll"].item() / s["n"].item() for s in (right, shuffled))
    assert right < shuffled - 0.2, (right, shuffled)


def test_resume_across_a_corruption_change_is_said(text_file, tmp_path, capsys):
    """A checkpoint from before document separators were kept out of the spans resumes, and the
    run says that its examples from there on are not the ones an uninterrupted run drew."""
    import train
    from conftest import TINY
    from core import checkpoint

    out = str(tmp_path / "t5")
    flags = ["--data", text_file, "--objective", "t5", "--out", out] + TINY
    train.main(flags + ["--steps", "1"])
    assert "older version" not in capsys.readouterr().out
    path = os.path.join(out, "last.pt")
    state = torch.load(path, weights_only=True)
    del state["data"]["corruption"]  # as written before the field existed
    checkpoint.save(path, state)
    train.main(flags + ["--steps", "2", "--resume"])
    assert "older version of the t5 corruption" in capsys.readouterr().out
