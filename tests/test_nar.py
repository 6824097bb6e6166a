"""Mask-Predict (core/mlae/mask_predict.py) against toy models whose confidences are known, CMLM batches, and
batched == one by one on a real tiny NARModel."""

import dataclasses

import numpy as np
import pytest
import torch

from core.config import preset
from core.mlae.mask_predict import NARDecoder, mask_predict, merge_repeats
from core.mlae.nar import NARModel, nar_batch, nar_loss_sums, proportional_anchor
from core.t5 import IGNORE

MASK, V = 4, 30


class Toy:
    """length_logp from a fixed (B, P) table; predict puts `token(call, row, pos)` at each
    position with log-probability `conf(row, pos, length)`, and records every input."""

    def __init__(self, length_logp, token, conf):
        self.lp, self.token, self.conf = torch.as_tensor(length_logp, dtype=torch.float), token, conf
        self.calls = []
        self.rows = self.lp.shape[0]

    def length_logp(self):
        return self.lp

    def predict(self, rows, tokens, valid):
        self.calls.append((rows.clone(), tokens.clone(), valid.clone()))
        N, T = tokens.shape
        out = torch.full((N, T, V), -50.0)
        for r in range(N):
            L = int(valid[r].sum())
            for i in range(T):
                out[r, i, self.token(len(self.calls), int(rows[r]), i)] = self.conf(int(rows[r]), i, L)
        return out


def lengths_table(B, best, P=12):
    """(B, P) length log-probabilities ranking the lengths in `best` first, in that order."""
    lp = torch.full((B, P), -20.0)
    for rank, L in enumerate(best):
        lp[:, L] = -1.0 - rank
    return lp


def test_remasks_exactly_the_least_confident_in_linear_counts():
    confs = [-0.5, -3.0, -0.1, -2.0, -1.0, -0.2, -4.0]  # position i's confidence, fixed
    toy = Toy(lengths_table(1, [7]), token=lambda call, r, i: 10 + call, conf=lambda r, i, L: confs[i])
    I = 5
    out, det = mask_predict(toy, MASK, length_beam=1, iterations=I, max_len=10, return_details=True)
    assert len(toy.calls) == I and det["iterations"].tolist() == [I]
    assert (toy.calls[0][1] == MASK).all()  # iteration 0: all [MASK]
    order = np.argsort(confs)  # least confident first
    for t in range(1, I):
        n = max(1, 7 * (I - t) // I)
        masked = set((toy.calls[t][1][0] == MASK).nonzero()[:, 0].tolist())
        assert masked == set(order[:n].tolist()), (t, n, masked)
    # every token was last predicted at the last call in which it was masked
    last = {i: max([0] + [t for t in range(1, I) if toy.calls[t][1][0, i] == MASK]) for i in range(7)}
    assert out[0] == merge_repeats([10 + last[i] + 1 for i in range(7)])


def test_runs_every_iteration_on_a_model_that_stops_changing():
    """As published, all I passes run even when the predictions no longer change; fairseq's
    adaptive stop ends a candidate once the masked state it would feed a pass repeats."""
    make = lambda: Toy(lengths_table(2, [5]), token=lambda call, r, i: 10 + i, conf=lambda r, i, L: -0.1 * i)
    toy = make()
    out, det = mask_predict(toy, MASK, length_beam=1, iterations=10, max_len=10, return_details=True)
    assert len(toy.calls) == 10 and det["iterations"].tolist() == [10, 10]
    assert out == [[10, 11, 12, 13, 14]] * 2
    # adaptive: n = 4, 4 at t = 1, 2 with the same 4 least confident positions -> pass 2 would
    # see pass 1's input again; the candidate stops after 2 passes, with the same output
    toy = make()
    out, det = mask_predict(
        toy, MASK, length_beam=1, iterations=10, max_len=10, return_details=True, adaptive_stop=True
    )
    assert len(toy.calls) == 2 and det["iterations"].tolist() == [2, 2]
    assert out == [[10, 11, 12, 13, 14]] * 2
    # n = 4, 3, 2, 1 (L = I = 5): the masked state never repeats, every pass runs
    toy = Toy(lengths_table(1, [5]), token=lambda call, r, i: 10 + call, conf=lambda r, i, L: -0.1 * i)
    _, det = mask_predict(toy, MASK, length_beam=1, iterations=5, max_len=10, return_details=True, adaptive_stop=True)
    assert det["iterations"].tolist() == [5]


def test_at_least_one_token_is_remasked_per_iteration():
    """L < I: floor(L (I - t) / I) reaches 0 before the last iteration; n stays at 1 there."""
    confs = [-0.5, -3.0, -0.1]
    toy = Toy(lengths_table(1, [3]), token=lambda call, r, i: 10 + call, conf=lambda r, i, L: confs[i])
    I = 8
    mask_predict(toy, MASK, length_beam=1, iterations=I, max_len=10)
    assert len(toy.calls) == I
    counts = [int((toy.calls[t][1][0] == MASK).sum()) for t in range(1, I)]
    assert counts == [max(1, 3 * (I - t) // I) for t in range(1, I)] and min(counts) == 1
    assert all((toy.calls[t][1][0] == MASK).nonzero()[0, 0].item() == 1 for t in range(4, I))  # the least confident


def test_merges_consecutive_duplicates():
    seq = [5 + 10, 15, 16, 16, 16, 17]
    toy = Toy(lengths_table(1, [6]), token=lambda call, r, i: seq[i], conf=lambda r, i, L: -0.1)
    assert mask_predict(toy, MASK, length_beam=1, iterations=3, max_len=10) == [[15, 16, 17]]
    assert merge_repeats([1, 1, 2, 1, 1]) == [1, 2, 1]


def test_length_beam_picks_the_best_mean_log_probability():
    # the predictor ranks 4 > 2 > 6; the candidate of length 6 is the most confident on average
    mean = {4: -1.0, 2: -0.7, 6: -0.2}
    make = lambda: Toy(
        lengths_table(1, [4, 2, 6]), token=lambda call, r, i: 10 + i, conf=lambda r, i, L: mean.get(L, -5.0)
    )
    out, det = mask_predict(make(), MASK, length_beam=3, iterations=4, max_len=10, return_details=True)
    assert det["length"].tolist() == [6] and det["score"].item() == pytest.approx(-0.2)
    assert out == [[10, 11, 12, 13, 14, 15]]
    assert mask_predict(make(), MASK, length_beam=1, iterations=4, max_len=10) == [[10, 11, 12, 13]]
    # lengths above max_len are never candidates
    out, det = mask_predict(make(), MASK, length_beam=3, iterations=4, max_len=5, return_details=True)
    assert det["length"].tolist() == [2]


class Tok:
    pad_id, unk_id, eos_id, mask_id = 0, 1, 3, MASK


def tiny_nar(seed=0):
    torch.manual_seed(seed)
    return NARModel(preset("tiny", vocab_size=V, n_dec_layers=2, dropout=0.0, max_positions=64)).eval()


def test_batched_equals_one_by_one():
    model = tiny_nar()
    with torch.no_grad():  # make the length predictor prefer several different lengths
        model.length.bias.copy_(torch.randn(64) * 3)
    rng = np.random.default_rng(0)
    sources = [rng.integers(10, V, n).tolist() for n in (5, 17, 9)]
    together, det = mask_predict(NARDecoder(model, sources, Tok), MASK, 3, 6, max_len=12, return_details=True)
    for b, s in enumerate(sources):
        alone, d1 = mask_predict(NARDecoder(model, [s], Tok), MASK, 3, 6, max_len=12, return_details=True)
        assert alone[0] == together[b]
        assert d1["score"].item() == pytest.approx(det["score"][b].item(), abs=1e-5)
        assert d1["length"].item() == det["length"][b].item()


def test_static_and_graphed_decoding_equal_the_eager_one_with_no_sync_per_iteration():
    """NARDecoder(static=True) pads candidates to max_len and sources to SOURCE_BUCKET, and
    graphs=True (on the CPU: the same static calls, eagerly) gives the same tokens; a decoding
    without adaptive stop syncs with the host as often at 2 iterations as at 6."""
    from test_exit_pass import Count

    model = tiny_nar(1)
    with torch.no_grad():
        model.length.bias.copy_(torch.randn(64) * 3)
    rng = np.random.default_rng(1)
    sources = [rng.integers(10, V, n).tolist() for n in (5, 30, 12)]
    eager, de = mask_predict(NARDecoder(model, sources, Tok), MASK, 3, 6, max_len=12, return_details=True)
    for flags in (dict(static=True), dict(graphs=True)):
        out, d = mask_predict(NARDecoder(model, sources, Tok, **flags), MASK, 3, 6, max_len=12, return_details=True)
        assert out == eager, flags
        assert torch.equal(d["length"], de["length"]) and torch.allclose(d["score"], de["score"], atol=1e-5)

    def syncs(iterations):
        dec = NARDecoder(model, sources, Tok, static=True)
        with Count() as c:
            mask_predict(dec, MASK, 3, iterations, max_len=12)
        return c.syncs

    assert syncs(2) == syncs(6)


def test_the_remask_takes_the_least_confident_ties_to_the_earlier_position():
    """_remask's ranks by comparison are the inverse of a stable argsort, ties and +inf padding included."""
    from core.mlae.mask_predict import _remask

    g = torch.Generator().manual_seed(0)
    conf = torch.randint(0, 4, (64, 9), generator=g).float().neg()  # many ties
    conf[:, 7:] = float("inf")
    lengths = torch.randint(1, 8, (64,), generator=g)
    rank = conf.argsort(dim=1, stable=True).argsort(dim=1)
    for t in range(1, 5):
        n = ((lengths * (5 - t)) // 5).clamp_min(1)
        assert torch.equal(_remask(conf, lengths, t, 5), rank < n[:, None])


def test_a_static_decoding_is_one_call_whatever_the_iterations(monkeypatch):
    """A static decoder runs the whole decoding (every iteration and the re-masking between them)
    as one StaticDecode.run (on a GPU with graphs, one replay), kept per shape and iteration count
    and reused across sources, with the tokens of the eager decoding each time."""
    from core.mlae import mask_predict as mp

    model = tiny_nar(2)
    rng = np.random.default_rng(2)
    calls = []
    real = mp.StaticDecode.run
    monkeypatch.setattr(mp.StaticDecode, "run", lambda self, *a, **k: calls.append(self.loop) or real(self, *a, **k))
    for n in (7, 19, 7):  # the third reuses the first's StaticDecode
        src = [rng.integers(10, V, n).tolist()]
        for iterations in (1, 4):
            calls.clear()
            out = mask_predict(NARDecoder(model, src, Tok, static=True), MASK, 2, iterations, max_len=10)
            assert calls == [(iterations, MASK, 0)]
            assert out == mask_predict(NARDecoder(model, src, Tok), MASK, 2, iterations, max_len=10)
    assert len(mp._STEPS[model]) == 2  # one per iteration count: same shapes (sources padded to 64)


def test_cmlm_batch_and_loss():
    pairs = [(list(range(10, 20)), [11, 12, 13, 14, 15]), (list(range(10, 15)), [16, 17])]
    a, b = nar_batch(pairs, Tok, 16, 8), nar_batch(pairs, Tok, 16, 8)
    assert torch.equal(a.tgt_in, b.tgt_in)  # masks drawn from the batch's contents: replayable
    assert a.length.tolist() == [5, 2]
    for r, L in enumerate([5, 2]):
        k = int((a.tgt_out[r] != IGNORE).sum())
        assert 1 <= k <= L  # k ~ U[1, T]
        assert torch.equal(a.tgt_in[r] == MASK, a.tgt_out[r] != IGNORE)
        assert torch.equal(a.tgt_out[r][a.tgt_out[r] != IGNORE], a.tgt[r][a.tgt_out[r] != IGNORE])
    sums = nar_loss_sums(tiny_nar().train(), a)
    assert sums["n"].item() == a.norm and sums["loss"].requires_grad and sums["len_n"].item() == 2
    sums["loss"].backward()


def test_the_decoder_is_bidirectional():
    """A target token's output depends on the tokens to its right (unlike T5's causal decoder)."""
    model = tiny_nar()
    src = torch.randint(10, V, (1, 6))
    sv = torch.ones_like(src, dtype=torch.bool)
    mem = model.encode(src, torch.arange(6)[None], sv)
    tgt = torch.full((1, 5), MASK)
    h1 = model.decode_nar(tgt, torch.ones_like(tgt, dtype=torch.bool), mem, sv)
    tgt2 = tgt.clone()
    tgt2[0, 4] = 12
    h2 = model.decode_nar(tgt2, torch.ones_like(tgt, dtype=torch.bool), mem, sv)
    assert not torch.allclose(h1[0, 0], h2[0, 0])


# -----------------------------------------------------------------------------
# T5-NAR pretraining (train.py --objective t5-nar)


def t5_nar_examples(tokenizer, n=4, window=40):
    from core.data import TokenStream
    from core.mlae.nar import t5_nar_batch

    ids = [list(range(100, 100 + 50))] * 3  # text ids (over the sentinels')
    stream = TokenStream([np.asarray(i) for i in ids], window, 0, sep=tokenizer.eos_id)
    return stream, t5_nar_batch(stream, list(range(n)), tokenizer)


def test_t5_nar_batch_masks_and_predicts_every_masked_token(tokenizer):
    from core.t5 import span_corruption

    stream, b = t5_nar_examples(tokenizer)
    for r in range(4):
        window, rng = stream.window_at(r)
        src, tgt = span_corruption(window, rng, tokenizer)
        L = int(b.tgt_valid[r].sum())
        assert b.src[r, : len(src)].tolist() == src.tolist()
        assert b.tgt[r, :L].tolist() == tgt[:-1].tolist() and b.length[r] == L  # T5's target, no [EOS]
        text = torch.tensor([t >= tokenizer.n_special for t in tgt[:-1].tolist()])
        assert 0 < int(text.sum()) < L and b.tgt[r, 0] == tokenizer.sentinel(0)
        # one [MASK] per masked token, the sentinels kept; only the masked tokens are predicted
        assert (b.tgt_in[r, :L][text] == tokenizer.mask_id).all()
        assert torch.equal(b.tgt_in[r, :L][~text], b.tgt[r, :L][~text])
        assert torch.equal(b.tgt_out[r, :L][text], b.tgt[r, :L][text])
        assert (b.tgt_out[r, :L][~text] == IGNORE).all() and (b.tgt_out[r, L:] == IGNORE).all()
    n_text = int((b.tgt[b.tgt_valid] >= tokenizer.n_special).sum())
    assert b.norm == n_text < int(b.tgt_valid.sum())
    from core.mlae.nar import t5_nar_loss_sums

    model = NARModel(preset("tiny", vocab_size=tokenizer.vocab_size, n_dec_layers=1, dropout=0.0))
    sums = t5_nar_loss_sums(model, b)
    assert sums["n"].item() == b.norm and sums["len_n"].item() == 4  # every masked token is predicted
    assert sums["text_n"].item() == n_text


def test_sentinel_anchors_point_at_each_spans_sentinel(tokenizer):
    from core.mlae.nar import sentinel_anchors

    s0, s1, s2 = (tokenizer.sentinel(i) for i in range(3))
    src = [100, s0, 104, 105, s1, 109, s2]  # x1 <s0> x4 x5 <s1> x9 <s2>
    tgt = [s0, 101, 102, s1, 106, 107, 108, s2, 110]
    assert sentinel_anchors(np.array(src), np.array(tgt)).tolist() == [1, 1, 1, 4, 4, 4, 4, 6, 6]
    _, b = t5_nar_examples(tokenizer)
    for r in range(len(b)):  # every target token's anchor holds the sentinel that opens its span
        L = int(b.tgt_valid[r].sum())
        opener = [int(t) for t in b.tgt[r, :L] if t < tokenizer.n_special]
        spans = np.cumsum([int(t) < tokenizer.n_special for t in b.tgt[r, :L]]) - 1
        assert [int(b.src[r, a]) for a in b.anchor[r, :L]] == [opener[i] for i in spans]


def test_t5_nar_cross_attention_bias_reads_each_tokens_anchor(tokenizer):
    """With cross_rel_pos, a target token's output changes when its anchor moves, and no other
    token's (one decoder layer); without it the anchor is ignored; a model without the table
    loads a checkpoint that has one (fine-tuning), dropping it."""
    _, b = t5_nar_examples(tokenizer, n=2)
    cfg = preset("tiny", vocab_size=tokenizer.vocab_size, n_dec_layers=1, dropout=0.0)
    torch.manual_seed(0)
    model = NARModel(cfg, cross_rel_pos=True).eval()
    predict = b.tgt_valid
    moved = b.anchor.clone()
    moved[0, 1] += 3
    with torch.no_grad():
        logits, _ = model(b.src, b.src_valid, b.tgt_in, b.tgt_valid, predict, b.anchor)
        logits2, _ = model(b.src, b.src_valid, b.tgt_in, b.tgt_valid, predict, moved)
    changed = (logits - logits2).abs().amax(-1) > 1e-5
    assert changed.tolist() == [i == 1 for i in range(len(changed))]
    with pytest.raises(ValueError, match="anchor"):
        model(b.src, b.src_valid, b.tgt_in, b.tgt_valid, predict)
    plain = NARModel(cfg).eval()
    plain.load_state_dict(model.state_dict())  # the table is dropped: fine-tuning has no anchors
    assert "cross_rel_table" in model.state_dict() and "cross_rel_table" not in plain.state_dict()
    with torch.no_grad():
        a, _ = plain(b.src, b.src_valid, b.tgt_in, b.tgt_valid, predict, b.anchor)
        c, _ = plain(b.src, b.src_valid, b.tgt_in, b.tgt_valid, predict, moved)
    assert torch.equal(a, c)


def test_t5_nar_length_loss_stays_out_of_the_encoder(tokenizer):
    """In T5-NAR pretraining the length predictor's loss trains the predictor alone (with
    length_grad it reaches the encoder, as in CMLM fine-tuning)."""
    from core.mlae import nar

    _, b = t5_nar_examples(tokenizer, n=2)
    cfg = preset("tiny", vocab_size=tokenizer.vocab_size, n_dec_layers=1, dropout=0.0)
    for length_grad in (False, True):
        torch.manual_seed(0)
        model = NARModel(cfg, cross_rel_pos=True)
        # the length's share alone: a model whose token logits carry no gradient
        head = model.head.forward
        model.head.forward = lambda h: head(h.detach())
        model.dec_layers.requires_grad_(False)
        nar.t5_nar_loss_sums(model, b, length_grad=length_grad)["loss"].backward()
        enc = sum(
            p.grad.abs().sum()
            for n, p in model.named_parameters()
            if n.startswith("enc_layers.") and p.grad is not None
        )
        assert model.length.weight.grad.abs().sum() > 0
        assert (enc > 0) == length_grad


def test_t5_nar_decoder_has_no_causal_mask(tokenizer):
    """Through the pretraining forward: a later decoder input changes an earlier output."""
    _, b = t5_nar_examples(tokenizer, n=2)
    torch.manual_seed(0)
    model = NARModel(preset("tiny", vocab_size=tokenizer.vocab_size, n_dec_layers=1, dropout=0.0)).eval()
    predict = b.tgt_valid
    logits, _ = model(b.src, b.src_valid, b.tgt_in, b.tgt_valid, predict)
    later = b.tgt_in.clone()
    last = int(b.tgt_valid[0].sum()) - 1
    later[0, last] = 25
    logits2, _ = model(b.src, b.src_valid, later, b.tgt_valid, predict)
    assert not torch.allclose(logits[0], logits2[0])  # row 0's first output saw its last input
    n0 = int(b.tgt_valid[0].sum())
    assert torch.allclose(logits[n0:], logits2[n0:], atol=1e-6)  # row 1 is untouched


def test_t5_nar_pretraining_learns_and_resumes(text_file, tmp_path):
    import os
    import train
    from conftest import TINY, read_log
    from core.objectives import OBJECTIVES

    # the CPU, where a resumed run is bit for bit the straight one (tests/test_train.py: CUDA's tolerance)
    flags = [
        "--data",
        text_file,
        "--objective",
        "t5-nar",
        "--steps",
        "12",
        "--lr",
        "3e-3",
        "--dropout",
        "0.1",
        "--device",
        "cpu",
    ] + TINY
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    train.main(flags + ["--out", straight])
    train.main(flags + ["--out", resumed, "--stop-after", "6"])
    train.main(flags + ["--out", resumed, "--resume"])
    log = lambda out: [r for r in read_log(out) if "loss" in r]
    a, b = log(straight), log(resumed)
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    token_loss = [r["loss"] - 0.1 * r["len_loss"] for r in a]  # without the length predictor's share
    assert sum(token_loss[-3:]) < sum(token_loss[:3]) - 0.3, token_loss
    sa = torch.load(os.path.join(straight, "last.pt"), weights_only=True)
    sb = torch.load(os.path.join(resumed, "last.pt"), weights_only=True)
    assert all(torch.equal(sa["model"][k], sb["model"][k]) for k in sa["model"])
    assert sa["kind"] == "pretrain/t5-nar" and sa["step"] == 12 and "length.weight" in sa["model"]
    assert "cross_rel_table" in sa["model"]  # the anchors' cross-attention bias, on by default
    assert sa["positions"] == OBJECTIVES["t5-nar"].positions(48)
    # the recorded decoder positions are those the batches use: the target without [EOS]
    assert sa["positions"]["decoder"] == OBJECTIVES["t5"].positions(48)["decoder"] - 1
    assert (sa["model_config"]["n_layers"], sa["model_config"]["n_dec_layers"]) == (2, 1)  # MLAE's tiny depths


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_baselines_have_mlaes_depths_and_parameters(name):
    """T5, T5-NAR and CMLM from scratch take MLAE's (encoder, decoder) depths at every preset, so
    their parameters match MLAE's: (b) has the same layers as T5, a NAR model adds the length
    predictor to both alike, (a) lacks only the decoder's cross-attention."""
    from core.config import DEPTHS, depths
    from core.mlae.model import MLAE
    from core.model import EncoderDecoder, count_parameters

    enc, dec = depths(name)
    assert (enc, dec) == DEPTHS[name] and depths(name, dec_layers=3) == (enc, 3)
    cfg = preset(name, vocab_size=8000, n_layers=enc, n_dec_layers=dec)
    mlae_b, t5 = count_parameters(MLAE(cfg, "b")), count_parameters(EncoderDecoder(cfg))
    assert abs(t5 / mlae_b - 1) < 0.03, (t5, mlae_b)
    assert count_parameters(NARModel(cfg)) - t5 == cfg.d_model * cfg.max_positions + cfg.max_positions
    assert count_parameters(MLAE(cfg, "a")) < mlae_b


def test_t5_nar_checkpoint_without_the_cross_bias_resumes_without_it(text_file, tmp_path):
    """A t5-nar run written before the bias applied to it (its args say --cross-rel-pos, its
    weights have no table) resumes as it was trained: without the bias."""
    import os
    import train
    from conftest import TINY

    out = str(tmp_path / "old")
    flags = ["--data", text_file, "--objective", "t5-nar", "--steps", "4", "--out", out] + TINY
    train.main(flags + ["--no-cross-rel-pos", "--stop-after", "2"])
    path = os.path.join(out, "last.pt")
    state = torch.load(path, weights_only=True)
    assert "cross_rel_table" not in state["model"]
    state["args"]["cross_rel_pos"] = True
    torch.save(state, path)
    train.main(flags + ["--resume"])
    state = torch.load(path, weights_only=True)
    assert state["step"] == 4 and "cross_rel_table" not in state["model"]


def test_t5_nar_takes_the_depth_flags(text_file, tmp_path, capsys):
    """--enc-layers / --dec-layers reach a T5-NAR pretraining as they reach T5's (its help says so);
    an objective with one stack still refuses them."""
    import os
    import train
    from conftest import TINY
    from test_train import fails_with

    out = str(tmp_path / "deep")
    train.main(
        [
            "--data",
            text_file,
            "--objective",
            "t5-nar",
            "--steps",
            "1",
            "--enc-layers",
            "3",
            "--dec-layers",
            "2",
            "--out",
            out,
        ]
        + TINY
    )
    cfg = torch.load(os.path.join(out, "last.pt"), weights_only=True)["model_config"]
    assert (cfg["n_layers"], cfg["n_dec_layers"]) == (3, 2)
    fails_with(
        capsys,
        ["--data", text_file, "--dec-layers", "2", "--out", str(tmp_path / "p")] + TINY,
        "--dec-layers applies only",
    )


def test_proportional_anchors_lay_the_target_evenly_over_its_source():
    tgt_valid = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    src_valid = torch.tensor([[1] * 8 + [0] * 2, [1] * 3 + [0] * 7], dtype=torch.bool)
    assert proportional_anchor(tgt_valid, src_valid).tolist() == [[1, 3, 5, 7, 7, 7], [0, 2, 2, 2, 2, 2]]


def test_a_fine_tuning_keeps_the_cross_table_under_proportional_anchors(tokenizer):
    """cross_anchor proportional (a NAR fine-tuning of MLAE (b) or T5-NAR): the model keeps the
    pretrained cross-attention table and anchors each target token itself; the bias is read (an
    anchor moved changes that token's output)."""
    _, b = t5_nar_examples(tokenizer, n=2)
    cfg = preset("tiny", vocab_size=tokenizer.vocab_size, n_dec_layers=1, dropout=0.0)
    torch.manual_seed(0)
    pretrained = NARModel(cfg, cross_rel_pos=True)
    with torch.no_grad():
        pretrained.cross_rel_table.normal_()
    tuned = NARModel(dataclasses.replace(cfg, cross_anchor="proportional")).eval()
    tuned.load_state_dict(pretrained.state_dict())
    assert torch.equal(tuned.cross_rel_table, pretrained.cross_rel_table)
    anchor = proportional_anchor(b.tgt_valid, b.src_valid)
    moved = anchor.clone()
    moved[0, 1] += 3
    with torch.no_grad():
        own, _ = tuned(b.src, b.src_valid, b.tgt_in, b.tgt_valid, b.tgt_valid)
        given, _ = tuned(b.src, b.src_valid, b.tgt_in, b.tgt_valid, b.tgt_valid, anchor)
        other, _ = tuned(b.src, b.src_valid, b.tgt_in, b.tgt_valid, b.tgt_valid, moved)
    assert torch.equal(own, given)
    assert ((own - other).abs().amax(-1) > 1e-5).tolist() == [i == 1 for i in range(len(own))]
    with pytest.raises(ValueError, match="cross_anchor"):
        NARModel(dataclasses.replace(cfg, cross_anchor="diagonal"))
