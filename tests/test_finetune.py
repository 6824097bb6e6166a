"""finetune.py and eval.py end to end on the tiny preset, and their bad-input errors."""

import json
import os
import sys

import pytest
import torch

import eval as evaluate_script
import finetune
from core.checkpoint import read_finetuned
from core.decodings import decoding_plans
from core.evaluation import examples, load_decoder
from core.results import result_names
from conftest import FT, ROOT, read_log


@pytest.mark.parametrize("objective", ["pmlm", "t5"])
def test_summarize_pipeline(objective, pretrained, task_files, tmp_path, capsys):
    out = str(tmp_path / "ft")
    best = finetune.main(
        [
            "--init",
            pretrained[objective],
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--out",
            out,
        ]
        + FT
    )
    log = read_log(out)
    assert [r for r in log if "valid_rougeL" in r], log
    assert best == min(r["valid_loss"] for r in log if "valid_loss" in r)  # best.pt: the lowest validation loss
    ckpt = os.path.join(out, "best.pt")
    rows = evaluate_script.main(
        [ckpt, "--data", task_files["test"], "--beam", "2", "--batch-size", "4", "--latency-samples", "2"]
    )
    text = capsys.readouterr().out
    assert "rougeL" in text
    assert "LEAD-8" in text and "latency_ms" in text
    row = rows[0]
    assert row["arch"] == ("t5" if objective == "t5" else "unilm")
    assert 0 <= row["rougeL"] <= 100 and row["latency_ms"] > 0 and row["samples_per_s"] > 0
    eval_json, outputs_jsonl = result_names(
        ckpt, evaluate_script.get_args([ckpt, "--data", task_files["test"], "--beam", "2"])
    )
    assert os.path.basename(eval_json).startswith("eval-best-test-")  # named for the checkpoint, the file, the beam
    saved = json.load(open(eval_json))
    assert saved["rougeL"] == row["rougeL"]
    # the dtype it ran in, not "auto"; no split with --data; none of the file's examples left out
    assert saved["generation"]["dtype"] in ("float32", "bfloat16") and saved["generation"]["split"] is None
    assert saved["skipped"] == 0
    assert row["search"] == "beam_search"  # auto on the CPU: the eager search
    static = evaluate_script.main(
        [
            ckpt,
            "--data",
            task_files["test"],
            "--beam",
            "2",
            "--batch-size",
            "4",
            "--latency-samples",
            "2",
            "--search",
            "static",
            "--no-lead",
        ]
    )[0]
    assert static["search"] == f"static_beam_{'t5' if objective == 't5' else 'pmlm'}"
    assert static["rougeL"] == row["rougeL"]  # the same tokens (and the same result file: the same name)
    # the fine-tuning names the pretraining step it started from (reproduce/runner.py's staleness)
    assert torch.load(os.path.join(out, "last.pt"), weights_only=True)["init_step"] == 4
    outputs = [json.loads(l) for l in open(outputs_jsonl)]
    assert len(outputs) == 12 and {"prediction", "reference", "source"} <= set(outputs[0])

    if objective == "t5":  # the latency benchmark: the same work counts the same FLOPs, a wider beam more
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import bench_latency

        flags = [ckpt, ckpt, "--data", task_files["test"], "--n", "3", "--repeats", "2"]
        narrow, wide = (
            bench_latency.main(flags + ["--beam", b, "--dtype", d]) for b, d in (("1", "float32"), ("3", "bfloat16"))
        )
        printed = capsys.readouterr().out
        assert "| time ratio |" in printed and "(float32, --dtype float32)" in printed
        assert "(bfloat16, --dtype bfloat16)" in printed
        assert narrow[0]["flops"] > 0 and narrow[1]["flop_ratio"] == 1.0 and wide[0]["flops"] > narrow[0]["flops"]
        assert all(r["ms"] > 0 and r["time_ratio"] > 0 and r["decoding"] for r in narrow + wide)
        assert (narrow[0]["decoding"], wide[0]["decoding"]) == ("greedy", "beam 3")

    # --limit: a seeded sample of the split, the same for every checkpoint, in files of its own
    if objective == "pmlm":
        limited = ["--data", task_files["test"], "--limit", "5", "--beam", "1", "--latency-samples", "1", "--no-lead"]
        evaluate_script.main([ckpt] + limited)
        args = evaluate_script.get_args([ckpt] + limited)
        sample = examples("summarize", args)
        heads = [json.loads(l)["document"] for l in open(task_files["test"])]
        assert len(sample) == 5 and sample.sources != heads[:5] and set(sample.sources) <= set(heads)
        assert sample.sources == examples("summarize", args).sources
        _, limited_outputs = result_names(ckpt, args)
        assert limited_outputs.endswith("-sample5-beam1.jsonl") and limited_outputs != outputs_jsonl
        assert [json.loads(l)["source"] for l in open(limited_outputs)] == sample.sources
        assert len(open(outputs_jsonl).readlines()) == 12  # the full evaluation's files are untouched
        swept = lambda rule: result_names(ckpt, evaluate_script.get_args([ckpt]), gen=dict(exit_rule=rule))[0]  # noqa: E731
        assert swept(("entropy", 0.0)).endswith("-exit-entropy0.json")  # a threshold sweep keeps a file per threshold
        assert swept(("state", 0.99)).endswith("-exit-state0.99.json")
        # a decoding setting away from its default keeps its own files; the defaults' names stay as they were
        named = lambda *flags: result_names(ckpt, evaluate_script.get_args([ckpt, *flags]))[0]  # noqa: E731
        assert named("--beam", "5") == named() and named("--beam", "1") != named()
        assert named("--iterations", "4", "--length-beam", "2").endswith("-lb2-it4.json")
        assert named("--length-penalty", "1.0", "--length-norm", "pow").endswith("-lp1-pow.json")
        assert named("--search", "auto") == named() and named("--search", "static").endswith("-static.json")


@pytest.mark.parametrize("objective", ["pmlm", "t5", "t5-nar"])
def test_classify_pipeline(objective, pretrained, task_files, tmp_path, capsys):
    """A PMLM reads [SOS]; a T5 or T5-NAR checkpoint its encoder's [EOS] (the MLAE paper's "T5
    encoder + task layer", Table 1), or with --cls-vector its first token; eval.py reads the same."""
    out = str(tmp_path / "cls")
    chosen = ["--cls-vector", "first"] if objective == "t5" else []
    finetune.main(
        [
            "--init",
            pretrained[objective],
            "--task",
            "classify",
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--out",
            out,
        ]
        + FT
        + chosen
    )
    reads = "first" if objective in ("pmlm", "t5") else "last"
    saved = torch.load(os.path.join(out, "best.pt"), weights_only=True)
    assert saved["args"]["cls_vector"] == reads
    model = load_decoder(read_finetuned(os.path.join(out, "best.pt")), torch.device("cpu"), torch.float32, 1, {})[0]
    assert model.reads == reads
    rows = evaluate_script.main(
        [os.path.join(out, "best.pt"), "--data", task_files["test"], "--batch-size", "4", "--latency-samples", "2"]
    )
    assert 0 <= rows[0]["accuracy"] <= 100 and 0 <= rows[0]["macro_f1"] <= 100
    assert rows[0]["arch"] == ("unilm" if objective == "pmlm" else objective)
    assert "accuracy" in capsys.readouterr().out
    # per-example outputs beside the row, from which the bootstrap reads the same accuracy
    from reproduce import significance

    ckpt = os.path.join(out, "best.pt")
    outputs = result_names(ckpt, evaluate_script.get_args([ckpt, "--data", task_files["test"]]))[1]
    assert significance.metrics_of(outputs) == ("accuracy",)
    scores, sources = significance.per_example(outputs, "accuracy")
    assert len(scores) == rows[0]["n"] and abs(sum(scores) / len(scores) - rows[0]["accuracy"]) < 1e-9
    assert significance.compare(outputs, outputs, "accuracy") == (0.0, 0.0, 0.0)
    # the majority-class row: the floor of a classifier that ignores its input
    with open(task_files["test"]) as f:
        gold = [json.loads(line)["section"] for line in f if line.strip()]
    top = max(set(gold), key=gold.count)
    assert rows[-1]["model"] == "majority class" and rows[-1]["accuracy"] == 100 * gold.count(top) / len(gold)
    if objective != "pmlm":  # the whole pretrained model loads, the encoder's weights unchanged until trained
        pre = torch.load(pretrained[objective], weights_only=True)["model"]
        state = torch.load(os.path.join(out, "best.pt"), weights_only=True)["model"]
        pre = set(pre) - {"cross_rel_table"}  # T5-NAR's pretraining-only cross-attention bias (core/mlae/nar.py)
        assert pre == {k[len("encoder.") :] for k in state if k.startswith("encoder.")}


def test_t5_classifier_reads_the_encoders_eos():
    """The encoder sees "TEXT [EOS]" as in span-corruption pretraining (no [SOS]); the logits
    are read at [EOS], so they change with the first token (bidirectional) and ignore padding."""
    from core.classify import EncoderClassifier, classify_batch
    from core.config import preset
    from core.model import EncoderDecoder

    class Tok:
        sos_id, eos_id, pad_id = 2, 3, 0

    b = classify_batch([[10, 11, 12], [13, 14, 15, 16, 17]], [0, 1], Tok, 6, sos=False)
    assert b.tokens[0].tolist() == [10, 11, 12, 3, 0, 0] and b.tokens[1].tolist() == [13, 14, 15, 16, 17, 3]
    assert classify_batch([[10, 11, 12]], [0], Tok, 6).tokens[0].tolist() == [2, 10, 11, 12, 3]
    torch.manual_seed(0)
    model = EncoderClassifier(EncoderDecoder(preset("tiny", vocab_size=40, n_dec_layers=1, dropout=0.0)), 3, 0.0).eval()
    y = model(b.tokens, b.valid)
    first = b.tokens.clone()
    first[:, 0] = 20
    assert not torch.allclose(model(first, b.valid)[0], y[0])
    padded = b.tokens.clone()
    padded[0, 4] = 30
    assert torch.equal(model(padded, b.valid)[0], y[0])


def test_finetune_resume_is_exact(pretrained, task_files, tmp_path):
    flags = (
        [
            "--init",
            pretrained["pmlm"],
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--rouge-examples",
            "0",
        ]
        + FT[:-4]
        + ["--log-every", "1", "--dropout", "0.1"]
    )
    flags += ["--device", "cpu"]  # bit for bit on the CPU (tests/test_train.py: CUDA's tolerance)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    finetune.main(flags + ["--out", a])
    finetune.main(flags + ["--out", b, "--stop-after", "5"])
    finetune.main(flags + ["--out", b, "--resume"])
    loss = lambda out: [r["loss"] for r in read_log(out) if "loss" in r]
    assert loss(a) == loss(b)
    wa = torch.load(os.path.join(a, "last.pt"), weights_only=True)["model"]
    wb = torch.load(os.path.join(b, "last.pt"), weights_only=True)["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_more_epochs_by_resume_is_the_same_run(pretrained, task_files, tmp_path):
    """--epochs is a maximum: warmup (--warmup-epochs) and MLAE's masking span (--mask-epochs) are
    set in epochs of their own, so a run given one epoch and then resumed with two follows, step for
    step, the run given two from the start (the runner extends a fine-tuning this way); a checkpoint
    written with --warmup-frac reads as the same warmup in epochs."""
    from core.checkpoint import upgrade_finetune_args

    flags = (
        [
            "--init",
            pretrained["t5"],
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--rouge-examples",
            "0",
            "--mask-schedule",
            "linear",
            "--mask-epochs",
            "1",
            "--warmup-epochs",
            "0.4",
            "--patience",
            "0",
            "--device",
            "cpu",
        ]
        + FT[2:]
        + ["--log-every", "1"]
    )
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    finetune.main(flags + ["--epochs", "2", "--out", a])
    finetune.main(flags + ["--epochs", "1", "--out", b])
    finetune.main(flags + ["--epochs", "2", "--out", b, "--resume"])
    steps = lambda out: [(r["step"], r["loss"], r["lr"]) for r in read_log(out) if "loss" in r]
    assert len(steps(a)) == 10 and steps(a) == steps(b)
    old = upgrade_finetune_args(dict(epochs=3, warmup_frac=0.05))
    assert old == dict(epochs=3, warmup_epochs=0.15, mask_epochs=3, train_share=1.0)


def test_lr_schedules():
    """Warmup, then linear decay to 0 at the last step, or the inverse square root (which does not
    depend on the run's length)."""
    from core.optim import lr_at

    assert lr_at(0, 1.0, 4, 100) == 0.25 and lr_at(3, 1.0, 4, 100) == 1.0
    assert lr_at(99, 1.0, 4, 100) < 0.02 and lr_at(52, 1.0, 4, 100) == 0.5
    for total in (100, 1000):
        assert lr_at(15, 1.0, 4, total, "inverse-sqrt") == 0.5 and lr_at(63, 1.0, 4, total, "inverse-sqrt") == 0.25


def test_early_stop_counts_validations_without_a_new_lowest():
    from core.training import EarlyStop

    e = EarlyStop(2)
    assert e.update(3.0) and not e.update(3.0) and not e.stop and e.update(2.5) and not e.stop
    assert not e.update(2.6) and not e.update(2.7) and e.stop and e.best == 2.5
    never = EarlyStop(0)
    assert [never.update(x) for x in (1, 2, 3, 4)] == [True, False, False, False] and not never.stop


def test_finetune_stops_on_validation(pretrained, task_files, tmp_path, monkeypatch, capsys):
    """Validation every quarter epoch; after --patience validations without a lower loss the run
    ends: best.pt holds the lowest, last.pt says it stopped early, --resume refuses to continue it,
    and the runner counts it done."""
    import finetune as ft_script
    from reproduce import runstate

    losses = iter([2.0, 1.0, 1.5, 1.2, 0.5, 0.4])  # the third and fourth validations: no new lowest
    real = ft_script.evaluate

    def fake(model, batches, loss_fn, d):
        ev = real(model, batches, loss_fn, d)
        return dict(ev, nll=next(losses) * ev["n"])

    monkeypatch.setattr(ft_script, "evaluate", fake)
    out = str(tmp_path / "ft")
    flags = [
        "--init",
        pretrained["pmlm"],
        "--train-data",
        task_files["train"],
        "--valid-data",
        task_files["valid"],
        "--out",
        out,
        "--rouge-examples",
        "0",
        "--valid-every",
        "0.25",
        "--patience",
        "2",
    ] + FT[:-4]
    assert finetune.main(flags + ["--epochs", "3"]) == 1.0
    valid = [r for r in read_log(out) if "valid_loss" in r]
    assert [round(r["valid_loss"], 6) for r in valid] == [2.0, 1.0, 1.5, 1.2]
    last = torch.load(os.path.join(out, "last.pt"), weights_only=True)
    best = torch.load(os.path.join(out, "best.pt"), weights_only=True)
    assert last["stopped_early"] and last["step"] == valid[-1]["step"] < last["args"]["steps"]
    assert best["step"] == valid[1]["step"] and best["best_valid_loss"] == 1.0
    assert "early stop at step" in capsys.readouterr().out
    fails_with(
        capsys, finetune.main, ["--out", out, "--resume", "--epochs", "4"], "stopped early", "nothing to continue"
    )
    run = runstate.BY_NAME["sum-pmlm"]
    assert runstate.progress_of(run, [], dict(epochs=3), str(tmp_path), dict(runs={}))[0] == 0.0
    os.rename(out, str(tmp_path / "sum-pmlm"))
    assert runstate.progress_of(run, [], dict(epochs=3), str(tmp_path), dict(runs={})) == (1.0, None)


def test_a_run_resumed_past_its_patience_stops_where_a_longer_run_stops(
    pretrained, task_files, tmp_path, monkeypatch, capsys
):
    """A run whose patience ran out at its last validation, at --epochs, and is then given more
    epochs (how the runner extends it) stops at that step, as the run given them from the start
    did: no step more, no validation more."""
    import finetune as ft_script

    real = ft_script.evaluate
    runs = {}
    for name, epochs in (("long", ["2"]), ("short", ["0.8", "2"])):  # 0.8: four steps, four validations
        losses = iter([2.0, 1.0, 1.5, 1.2, 0.5, 0.4])  # patience 2 runs out at the fourth validation

        def fake(model, batches, loss_fn, d, losses=losses):
            ev = real(model, batches, loss_fn, d)
            return dict(ev, nll=next(losses) * ev["n"])

        monkeypatch.setattr(ft_script, "evaluate", fake)
        out = str(tmp_path / name)
        flags = [
            "--init",
            pretrained["pmlm"],
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--out",
            out,
            "--rouge-examples",
            "0",
            "--valid-every",
            "0.25",
            "--patience",
            "2",
        ] + FT[2:-4]
        for k, e in enumerate(epochs):
            finetune.main(flags + ["--epochs", e] + (["--resume"] if k else []))
        runs[name] = torch.load(os.path.join(out, "last.pt"), weights_only=True)
        runs[name + "-valid"] = [r["step"] for r in read_log(out) if "valid_loss" in r]
    assert runs["long"]["stopped_early"] and runs["short"]["stopped_early"]
    assert runs["long"]["step"] == runs["short"]["step"] and runs["long-valid"] == runs["short-valid"]
    assert "before this --resume" in capsys.readouterr().out


def test_a_resumed_run_never_writes_a_worse_model_over_best_pt(pretrained, task_files, tmp_path, monkeypatch, capsys):
    """best.pt holds the lowest validation loss across a --resume: the bar is what best.pt records (a
    better run's best.pt copied in stays; a worse one is replaced by the next lower validation), a NaN
    validation is never the lowest, and a best.pt that cannot be read is refused and left as it is."""
    import finetune as ft_script

    real, losses = ft_script.evaluate, iter([])

    def fake(model, batches, loss_fn, d):
        ev = real(model, batches, loss_fn, d)
        return dict(ev, nll=next(losses) * ev["n"])

    monkeypatch.setattr(ft_script, "evaluate", fake)
    out = str(tmp_path / "ft")
    best_pt = os.path.join(out, "best.pt")
    flags = [
        "--init",
        pretrained["pmlm"],
        "--train-data",
        task_files["train"],
        "--valid-data",
        task_files["valid"],
        "--out",
        out,
        "--rouge-examples",
        "0",
        "--valid-every",
        "0.25",
        "--patience",
        "0",
    ] + FT[2:-4]

    def run(epochs, values, resume=True):
        nonlocal losses
        losses = iter(values)
        return finetune.main(flags + ["--epochs", epochs] + (["--resume"] if resume else []))

    def record(loss):  # best.pt as another run's, recording `loss`
        state = torch.load(best_pt, weights_only=True)
        torch.save(dict(state, best_valid_loss=loss), best_pt)
        return open(best_pt, "rb").read()

    run("0.8", [2.0, 1.0, float("nan"), 1.5], resume=False)  # four validations
    assert torch.load(best_pt, weights_only=True)["best_valid_loss"] == 1.0
    better = record(0.8)
    assert run("1.6", [0.9, 0.85, 0.95, 0.9]) == 0.8  # each below last.pt's 1.0, none below best.pt's 0.8
    assert open(best_pt, "rb").read() == better
    record(1.2)  # a worse best.pt: the next validation under 1.2 replaces it
    run("2.4", [1.1, float("nan"), 1.15, 1.3])
    assert torch.load(best_pt, weights_only=True)["best_valid_loss"] == 1.1
    with open(best_pt, "wb") as f:
        f.write(b"not a checkpoint")
    fails_with(capsys, finetune.main, ["--out", out, "--resume", "--epochs", "3.2"], best_pt, "cannot be read")
    assert open(best_pt, "rb").read() == b"not a checkpoint"


# -----------------------------------------------------------------------------
# --text: a typed document's output, the evaluation's for the same document

# the decoding flags each kind is asked with: away from their defaults, so that they must reach it
TEXT_FLAGS = dict(
    unilm=["--beam", "2"],
    t5=["--beam", "1", "--no-repeat-ngram", "0"],
    nar=["--iterations", "2", "--length-beam", "2"],
    elmer=["--exit-entropy", "inf"],
    classify=[],
)


@pytest.mark.parametrize("kind", list(TEXT_FLAGS))
def test_text_prints_what_the_evaluation_predicts(kind, finetuned, task_files, monkeypatch, capsys):
    """One document given, or one per line of stdin: each output alone on its line, the evaluation's
    output for that document under the same decoding flags."""
    import io

    ckpt, flags = finetuned[kind], TEXT_FLAGS[kind] + ["--batch-size", "1"]
    data = ["--data", task_files["test"], "--limit", "6"]
    evaluate_script.main([ckpt, "--latency-samples", "1", "--no-lead"] + data + flags)
    args = evaluate_script.get_args([ckpt] + data + flags)
    gen = decoding_plans(args, [read_finetuned(ckpt)])[ckpt][0]  # the settings the evaluation decoded with
    outputs = result_names(ckpt, args, "classify" if kind == "classify" else "summarize", gen)[1]
    rows = [json.loads(line) for line in open(outputs)]
    docs, expected = [r["source"] for r in rows], [r["prediction"] for r in rows]
    assert len(set(expected)) > 1, expected  # outputs that depend on the document
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(d + "\n" for d in docs)))
    assert evaluate_script.main([ckpt, "--text", "-"] + flags) == expected
    printed = capsys.readouterr()
    assert printed.out.splitlines() == [" ".join(e.split()) for e in expected] and printed.err == ""
    assert evaluate_script.main([ckpt, "--text", docs[3]] + flags) == [expected[3]]
    assert capsys.readouterr().out == " ".join(expected[3].split()) + "\n"


def test_text_refuses_what_it_cannot_answer(finetuned, pretrained, task_files, monkeypatch, capsys):
    import io

    unilm, elmer = finetuned["unilm"], finetuned["elmer"]
    fails_with(capsys, evaluate_script.main, [pretrained["pmlm"], "--text", "a document"], "pretrain/pmlm")
    fails_with(capsys, evaluate_script.main, [unilm, "--text", " "], "--text is empty")
    fails_with(
        capsys, evaluate_script.main, [unilm, "--text", "a", "--data", task_files["test"]], "--data", "without --text"
    )
    fails_with(capsys, evaluate_script.main, [unilm, elmer, "--text", "a"], "one checkpoint, not 2")
    fails_with(capsys, evaluate_script.main, [elmer, "--text", "a", "--exit-entropy", "0.5,1"], "a sweep of 2 settings")
    monkeypatch.setattr(sys, "stdin", io.StringIO("a document\n\nanother\n"))
    fails_with(capsys, evaluate_script.main, [unilm, "--text", "-"], "line 2 of stdin is empty")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    fails_with(capsys, evaluate_script.main, [unilm, "--text", "-"], "no document")


# -----------------------------------------------------------------------------
# bad input: one clear line, exit status 2, no traceback


def fails_with(capsys, main, argv, *needles):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: ")
    for n in needles:
        assert n in err, err


def test_nar_flags_where_they_do_nothing(capsys, pretrained, task_files, tmp_path):
    base = ["--train-data", task_files["train"], "--valid-data", task_files["valid"], "--out", str(tmp_path / "o")]
    fails_with(capsys, finetune.main, base + ["--init", pretrained["t5-nar"]], "--nar")
    fails_with(
        capsys, finetune.main, base + ["--init", pretrained["t5"], "--adaptive-stop"], "--adaptive-stop", "--nar"
    )
    fails_with(
        capsys, finetune.main, base + ["--init", pretrained["t5"], "--dec-layers", "2"], "--dec-layers", "from scratch"
    )
    fails_with(capsys, finetune.main, base + ["--init", "none", "--arch", "t5", "--enc-layers", "0"], "--enc-layers 0")


def test_cls_vector_is_refused_outside_classification(capsys, pretrained, task_files, tmp_path):
    base = ["--train-data", task_files["train"], "--valid-data", task_files["valid"], "--out", str(tmp_path / "o")]
    fails_with(
        capsys,
        finetune.main,
        base + ["--init", pretrained["t5"], "--cls-vector", "first"],
        "--cls-vector",
        "--task classify",
    )


def test_eval_needs_a_finetuned_checkpoint(capsys, pretrained):
    fails_with(capsys, evaluate_script.main, [pretrained["pmlm"]], pretrained["pmlm"], "pretrain/pmlm")


def test_eval_adaptive_stop_needs_a_nar_checkpoint(capsys, pretrained, task_files, tmp_path):
    out = str(tmp_path / "ft")
    finetune.main(
        [
            "--init",
            pretrained["t5"],
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--out",
            out,
        ]
        + FT
        + ["--epochs", "0.2", "--rouge-examples", "0"]
    )
    fails_with(
        capsys, evaluate_script.main, [os.path.join(out, "best.pt"), "--adaptive-stop"], "--adaptive-stop", "NAR"
    )


def test_jsonl_without_the_named_fields(capsys, pretrained, task_files, tmp_path):
    fails_with(
        capsys,
        finetune.main,
        [
            "--init",
            pretrained["pmlm"],
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--src-field",
            "article",
            "--out",
            str(tmp_path / "o"),
        ],
        "'article'",
        task_files["train"],
    )


def test_empty_split(capsys, pretrained, task_files, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"document": "", "summary": ""}\n')
    fails_with(
        capsys,
        finetune.main,
        [
            "--init",
            pretrained["pmlm"],
            "--train-data",
            task_files["train"],
            "--valid-data",
            str(empty),
            "--out",
            str(tmp_path / "o"),
        ],
        str(empty),
        "no example",
    )


def test_missing_init_checkpoint(capsys, tmp_path):
    missing = str(tmp_path / "none.pt")
    fails_with(capsys, finetune.main, ["--init", missing, "--out", str(tmp_path / "o")], "not found", missing)


@pytest.mark.parametrize("arch", ["unilm", "t5"])
def test_no_pretraining(arch, task_files, tmp_path):
    """--init none: the ablation starts from random weights, with a tokenizer of the training file."""
    out = str(tmp_path / "ft")
    finetune.main(
        [
            "--init",
            "none",
            "--arch",
            arch,
            "--model",
            "tiny",
            "--vocab-size",
            "600",
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--out",
            out,
        ]
        + FT
    )
    state = torch.load(os.path.join(out, "best.pt"), weights_only=True)
    assert state["arch"] == arch and state["model_config"]["d_model"] == 64
    assert state["model_config"]["vocab_size"] == 600
    assert (state["model_config"]["n_dec_layers"] > 0) == (arch == "t5")
    if arch == "t5":  # CMLM / T5 from scratch at MLAE's depths (tiny: 2L-1L)
        assert (state["model_config"]["n_layers"], state["model_config"]["n_dec_layers"]) == (2, 1)
    assert [r for r in read_log(out) if "valid_rougeL" in r]


def test_a_packed_checkpoint_starts_a_finetuning_on_a_share_of_the_pairs(capsys, pretrained, task_files, tmp_path):
    """A packed pretraining (weights only, bf16, xz: what the repository keeps) starts a fine-tuning
    as its checkpoint would; --train-share keeps a fixed, evenly spread share of the training pairs;
    a packed fine-tuned checkpoint is evaluated as any other."""
    from core import checkpoint

    packed = str(tmp_path / "pmlm.pt.xz")
    checkpoint.save_packed(packed, torch.load(pretrained["pmlm"], weights_only=True))
    out = str(tmp_path / "ft")
    base = ["--init", packed, "--train-data", task_files["train"], "--valid-data", task_files["valid"], "--out", out]
    fails_with(capsys, finetune.main, base + ["--train-share", "0"], "--train-share 0", "(0, 1]")
    capsys.readouterr()
    finetune.main(base + FT + ["--epochs", "0.5", "--rouge-examples", "0", "--train-share", "0.5"])
    assert "(a share of 0.5): 80 train, 24 valid examples" in capsys.readouterr().out
    tuned = str(tmp_path / "summarize.pt.xz")
    checkpoint.save_packed(tuned, torch.load(os.path.join(out, "best.pt"), weights_only=True))
    rows = evaluate_script.main([tuned, "--data", task_files["test"], "--beam", "1", "--latency-samples", "1"])
    assert rows[0]["model"] == tuned and rows[0]["n"] == 12
    assert [f for f in os.listdir(tmp_path) if f.startswith("eval-")][0].startswith("eval-summarize-test-")


def test_a_nar_fine_tuning_keeps_the_cross_table_when_asked(capsys, pretrained, task_files, tmp_path):
    """--cross-anchor proportional keeps T5-NAR's cross-attention table through fine-tuning, the
    checkpoint records it, and eval.py decodes with it; the flag needs --nar."""
    out = str(tmp_path / "ft")
    base = [
        "--init",
        pretrained["t5-nar"],
        "--train-data",
        task_files["train"],
        "--valid-data",
        task_files["valid"],
        "--out",
        out,
    ]
    fails_with(capsys, finetune.main, base + ["--cross-anchor", "proportional"], "--cross-anchor", "--nar")
    finetune.main(base + FT + ["--nar", "--cross-anchor", "proportional", "--epochs", "0.2", "--rouge-examples", "2"])
    state = torch.load(os.path.join(out, "best.pt"), weights_only=True)
    assert state["model_config"]["cross_anchor"] == "proportional" and "cross_rel_table" in state["model"]
    rows = evaluate_script.main([os.path.join(out, "best.pt"), "--data", task_files["test"], "--latency-samples", "1"])
    assert rows[0]["n"] == 12
