"""Blockwise masking (UniLMv2 Algorithm 1) and the PMLM input layout."""

import numpy as np

from core.masking import blockwise_mask, corrupt
from core.unilm.pmlm import IGNORE, pmlm_example, pretraining_sentence_pair
from kernels import CONTEXT, ORIGINAL, PSEUDO


def test_blockwise_statistics():
    rng = np.random.default_rng(0)
    n_long = n_blocks = 0
    ratios = []
    for _ in range(400):
        n = int(rng.integers(20, 300))
        maskable = rng.random(n) > 0.05
        blocks = blockwise_mask(maskable, rng)
        taken = np.concatenate(blocks)
        assert len(taken) == len(set(taken.tolist())), "blocks overlap"
        assert maskable[taken].all(), "a special token was masked"
        for b in blocks:
            assert 1 <= len(b) <= 6 and (np.diff(b) == 1).all(), "a block is not a contiguous span"
        ratios.append(len(taken) / maskable.sum())
        n_blocks += len(blocks)
        n_long += sum(len(b) >= 2 for b in blocks)
    assert min(ratios) >= 0.15
    assert np.mean(ratios) < 0.20, "overshoots far beyond 15%"
    # accepted long blocks are a little rarer than 40%: they are more often rejected for overlap
    assert 0.33 < n_long / n_blocks < 0.42, n_long / n_blocks


def test_corrupt_80_10_10():
    rng = np.random.default_rng(1)
    ids = rng.integers(100, 1000, 200_000)
    pos = np.arange(len(ids))
    out = corrupt(ids, pos, rng, mask_id=4, vocab_lo=100, vocab_hi=1000)
    masked = (out == 4).mean()
    kept = (out == ids).mean()
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1 - 0.0011) < 0.01


def test_pmlm_layout(tokenizer):
    rng = np.random.default_rng(3)
    window = np.arange(200, 260)
    ids, seg, special = pretraining_sentence_pair(window, rng, tokenizer.sos_id, tokenizer.eos_id)
    assert ids[0] == tokenizer.sos_id and ids[-1] == tokenizer.eos_id and special.sum() == 3
    ex = pmlm_example(ids, seg, special, rng, tokenizer)
    n = len(ids)
    ctx = ex["kind"] == CONTEXT
    assert ctx[:n].all() and not ctx[n:].any()
    orig, pseudo = ex["kind"] == ORIGINAL, ex["kind"] == PSEUDO
    assert orig.sum() == pseudo.sum() == (ex["target"][:n] != IGNORE).sum()
    # every appended token sits at its masked token's position, with its segment
    assert (ex["tokens"][orig] == ids[ex["pos"][orig]]).all()
    assert (ex["seg"][n:] == seg[ex["pos"][n:]]).all()
    assert (ex["tokens"][pseudo] == tokenizer.pseudo_id).all()
    assert (ex["target"][pseudo] == ids[ex["pos"][pseudo]]).all()
    assert (ex["target"][orig] == IGNORE).all()
    # steps count the factorization order from 1, and the [P]s of a step mirror its originals
    assert sorted(set(ex["step"][n:].tolist())) == list(range(1, ex["step"].max() + 1))
    assert (np.sort(ex["pos"][orig]) == np.sort(ex["pos"][pseudo])).all()


def test_ablations_layout(tokenizer):
    rng = lambda: np.random.default_rng(5)
    ids, seg, special = pretraining_sentence_pair(np.arange(300, 350), rng(), tokenizer.sos_id, tokenizer.eos_id)
    ae = pmlm_example(ids, seg, special, rng(), tokenizer, losses="ae")
    par = pmlm_example(ids, seg, special, rng(), tokenizer, losses="par")
    assert len(ae["tokens"]) == len(ids) and (ae["kind"] == CONTEXT).all()
    assert (par["target"][: len(ids)] == IGNORE).all() and (par["target"] != IGNORE).sum() > 0
