"""generate()'s beam search at fixed shapes (core/static_beam.py, what eval.py runs on CUDA) gives
the tokens and scores of the eager one through every architecture that has it, an encoder after
[SOS] included; `auto` picks it on CUDA alone; the others and greedy decoding stay eager."""

import numpy as np
import pytest
import torch

from core import decodings, generation
from core.unilm.seq2seq import PMLMDecoder
from core.t5 import T5Decoder

from test_seq2seq import ids, tiny
from test_t5 import tiny_model


def models(tok):
    t5 = tiny_model(tok.vocab_size)
    with torch.no_grad():
        t5.emb.tok.weight.mul_(4.0)  # outputs that depend on the source
    sos = tiny_model(tok.vocab_size, seed=1, enc_sos=True)
    return {"unilm": tiny(tok, std=0.3), "t5": t5, "roberta-s2s": sos}


@pytest.mark.parametrize("arch", ["unilm", "t5", "roberta-s2s"])
@pytest.mark.parametrize("beam,ngram", [(4, 3), (2, 0)])
def test_static_search_equals_the_eager_one(tokenizer, arch, beam, ngram):
    tok = tokenizer
    model = models(tok)[arch]
    sources = [ids(np.random.default_rng(3), n) for n in (4, 12, 7)]
    run = lambda search: generation.generate(
        model,
        arch,
        sources,
        tok,
        beam=beam,
        max_len=10,  # noqa: E731
        no_repeat_ngram=ngram,
        return_scores=True,
        search=search,
    )
    (want, want_scores), (got, got_scores) = run("eager"), run("static")
    assert got == want
    assert torch.allclose(got_scores, want_scores, atol=1e-5), (got_scores, want_scores)


def test_which_search_runs(tokenizer):
    model = models(tokenizer)["t5"]
    pick = decodings.static_search
    assert pick(model, T5Decoder, 5, "static") is decodings.static_beam_t5
    assert pick(model, PMLMDecoder, 5, "static") is decodings.static_beam_pmlm
    assert pick(model, T5Decoder, 5, "auto") is (decodings.static_beam_t5 if next(model.parameters()).is_cuda else None)
    assert pick(model, T5Decoder, 5, "eager") is None
    assert pick(model, T5Decoder, 1, "static") is None  # greedy decoding has its own loop
    assert pick(model, T5Decoder, 5, "static", use_cache=False) is None  # the uncached reference
    assert pick(model, object, 5, "static") is None  # a step decoder without a fixed-shape search
    with pytest.raises(ValueError, match="search must be one of"):
        pick(model, T5Decoder, 5, "fast")
