"""ELMER's exit measures (entropy, state, classifier), the vocabulary projection a cheap measure
saves, the exit classifier's training beside the LM, the FLOP count, the flags, and word-level
duplicate merging."""

import math

import numpy as np
import pytest
import torch

from core.config import preset
from core.elmer.model import ELMER, elmer_seq2seq_batch
from core.errors import UserError
from core.elmer.exit_measures import check_threshold, exit_settings
from core.elmer.exit_decode import (
    ExitTrace,
    decode_exit,
    decoder_macs,
    entropy_quantiles,
    finish,
    generate,
    merge_words,
)
from core.finetuning import elmer_options

from test_elmer import V, memory_of, tiny as elmer_tiny


def tiny(seed=0, **kw):
    """test_elmer's tiny ELMER, with an exit classifier that is not all zeros."""
    model = elmer_tiny(seed, **kw)
    with torch.no_grad():
        model.exit_clf.weight.normal_(0, 1.0)
    return model


@pytest.mark.parametrize(
    "measure,everyone,nobody", [("state", -1.0, 1.0), ("classifier", 0.0, 1.0), ("entropy", math.inf, 0.0)]
)
def test_measure_thresholds_and_one_projection_per_token(measure, everyone, nobody):
    model = tiny()
    memory, valid = memory_of(model)
    n = 3 * 12
    ref, _ = decode_exit(model, memory, valid, 12, math.inf)  # every token at the first off-ramp
    work = {}
    toks, layers = decode_exit(model, memory, valid, 12, everyone, measure=measure, work=work)
    assert (layers == 1).all() and torch.equal(toks, ref)
    assert work["queries"] == [n, 0, 0]
    work = {}
    _, layers = decode_exit(model, memory, valid, 12, nobody, measure=measure, work=work)
    assert (layers == 3).all() and work["ramp"] == [0, 0, n] and work["measure"] == [0, 0, 0]
    if measure == "entropy":
        return
    # a threshold in between: some leave at each layer, and each token meets the vocabulary once
    for thr in (0.2, 0.5, 0.8, 0.95):
        work = {}
        _, layers = decode_exit(model, memory, valid, 12, thr, measure=measure, work=work)
        assert sum(work["ramp"]) == n, (thr, work)
        counts = torch.bincount(layers.reshape(-1), minlength=4)[1:].tolist()
        assert work["ramp"] == counts and work["queries"][1] == n - counts[0]


@pytest.mark.parametrize("measure", ["entropy", "classifier"])
def test_entropies_recorded_where_the_vocabulary_projection_ran(measure):
    """decode_exit's "entropy": under the entropy measure a token has an entropy at every layer
    up to its exit, the last one the first under delta (or the top); under a cheap measure only
    at its exit layer. generate keeps the tokens up to [EOS], and the quantiles skip the NaNs."""
    model = tiny()
    memory, valid = memory_of(model)
    work = {}
    decode_exit(model, memory, valid, 12, 1e-9, work=work)  # nobody leaves: every layer's entropy
    full = work["entropy"]
    assert not full.isnan().any()
    delta = float(full[..., 0].median()) if measure == "entropy" else 0.5
    work = {}
    _, layers = decode_exit(model, memory, valid, 12, delta, measure=measure, work=work)
    ent, L = work["entropy"], full.shape[-1]
    assert 0 < int((layers == 1).sum()) < layers.numel()
    for b, t in zip(*torch.nonzero(torch.ones_like(layers), as_tuple=True)):
        k = int(layers[b, t])
        ran = ~ent[b, t].isnan()
        if measure == "entropy":
            assert ran.tolist() == [l < k for l in range(L)]
            # the same states up to its exit (the gathered layout sums in another order above layer 1)
            torch.testing.assert_close(ent[b, t, :k], full[b, t, :k], atol=1e-3, rtol=1e-3)
            under = [l + 1 for l in range(L - 1) if ent[b, t, l] < delta]
            assert k == (under[0] if under else L)
        else:
            assert ran.tolist() == [l == k - 1 for l in range(L)]

    class Tok:
        pad_id, eos_id, n_special = 0, 3, 6

    trace = ExitTrace(L)
    generate(model, [[7, 8, 9], [10, 11]], Tok, delta=1e-9, measure="entropy", trace=trace)
    assert len(trace.entropies) == 2 and all(r.shape[1] == L and 1 <= r.shape[0] <= 12 for r in trace.entropies)
    med = entropy_quantiles(trace.entropies, 0.5)
    assert len(med) == L and all(0 < m < math.log(V) + 1e-4 for m in med)
    assert entropy_quantiles([torch.tensor([[1.0, math.nan], [3.0, math.nan]])], 0.5) == [2.0, None]


def test_state_measure_is_the_cosine_of_consecutive_states():
    model = tiny()
    memory, valid = memory_of(model)
    trace = []
    with torch.no_grad():
        model.decoder_loop(memory, valid, 12, lambda l, idx, h, x: (None, None), trace=trace)
    cos = torch.nn.functional.cosine_similarity(trace[1], trace[0], dim=-1)
    thr = float(cos.median())
    _, layers = decode_exit(model, memory, valid, 12, thr, measure="state")
    # layer 1 compares h^1 with the [MASK] embedding; layer 2 decides for the tokens still there
    first = layers.reshape(-1) == 1
    second = layers.reshape(-1) == 2
    assert torch.equal(second, ~first & (cos > thr))


def test_classifier_learns_beside_the_lm_without_disturbing_it():
    """The classifier's input is detached: the LM's gradients do not depend on its weights."""
    cfg = preset("tiny", vocab_size=V, n_dec_layers=3, dropout=0.0)

    class Tok:
        pad_id, eos_id, n_special = 0, 3, 6

    b = elmer_seq2seq_batch([([7, 8, 9, 10], [11, 12, 13]), ([14, 15], [16])], Tok, 8, 8, 8)
    grads = []
    for w in (0.0, 1.0):
        torch.manual_seed(0)
        model = ELMER(cfg, dec_len=8)
        with torch.no_grad():
            model.exit_clf.weight.fill_(w)
        out = model(b.src, b.src_valid, b.tgt_out)
        out["loss"].backward()
        assert model.exit_clf.weight.grad.abs().sum() > 0
        grads.append(
            {
                k: p.grad.clone()
                for k, p in model.named_parameters()
                if not k.startswith("exit_clf") and p.grad is not None
            }
        )
    for k in grads[0]:
        assert torch.allclose(grads[0][k], grads[1][k], atol=1e-6), k


def test_decoder_macs_count_the_saved_work():
    cfg = preset("small", vocab_size=8000)
    T, S, L = 32, 80, 4
    off = dict(queries=[T] * L, ramp=[0, 0, 0, T], measure=[0] * L)
    entropy_all = dict(queries=[T] * L, ramp=[T] * L, measure=[0] * L)  # the paper's measure, nobody leaving
    half = dict(queries=[T, T // 2, T // 2, T // 2], ramp=[T // 2, 0, 0, T // 2], measure=[T, T // 2, T // 2, 0])
    assert decoder_macs(cfg, T, S, entropy_all) > 1.2 * decoder_macs(cfg, T, S, off)
    assert 0.7 < decoder_macs(cfg, T, S, half) / decoder_macs(cfg, T, S, off) < 0.85  # K/V and memory stay


def test_flags_are_checked():
    for measure, bad in (("entropy", -0.1), ("state", 1.5), ("classifier", -0.2), ("classifier", float("nan"))):
        with pytest.raises(UserError):
            check_threshold(measure, bad)
    with pytest.raises(UserError):
        check_threshold("loss", 0.5)
    with pytest.raises(UserError, match="elmer only"):
        elmer_options("t5", {}, exit_measure="state")
    opts = elmer_options("elmer", {"elmer": dict(dec_len=16, exit_entropy=0.7)}, exit_measure="classifier")
    assert opts["exit_measure"] == "classifier" and opts["exit_threshold"] == 0.9 and opts["dec_len"] == 16


def test_eval_flags_refused_with_an_error_line(capsys):
    import eval as evaluate_script

    for argv in (
        ["--exit-threshold", "0.5,x"],
        ["--exit-measure", "state", "--exit-threshold", "2"],
        ["--exit-entropy", "0.5", "--exit-measure", "state"],
    ):
        args = evaluate_script.get_args(argv)
        with pytest.raises(UserError):
            exit_settings(args)
    # no elmer checkpoint: the values are still checked (check_decoding), the flags noted as unused, and
    # another checkpoint's rows decode with no exit rule
    from core.decodings import DECODINGS

    with pytest.raises(UserError):
        DECODINGS["elmer"].check_flags(evaluate_script.get_args(["--exit-threshold", "0.5,x"]))
    args = evaluate_script.get_args(["--exit-entropy", "0.5"])
    assert [g.get("exit_rule") for g in DECODINGS["ar"].settings(args, dict(args={}), "ck")] == [None]
    args = evaluate_script.get_args(["--exit-measure", "state", "--exit-threshold", "0.9,0.95"])
    assert exit_settings(args) == [("state", 0.9), ("state", 0.95)]
    args = evaluate_script.get_args(["--exit-entropy", "0.5"])
    assert exit_settings(args) == [("entropy", 0.5)]


def test_duplicates_merge_by_words_not_subword_ids():
    # "Swis|s", "20|20", "mod_s|s|l": repeated pieces inside a word stay
    assert finish([7, 8, 8, 9, 3, 10], eos_id=3, n_special=6) == [7, 8, 8, 9]
    assert merge_words("the the Swiss Swiss bank in 2020") == "the Swiss bank in 2020"
    assert merge_words("Swiss mod_ssl 2020") == "Swiss mod_ssl 2020"


def test_generate_counts_flops_against_exit_disabled():
    model = tiny()

    class Tok:
        pad_id, eos_id, n_special = 0, 3, 6

    trace = ExitTrace(len(model.dec_layers))
    generate(model, [[7, 8, 9], [10, 11]], Tok, delta=0.0, trace=trace)
    assert trace.work["macs"] == trace.work["macs_off"] > 0
    trace = ExitTrace(len(model.dec_layers))
    generate(model, [[7, 8, 9], [10, 11]], Tok, delta=0.0, measure="classifier", trace=trace)  # threshold 0: layer 1
    assert trace.work["macs"] < 0.6 * trace.work["macs_off"]  # the K/V and memory of 2 layers stay


def test_the_trace_holds_the_exits_and_the_model_no_statistics():
    """generate's statistics go to the ExitTrace its caller passes: per row the exit layers and
    off-ramp entropies of the tokens up to its first [EOS], as decode_exit gives them, and the
    multiply-adds; a second call adds to them. The model leaves a decode with the attributes and
    the state it came with, and decodes the same tokens without a trace."""
    from core.batch import pad_stack

    class Tok:
        pad_id, eos_id, n_special = 0, 3, 6

    model, sources = tiny(), [[7, 8, 9], [10, 11], [12, 13, 14, 15]]
    L, T = len(model.dec_layers), model.dec_len
    src, valid = pad_stack([np.array(s + [Tok.eos_id]) for s in sources], Tok.pad_id)
    with torch.no_grad():
        memory = model.encode_source(src, valid)
        work = {}
        decode_exit(model, memory, valid, T, 1e-9, work=work)
        delta = float(work["entropy"][..., 0].median())  # about half the tokens leave at layer 1
        work = {}
        tokens, layers = decode_exit(model, memory, valid, T, delta, work=work)
    assert 0 < int((layers == 1).sum()) < layers.numel()
    ends = [row.index(Tok.eos_id) + 1 if Tok.eos_id in row else T for row in tokens.tolist()]
    counts = sum(torch.bincount(layers[b, :n], minlength=L + 1) for b, n in enumerate(ends))
    attributes, state = set(vars(model)), {k: v.clone() for k, v in model.state_dict().items()}

    trace = ExitTrace(L)
    out = generate(model, sources, Tok, delta=delta, measure="entropy", trace=trace)
    assert torch.equal(trace.counts, counts) and int(trace.counts.sum()) == sum(ends)
    assert len(trace.entropies) == len(sources)
    for b, n in enumerate(ends):
        torch.testing.assert_close(trace.entropies[b], work["entropy"][b, :n], rtol=0, atol=0, equal_nan=True)
    off = dict(queries=[len(sources) * T] * L, ramp=[0] * (L - 1) + [len(sources) * T], measure=[0] * L)
    S = src.shape[1]
    assert trace.work == dict(macs=decoder_macs(model.cfg, T, S, work), macs_off=decoder_macs(model.cfg, T, S, off))
    generate(model, sources, Tok, delta=delta, measure="entropy", trace=trace)
    assert torch.equal(trace.counts, 2 * counts) and len(trace.entropies) == 2 * len(sources)

    assert set(vars(model)) == attributes
    assert not [a for a in dir(model) if a in ("exit_counts", "exit_work", "exit_entropies")]
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert generate(model, sources, Tok, delta=delta, measure="entropy") == out


def test_base_elmer_is_the_papers_6l_6l():
    from core.elmer.model import elmer_depth

    assert elmer_depth("base", 12) == 6 and elmer_depth("small", 4) == 4 and elmer_depth("tiny", 2) == 2
