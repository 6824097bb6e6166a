"""ELMER: early exit that skips the work (gathered layout = plain layout, exited states frozen),
the hard-exit thresholds, LPLM's loss and its encoder reuse, the infilling noise, no peeking at
the reference length, and the pipeline end to end."""

import math

import numpy as np
import pytest
import torch

import kernels
from core.config import preset
from core.elmer.model import (
    ELMER,
    IGNORE,
    ExitTrace,
    assigned_loss_sums,
    decode_exit,
    elmer_seq2seq_batch,
    exit_statistics,
    generate,
    infilling_spans,
    lplm_corrupt,
    sentence_shuffle,
)

V = 97


def tiny(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = preset("tiny", vocab_size=V, n_dec_layers=3, dropout=0.0)
    model = ELMER(cfg, dec_len=12, **kw).eval()
    with torch.no_grad():
        model.dec_rel_table.normal_(0, 0.5)
    return model


def memory_of(model, B=3, S=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(6, V, (B, S), generator=g)
    valid = torch.ones(B, S, dtype=torch.bool)
    valid[1, 6:] = False
    return model.encode_source(src, valid), valid


def report(name, a, b):
    d = (a - b).abs()
    return f"{name}: max diff {d.max().item():.3g}, mean {d.mean().item():.3g}"


@pytest.mark.parametrize("soft,separate", [(False, False), (True, False), (False, True)])
def test_gathered_equals_plain_and_exited_states_frozen(soft, separate):
    model = tiny(soft=soft, separate_offramps=separate)
    if soft:
        with torch.no_grad():
            model.soft.weight.normal_(0, 0.1)
    memory, valid = memory_of(model)
    B, T = 3, 12
    g = torch.Generator().manual_seed(2)
    exit_layer = torch.randint(1, 4, (B, T), generator=g).reshape(-1)

    def decide(l, idx, h, x_in):
        return exit_layer[idx] == l + 1, None

    with torch.no_grad():
        traces = {}
        for gather in (True, False):
            traces[gather] = []
            model.decoder_loop(memory, valid, T, decide, gather, trace=traces[gather])
    for l, (a, b) in enumerate(zip(traces[True], traces[False])):
        print(report(f"layer {l + 1}", a, b))
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)
    # a token that exited at layer l keeps h^l bit for bit in every upper layer
    for l in range(3):
        gone = exit_layer <= l + 1
        for up in traces[True][l + 1 :]:
            assert torch.equal(up[gone], traces[True][l][gone])
    # and the layers do change the tokens still active
    still = exit_layer == 3
    assert not torch.allclose(traces[True][2][still], traces[True][1][still])


def test_exited_token_does_not_run_the_layer():
    """In the gathered layout the queries a layer computes are the active tokens only (counted at
    the FFN). The layout by default: gathered on the Triton backend or for one sequence; plain for
    a batch on the reference backend, whose packed attention would score every key of the batch."""
    from core.elmer.model import gather_pays

    model = tiny()
    memory, valid = memory_of(model)
    seen = []
    for layer in model.dec_layers:
        layer.ffn.register_forward_hook(lambda m, i, o: seen.append(i[0].numel() // i[0].shape[-1]))
    exit_layer = torch.tensor([1, 2, 3] * 12)
    decide = lambda l, idx, h, x_in: (exit_layer[idx] == l + 1, None)  # noqa: E731

    with torch.no_grad():
        model.decoder_loop(memory, valid, 12, decide, gather=True)
        assert seen == [36, 24, 12]
        seen.clear()
        model.decoder_loop(memory, valid, 12, decide)  # 3 sequences on the CPU reference: plain
        assert seen == [36, 36, 36]
        seen.clear()
        model.decoder_loop(memory[:1], valid[:1], 12, decide)  # one sequence: gathered
        assert seen == [12, 8, 4]
    cpu = torch.device("cpu")
    assert not gather_pays(3, cpu) and gather_pays(1, cpu)
    with kernels.use_backend("triton"):
        assert gather_pays(3, cpu)


def test_hard_exit_thresholds():
    model = tiny()
    memory, valid = memory_of(model)
    _, layers = decode_exit(model, memory, valid, 12, 0.0)
    assert (layers == 3).all()
    toks_inf, layers = decode_exit(model, memory, valid, 12, math.inf)
    assert (layers == 1).all()
    # exiting at layer 1 predicts with the first off-ramp
    with torch.no_grad():
        x = []
        model.decoder_loop(
            memory, valid, 12, lambda l, idx, h, x_in: (torch.ones_like(idx, dtype=torch.bool), None), trace=x
        )
        assert torch.equal(model.ramp_logits(0, x[0]).argmax(-1).view(3, 12), toks_inf)
    sep = tiny(separate_offramps=True)
    assert sep.ramp_head(0) is not sep.ramp_head(1) and sep.ramp_head(0).embedding is sep.emb.tok
    _, layers = decode_exit(sep, memory, valid, 12, math.inf)
    assert (layers == 1).all()
    _, mid = decode_exit(model, memory, valid, 12, 4.0)
    print("exit layers at delta 4:", torch.bincount(mid.reshape(-1), minlength=4).tolist())


def test_lplm_all_last_layer_equals_plain_nar():
    model = tiny()
    memory, valid = memory_of(model)
    g = torch.Generator().manual_seed(3)
    target = torch.randint(6, V, (3, 12), generator=g)
    target[2, 9:] = IGNORE
    with torch.no_grad():
        loss, hit, n = assigned_loss_sums(model, memory, valid, target, torch.full((3, 12), 3))
        # a plain NAR decoder: every layer on every token, the head on the last state
        x = model.emb(torch.full((3, 12), 4), torch.arange(12).expand(3, 12))
        pos = torch.arange(12).expand(3, 12)
        from core.model import Meta

        meta = Meta(torch.zeros_like(pos), torch.zeros_like(pos))
        bias = model.rel_bias(model.dec_rel_table, pos, pos)
        for layer in model.dec_layers:
            x, _ = layer(x, meta, bias=bias, memory=memory, mem_meta=model.memory_meta(valid))
        logits = model.head(model.ln_dec(x))[target != IGNORE]
        plain = torch.nn.functional.cross_entropy(logits, target[target != IGNORE], reduction="sum")
    print(f"LPLM {loss.item():.6f} plain {plain.item():.6f}")
    assert abs(loss.item() - plain.item()) < 1e-3 and n.item() == 33


def test_lplm_encoder_runs_once_whatever_k():
    model = tiny().train()
    calls = []
    model.enc_layers[0].register_forward_hook(lambda *a: calls.append(1))
    g = torch.Generator().manual_seed(4)
    src = torch.randint(6, V, (2, 8), generator=g)
    for k in (1, 4):
        calls.clear()
        out = model(
            src,
            torch.ones(2, 8, dtype=torch.bool),
            torch.randint(6, V, (2, 12), generator=g),
            torch.randint(1, 4, (2, k, 12), generator=g),
        )
        out["loss"].backward()
        assert len(calls) == 1
        assert model.enc_layers[0].ffn.up.weight.grad is not None


def test_infilling_noise():
    rng = np.random.default_rng(0)
    masked = total = 0
    lengths = []
    for _ in range(300):
        n = int(rng.integers(30, 200))
        spans = infilling_spans(n, rng)
        cover = np.zeros(n, bool)
        for s, m in spans:
            assert not cover[max(0, s - 1) : s + m + 1].any()  # no overlap, no touching
            cover[s : s + m] = True
        masked += cover.sum()
        total += n
        lengths += [m for _, m in spans[:-1]]  # the last span is cut to the budget
    assert abs(masked / total - 0.15) < 0.01
    # Poisson(3) without zeros has mean 3 / (1 - e^-3) = 3.157; cutting at the budget lowers it a little
    assert 2.7 < np.mean(lengths) < 3.3, np.mean(lengths)

    class Tok:
        mask_id, eos_id, vocab_size = 4, 3, 50
        _full_stops = {9}

    ids = list(range(10, 40)) + [9] + list(range(40, 60)) + [9] + list(range(60, 80)) + [9]
    out = lplm_corrupt(ids, Tok, np.random.default_rng(1))
    rng = np.random.default_rng(1)  # the same draws as lplm_corrupt: shuffle, then the spans
    spans = infilling_spans(len(sentence_shuffle(ids, {9}, rng, 3)), rng)
    kept = [t for t in out if t != 4]
    assert out.count(4) == len(spans) >= 2  # one [MASK] per span
    assert len(kept) == len(ids) - round(0.15 * len(ids))
    words = [t for t in kept if t != 9]
    assert len(set(words)) == len(words) and set(kept) <= set(ids)
    orders = {tuple(sentence_shuffle(ids, {9}, np.random.default_rng(s))[:1]) for s in range(20)}
    assert len(orders) == 3  # each sentence comes first under some seed

    # two documents: sentences move within their own document; the [EOS] between them is neither
    # moved nor masked (spans never cover or touch it)
    docs = list(range(10, 20)) + [9] + list(range(20, 30)) + [9] + [3] + list(range(30, 45)) + [9] + [3]
    for seed in range(30):
        shuffled = sentence_shuffle(docs, {9}, np.random.default_rng(seed), 3)
        assert shuffled.index(3) == docs.index(3) and shuffled[-1] == 3
        assert sorted(shuffled[: docs.index(3)]) == sorted(docs[: docs.index(3)])
        out = lplm_corrupt(docs, Tok, np.random.default_rng(seed))
        assert out.count(3) == 2 and all(4 not in (a, b) for a, b in zip(out, out[1:]) if 3 in (a, b))


def test_output_does_not_depend_on_reference_length():
    model = tiny()
    pairs_a = [([7, 8, 9, 10], [11, 12])]
    pairs_b = [([7, 8, 9, 10], [11, 12, 13, 14, 15, 16, 17])]

    class Tok:
        pad_id, eos_id, n_special = 0, 3, 6

    a = elmer_seq2seq_batch(pairs_a, Tok, 16, 12, 12)
    b = elmer_seq2seq_batch(pairs_b, Tok, 16, 12, 12)
    assert a.tgt_out.shape == b.tgt_out.shape == (1, 12)  # the decoder length is dec_len either way
    trace = ExitTrace(len(model.dec_layers))
    out = generate(model, [p[0] for p in pairs_a], Tok, trace=trace)
    assert out == generate(model, [p[0] for p in pairs_b], Tok)
    assert int(trace.counts.sum()) > 0


def test_soft_training_sees_what_decoding_sees():
    """Soft exit feeds each layer's argmax to the next (Eq. 12). In fine-tuning that argmax must be
    the model's own prediction at every position, as in decoding: feeding anything else past the
    reference's [EOS] would tell the upper layers where the reference ends. So the fine-tuning
    loss of the positions a reference keeps is the decoder's own, wherever the reference ends."""
    from core.elmer.model import offramp_loss_sums

    model = tiny(soft=True)
    with torch.no_grad():
        model.soft.weight.normal_(0, 0.3)
    memory, valid = memory_of(model, B=6)
    B, T, L = 6, 12, len(model.dec_layers)
    with torch.no_grad():
        x = model.decoder_loop(memory, valid, T, lambda l, idx, h, x_in: (None, None), gather=False)
        logp = model.ramp_logits(L - 1, x).float().log_softmax(-1)  # (B*T, V): the top off-ramp
        tokens = logp.argmax(-1).view(B, T)
        for cut in (2, 5, 9):
            target = tokens.clone()
            target[:, cut:] = IGNORE
            _, nll, hit, n = offramp_loss_sums(model, memory, valid, target)
            want = -logp.view(B, T, -1)[:, :cut].gather(2, tokens[:, :cut, None]).sum()
            assert int(hit) == int(n) == B * cut
            assert float(nll) == pytest.approx(float(want), rel=1e-5), (cut, float(nll), float(want))


# -----------------------------------------------------------------------------
# end to end: LPLM pretraining -> hard / soft fine-tuning, and the no-pretraining run -> eval.py


def test_pipeline(text_file, tmp_path, capsys):
    import os

    import eval as evaluate_script
    import finetune
    import train
    from conftest import TINY, read_log, write_task_files

    files = write_task_files(tmp_path, dict(train=64, valid=16, test=6))
    pre = str(tmp_path / "pre")
    train.main(
        [
            "--data",
            text_file,
            "--objective",
            "elmer",
            "--permutations",
            "3",
            "--steps",
            "3",
            "--out",
            pre,
            "--dec-len",
            "12",
        ]
        + TINY
    )
    log = read_log(pre)
    assert [r for r in log if "valid_loss" in r]
    ft = [
        "--train-data",
        files["train"],
        "--valid-data",
        files["valid"],
        "--epochs",
        "1",
        "--batch",
        "32",
        "--micro-batch",
        "16",
        "--max-src",
        "32",
        "--max-tgt",
        "12",
        "--rouge-examples",
        "4",
        "--valid-examples",
        "8",
    ]
    outs = []
    for name, extra in (
        ("hard", ["--init", os.path.join(pre, "last.pt"), "--exit", "hard"]),
        ("soft", ["--init", os.path.join(pre, "last.pt"), "--exit", "soft"]),
        ("scratch", ["--init", "none", "--arch", "elmer", "--model", "tiny", "--vocab-size", "600", "--dec-len", "12"]),
    ):
        out = str(tmp_path / name)
        finetune.main(extra + ft + ["--out", out])
        outs.append(os.path.join(out, "best.pt"))
    rows = evaluate_script.main(
        outs + ["--data", files["test"], "--batch-size", "4", "--latency-samples", "2", "--exit-entropy", "inf"]
    )
    text = capsys.readouterr().out
    assert "mean_exit" in text and "exit_frac" in text
    for r in rows[:3]:
        assert r["arch"] == "elmer" and r["decoding"] == "one pass, early exit"
        assert r["mean_exit"] == 1.0 and r["latency_ms"] > 0
    assert torch.load(outs[1], weights_only=True)["elmer"]["soft"] is True


# -----------------------------------------------------------------------------
# exits that fire: a model that has learnt its task leaves early at the paper's delta


class CopyTok:
    pad_id, eos_id, n_special = 0, 3, 6


def copy_task(seed, n=32, length=6):
    g = torch.Generator().manual_seed(seed)
    return [(ids, ids) for ids in torch.randint(6, 30, (n, length), generator=g).tolist()]


def train_copy(steps=150, label_smoothing=0.0, exit_train="hard", seed=0):
    torch.manual_seed(seed)
    cfg = preset("tiny", vocab_size=V, n_dec_layers=3, dropout=0.0)
    model = ELMER(cfg, dec_len=8, exit_train=exit_train)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        b = elmer_seq2seq_batch(copy_task(step), CopyTok, 8, 8, 8)
        out = model(b.src, b.src_valid, b.tgt_out, label_smoothing=label_smoothing)
        opt.zero_grad()
        (out["loss"] / out["n"]).backward()
        opt.step()
    return model.eval(), float(out["hit"] / out["n"])


@pytest.mark.parametrize("exit_train", ["hard", "all"])
def test_learnt_copy_task_exits_early_at_the_papers_delta(exit_train):
    """Trained without label smoothing, a model that copies its source perfectly is confident
    below the top: at delta 0.5 tokens leave early through generate / decode_exit, and the
    output stays the copy. (Under smoothing 0.1 the off-ramp entropy cannot fall under 0.78 nats
    at V = 97: nobody would leave.)"""
    model, acc = train_copy(exit_train=exit_train)
    assert acc > 0.95, acc
    pairs = copy_task(10_000)
    trace = ExitTrace(len(model.dec_layers))
    out = generate(model, [s for s, _ in pairs], CopyTok, delta=0.5, measure="entropy", trace=trace)
    mean, frac = exit_statistics(trace.counts)
    print(f"{exit_train}: mean exit layer {mean:.2f}, per layer {frac}")
    assert mean < 2.5 and frac[0] + frac[1] > 0.5
    assert sum(o == t for o, (_, t) in zip(out, pairs)) >= 0.9 * len(pairs)


# -----------------------------------------------------------------------------
# the fused off-ramp cross-entropy in fine-tuning and LPLM


def test_fused_offramp_loss_equals_the_logits_and_allocates_no_logits(monkeypatch):
    import functools

    import kernels
    import kernels.offramp_loss as ol
    from test_early_exit import AllocationTrace

    # chunks of 16 token rows, so that a whole (n, V) block would stand out
    monkeypatch.setattr(ol, "offramp_cross_entropy", functools.partial(ol.offramp_cross_entropy, chunk=16))
    torch.manual_seed(0)
    Vbig = 512
    cfg = preset("tiny", vocab_size=Vbig, n_dec_layers=2, dropout=0.0)
    from conftest import DEVICE as dev

    model = ELMER(cfg, dec_len=8, exit_train="all").to(dev)
    g = torch.Generator().manual_seed(5)
    src = torch.randint(6, Vbig, (12, 6), generator=g)
    tgt = torch.randint(6, Vbig, (12, 8), generator=g)
    tgt[3, 5:] = IGNORE
    src, tgt = src.to(dev), tgt.to(dev)
    valid = torch.ones(12, 6, dtype=torch.bool, device=dev)
    n_rows = int((tgt != IGNORE).sum())
    assert n_rows > cfg.d_model  # an (n, V) tensor is then larger than the (V, C) embedding
    lplm = torch.full((12, 1, 8), 2, device=dev)  # LPLM with every token at the top: n rows at one off-ramp
    for exits in (None, lplm):
        res = {}
        for backend in ("reference", "triton"):
            model.zero_grad()
            with kernels.use_backend(backend), AllocationTrace() as trace:
                out = model(src, valid, tgt, exits)
                out["loss"].backward()
            res[backend] = (
                out["loss"].detach(),
                out["nll"],
                {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None},
                trace.largest,
            )
        (l0, n0, g0, big0), (l1, n1, g1, big1) = res["reference"], res["triton"]
        print(
            f"loss {l0.item():.5f} vs {l1.item():.5f}; largest tensor {big0} vs {big1} bytes, (n, V) "
            f"{n_rows * Vbig * 4}"
        )
        assert torch.allclose(l0, l1, rtol=1e-4) and torch.allclose(n0, n1, rtol=1e-4)
        for k in g0:
            assert torch.allclose(g0[k], g1[k], atol=1e-5, rtol=1e-3), report(k, g0[k], g1[k])
        assert big0 >= n_rows * Vbig * 4 > big1
