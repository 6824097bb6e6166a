"""T5's beam search at fixed shapes (core/static_beam.py; UniLMv2's, core/unilm/static_beam.py,
below) against core/decoding.beam_search over its step decoder: the same tokens and scores on the
CPU, where its steps run eagerly, for every setting the search has (beam sizes, min_len, length
penalties of both kinds, the n-gram ban, a max_len that cuts hypotheses), with sources of different
lengths in one batch; and the n-gram ban alone."""

import pytest
import torch

from core import decoding
from core.static_beam import ban_repeated_ngrams_static, static_beam_t5
from core.t5 import T5Decoder

from test_t5 import random_ids, tiny_model


def search_model(tok, eos):
    """The token embedding scaled up (outputs that depend on the source) and [EOS]'s output bias
    raised by `eos`: hypotheses of different lengths, some ending early, some cut at max_len."""
    model = tiny_model(tok.vocab_size)
    with torch.no_grad():
        model.emb.tok.weight.mul_(4.0)
        model.head.bias.zero_()
        model.head.bias[tok.eos_id] += eos
    return model


@pytest.mark.parametrize(
    "beam,max_len,min_len,lp,norm,ngram,eos",
    [
        (4, 12, 1, 0.6, "wu", 3, 0.6),
        (4, 12, 1, 0.6, "wu", 3, 0.9),
        (4, 12, 1, 0.6, "wu", 3, 0.0),
        (2, 8, 3, 1.0, "pow", 0, 0.6),
        (5, 9, 0, 0.0, "wu", 2, 0.75),
        (3, 10, 1, 0.6, "wu", 0, 0.9),
        (1, 10, 1, 0.6, "wu", 0, 0.6),
    ],
)
def test_static_beam_search_equals_beam_search(tokenizer, beam, max_len, min_len, lp, norm, ngram, eos):
    tok = tokenizer
    g = torch.Generator().manual_seed(5)
    model = search_model(tok, eos)
    sources = [random_ids(g, tok, n).tolist() for n in (3, 11, 7)]
    want, want_scores = decoding.beam_search(
        T5Decoder(model, sources, tok), beam, max_len, min_len, lp, tok.eos_id, ngram, norm
    )
    got, got_scores = static_beam_t5(model, sources, tok, beam, max_len, min_len, lp, norm, ngram)
    assert got == want
    assert torch.allclose(got_scores, want_scores, atol=1e-5), (got_scores, want_scores)
    again, _ = static_beam_t5(model, sources, tok, beam, max_len, min_len, lp, norm, ngram)  # the kept object
    assert again == want


def test_the_static_ngram_ban_equals_the_growing_one():
    g = torch.Generator().manual_seed(0)
    hyps = torch.randint(0, 4, (6, 12), generator=g)  # few tokens: many repeated n-grams
    logp = torch.randn(6, 9, generator=g)
    for n in (2, 3):
        for t in range(0, 13):
            want = decoding.ban_repeated_ngrams(logp, hyps[:, :t], n)
            got = ban_repeated_ngrams_static(logp, hyps, torch.tensor(t), n)
            assert torch.equal(got, want), (n, t)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_graphed_static_beam_search_equals_beam_search_on_cuda(tokenizer):
    """The start and the step captured once and replayed, twice over (the second run reads fresh
    buffers): beam_search's tokens, on CUDA."""
    tok = tokenizer
    g = torch.Generator().manual_seed(5)
    model = search_model(tok, 0.6).cuda()
    sources = [random_ids(g, tok, n).tolist() for n in (3, 11, 7)]
    want, _ = decoding.beam_search(T5Decoder(model, sources, tok), 4, 12, 1, 0.6, tok.eos_id, 3, "wu")
    for _ in range(2):
        got, _ = static_beam_t5(model, sources, tok, 4, 12, 1, 0.6, "wu", 3, graphs=True)
        assert got == want


@pytest.mark.parametrize(
    "beam,max_len,min_len,lp,ngram,eos", [(4, 10, 1, 0.6, 3, 0.0), (3, 8, 2, 1.0, 0, 3.0), (4, 10, 1, 0.6, 3, 4.0)]
)
def test_static_pmlm_beam_search_equals_beam_search(tokenizer, beam, max_len, min_len, lp, ngram, eos):
    """UniLMv2's decoder ([P] queries against a static cache of source, target and [P] slots)."""
    from core.unilm.seq2seq import PMLMDecoder
    from core.unilm.static_beam import static_beam_pmlm
    from test_seq2seq import ids, tiny
    import numpy as np

    tok = tokenizer
    model = tiny(tok, std=0.3)
    with torch.no_grad():
        model.head.bias[tok.eos_id] += eos
    rng = np.random.default_rng(3)
    sources = [ids(rng, n) for n in (4, 12, 7)]
    want, want_scores = decoding.beam_search(
        PMLMDecoder(model, sources, tok), beam, max_len, min_len, lp, tok.eos_id, ngram, "wu"
    )
    got, got_scores = static_beam_pmlm(model, sources, tok, beam, max_len, min_len, lp, "wu", ngram)
    assert got == want
    assert torch.allclose(got_scores, want_scores, atol=1e-5), (got_scores, want_scores)
    print([len(o) for o in want])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_graphed_static_pmlm_beam_search_equals_beam_search_on_cuda(tokenizer):
    from core.unilm.seq2seq import PMLMDecoder
    from core.unilm.static_beam import static_beam_pmlm
    from test_seq2seq import ids, tiny
    import numpy as np

    tok = tokenizer
    model = tiny(tok, std=0.3).cuda()
    sources = [ids(np.random.default_rng(3), n) for n in (4, 12, 7)]
    want, _ = decoding.beam_search(PMLMDecoder(model, sources, tok), 4, 10, 1, 0.6, tok.eos_id, 3, "wu")
    for _ in range(2):
        got, _ = static_beam_pmlm(model, sources, tok, 4, 10, 1, 0.6, "wu", 3, graphs=True)
        assert got == want
