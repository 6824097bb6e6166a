"""UniLMv2 seq2seq fine-tuning (core/unilm/seq2seq.py): the layout, the attention rule by perturbation
through a tiny model, key/value-cache decoding against full recomputation, and a loss that falls."""

import numpy as np
import pytest
import torch

from core.config import preset
from core.model import UnifiedLM
from core.unilm.pmlm import IGNORE
from core.generation import generate
from core.unilm.seq2seq import PMLMDecoder, seq2seq_batch, seq2seq_example, seq2seq_loss_sums
from kernels import CONTEXT, ORIGINAL, PSEUDO


def tiny(tok, seed=0, std=None, dtype=torch.float32):
    torch.manual_seed(seed)
    m = UnifiedLM(preset("tiny", vocab_size=tok.vocab_size, dropout=0.0))
    if std is not None:  # sharper random distributions: no near-ties for the search to break
        for mod in m.modules():
            if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(mod.weight, std=std)
    return m.to(dtype).eval()


def ids(rng, n):
    return rng.integers(100, 600, n).tolist()


# -----------------------------------------------------------------------------
# layout


def test_layout(tokenizer):
    tok = tokenizer
    ex = seq2seq_example([10, 11, 12], [20, 21], tok, max_src=8, max_tgt=8)
    S, T = 5, 3
    assert ex["tokens"].tolist() == [tok.sos_id, 10, 11, 12, tok.eos_id, 20, 21, tok.eos_id] + [tok.pseudo_id] * T
    assert ex["kind"].tolist() == [CONTEXT] * S + [ORIGINAL] * T + [PSEUDO] * T
    assert ex["step"].tolist() == [0] * S + [1, 2, 3] * 2
    assert ex["pos"].tolist() == list(range(S)) + [5, 6, 7] * 2
    assert ex["seg"].tolist() == [0] * S + [1] * (2 * T)
    assert ex["target"].tolist() == [IGNORE] * (S + T) + [20, 21, tok.eos_id]
    for k in ex:
        assert ex[k].dtype == np.int64

    # truncation: at most max_src source ids, at most max_tgt target tokens counting the [EOS]
    ex = seq2seq_example(list(range(100, 120)), list(range(200, 220)), tok, max_src=6, max_tgt=4)
    assert len(ex["tokens"]) == (6 + 2) + 2 * 4
    assert ex["target"][ex["target"] != IGNORE].tolist() == [200, 201, 202, tok.eos_id]


def test_batch(tokenizer):
    tok = tokenizer
    docs = ["A library for parsing command line options.", "Fast game of falling blocks, with sound."]
    sums = ["option parser", "block game"]
    pairs = list(zip(tok.encode(docs), tok.encode(sums)))
    b = seq2seq_batch(pairs, tok, max_src=64, max_tgt=16)
    T = [len(s) + 1 for _, s in pairs]
    lengths = [len(d) + 2 + 2 * t for (d, _), t in zip(pairs, T)]
    assert b.norm == sum(T) == (b.target != IGNORE).sum()
    assert b.n_tokens == sum(lengths) == b.valid.sum()
    assert (b.kind[b.target != IGNORE] == PSEUDO).all()
    assert (b.tokens[~b.valid] == tok.pad_id).all() and (b.target[~b.valid] == IGNORE).all()


# -----------------------------------------------------------------------------
# the rule, by perturbation through the model


def forward(model, ex):
    t = {k: torch.from_numpy(v)[None] for k, v in ex.items() if k != "target"}
    with torch.no_grad():
        return model(t["tokens"], t["pos"], t["seg"], t["kind"], t["step"])[0]  # (L, C)


def test_pseudo_masks_see_only_the_past(tokenizer):
    """[P]_t (the t-th [P], which predicts y_t) sees the source and y_1..y_{t-1}, never y_t or
    later; the source sees nothing of the target. Indices are taken from the layout as specified,
    not from the example's own metadata, so that a wrong kind or step cannot hide itself."""
    model = tiny(tokenizer)
    rng = np.random.default_rng(0)
    ex = seq2seq_example(ids(rng, 9), ids(rng, 6), tokenizer, 32, 32)
    S, T = 11, 7
    y_at, p_at = S + np.arange(T), S + T + np.arange(T)  # y_t is at y_at[t-1], [P]_t at p_at[t-1]
    base = forward(model, ex)
    for i in range(1, T + 1):
        changed = dict(ex, tokens=ex["tokens"].copy())  # change y_i, y_{i+1}, ..., y_T
        changed["tokens"][y_at[i - 1 :]] = 100 + (changed["tokens"][y_at[i - 1 :]] - 99) % 500
        diff = (forward(model, changed) - base).abs().amax(-1)
        assert diff[:S].max() == 0, f"the source saw y_{i}"
        assert diff[p_at[:i]].max() == 0, f"one of [P]_1..[P]_{i} saw y_{i} or later"
        if i < T:
            assert diff[p_at[i:]].min() > 0, f"a [P] after step {i} does not see y_{i}"
    # every [P] sees the source
    changed = dict(ex, tokens=ex["tokens"].copy())
    changed["tokens"][3] += 1
    diff = (forward(model, changed) - base).abs().amax(-1)
    assert diff[p_at].min() > 0 and diff[:S].min() > 0


def test_sources_of_different_length_pad_cleanly(tokenizer):
    """A batch's padding changes nothing at the [P]s (the loss of a row is its loss alone)."""
    model = tiny(tokenizer, std=0.1)
    rng = np.random.default_rng(1)
    pairs = [(ids(rng, 3), ids(rng, 2)), (ids(rng, 12), ids(rng, 7))]
    both = seq2seq_batch(pairs, tokenizer, 32, 32)
    with torch.no_grad():
        s = seq2seq_loss_sums(model, both, label_smoothing=0.0)
        alone = [seq2seq_loss_sums(model, seq2seq_batch([p], tokenizer, 32, 32), 0.0) for p in pairs]
    assert s["nll"].item() == pytest.approx(sum(a["nll"].item() for a in alone), rel=1e-5)
    assert s["n"].item() == sum(a["n"].item() for a in alone) == 3 + 8


# -----------------------------------------------------------------------------
# decoding with the key/value cache = recomputing everything


def test_decoder_step_matches_full_forward(tokenizer):
    """Step by step, the cached decoder's log-probabilities equal those of the full recomputation,
    and the [P] of a training example gives the same distribution (same rule, same positions)."""
    model = tiny(tokenizer, std=0.1)
    rng = np.random.default_rng(2)
    srcs = [ids(rng, 4), ids(rng, 9), ids(rng, 1)]
    tgt = ids(rng, 5)
    fast, slow = PMLMDecoder(model, srcs, tokenizer), PMLMDecoder(model, srcs, tokenizer, use_cache=False)
    prev, got = None, []
    for t in range(6):
        a, b = fast.step(prev), slow.step(prev)
        assert (a - b).abs().max() < 1e-5, (t, (a - b).abs().max())
        got.append(a[1])
        prev = torch.tensor([tgt[t % 5]] * 3)
    # teacher forcing on source 1 through the training layout
    ex = seq2seq_example(srcs[1], tgt, tokenizer, 32, 32)
    t = {k: torch.from_numpy(v)[None] for k, v in ex.items()}
    with torch.no_grad():
        logits = model(t["tokens"], t["pos"], t["seg"], t["kind"], t["step"], predict=t["target"] != IGNORE)
    want = torch.log_softmax(logits, -1)  # (6, V): [P]_1 .. [P]_6
    assert torch.allclose(torch.stack(got), want, atol=1e-5)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-9), (torch.float32, 1e-5)])
@pytest.mark.parametrize("beam, no_repeat", [(1, 0), (3, 0), (3, 2)])
def test_cache_equals_recompute(tokenizer, dtype, tol, beam, no_repeat):
    """Greedy and beam search on 3 sources of different lengths give the same tokens and scores
    with the cache as with full recomputation. EOS is made likely enough that the hypotheses end
    at different steps, so finished rows are dropped from the cache along the way."""
    model = tiny(tokenizer, std=0.1, dtype=dtype)
    with torch.no_grad():
        model.head.bias[tokenizer.eos_id] += 1.0
    rng = np.random.default_rng(3)
    srcs = [ids(rng, 5), ids(rng, 11), ids(rng, 2)]
    kw = dict(beam=beam, max_len=10, min_len=2, length_penalty=1.0, no_repeat_ngram=no_repeat, return_scores=True)
    out, score = generate(model, "unilm", srcs, tokenizer, **kw)
    ref, ref_score = generate(model, "unilm", srcs, tokenizer, use_cache=False, **kw)
    assert out == ref
    assert (score - ref_score).abs().max() < tol, (score - ref_score).abs().max()
    assert all(2 <= len(o) <= 10 for o in out) and len({len(o) for o in out}) > 1, out


def test_generate_restores_training_mode(tokenizer):
    model = tiny(tokenizer).train()
    generate(model, "unilm", [[100, 101]], tokenizer, max_len=2)
    assert model.training


# -----------------------------------------------------------------------------
# training


def test_loss_falls_and_smoothing(tokenizer):
    model = tiny(tokenizer, seed=1).train()
    rng = np.random.default_rng(4)
    pairs = [(s, s) for s in (ids(rng, int(n)) for n in rng.integers(3, 7, 6))]  # copy task
    batch = seq2seq_batch(pairs, tokenizer, 16, 16)
    with torch.no_grad():
        plain = seq2seq_loss_sums(model, batch, label_smoothing=0.0)
        smooth = seq2seq_loss_sums(model, batch, label_smoothing=0.1)
    assert plain["loss"].item() == pytest.approx(plain["nll"].item(), rel=1e-6)
    assert smooth["nll"].item() == pytest.approx(plain["nll"].item(), rel=1e-6)
    assert abs(smooth["loss"].item() - smooth["nll"].item()) > 1e-3
    assert smooth["n"].item() == batch.norm

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        s = seq2seq_loss_sums(model, batch)
        opt.zero_grad()
        (s["loss"] / batch.norm).backward()
        opt.step()
        first = first if first is not None else s["nll"].item() / batch.norm
    last = s["nll"].item() / batch.norm
    assert last < 0.6 * first, (first, last)
