"""Nothing lost, every bad input a clear error: a case table per script (one `error:` line, exit
status 2, every file saved before byte-identical afterwards), the last good checkpoint surviving a
NaN loss, and a checkpoint at the current step after SIGINT."""

import os
import signal
import subprocess
import sys

import pytest
import torch

import eval as evaluate_script
import finetune
from core.results import result_names
import train
from conftest import ROOT, TINY
from core.data import read_texts

FT = [
    "--epochs",
    "1",
    "--batch",
    "32",
    "--micro-batch",
    "16",
    "--max-src",
    "32",
    "--max-tgt",
    "16",
    "--rouge-examples",
    "0",
    "--valid-examples",
    "16",
]


@pytest.fixture(scope="module")
def world(text_file, tmp_path_factory):
    """A finished tiny pretraining run, a fine-tuned run from it, and small data files."""
    root = tmp_path_factory.mktemp("safety")
    w = {"root": root, "text": text_file}
    w["run"] = str(root / "run")
    train.main(["--data", text_file, "--steps", "2", "--out", w["run"]] + TINY)
    lines = {
        "train": [
            '{"document": "a b c %d", "summary": "s %d", "section": "%s"}' % (i, i, "xy"[i % 2]) for i in range(40)
        ],
        "valid": ['{"document": "d e %d", "summary": "t %d", "section": "%s"}' % (i, i, "xy"[i % 2]) for i in range(8)],
        "oneclass": ['{"document": "a b %d", "summary": "s", "section": "x"}' % i for i in range(8)],
        "unseen": ['{"document": "d %d", "summary": "t", "section": "zz"}' % i for i in range(8)],
        "null": ['{"text": "fine words"}', '{"text": null}'],
        "number": ['{"text": "fine words"}', '{"text": 12}'],
        "nullsrc": ['{"document": null, "summary": "s", "section": "x"}'],
    }
    for name, ls in lines.items():
        (root / f"{name}.jsonl").write_text("\n".join(ls) + "\n")
        w[name] = str(root / f"{name}.jsonl")
    (root / "garbage.model").write_bytes(b"this is not a sentencepiece model")
    (root / "afile").write_text("x")
    w["ft"] = str(root / "ft")
    finetune.main(
        [
            "--init",
            os.path.join(w["run"], "last.pt"),
            "--train-data",
            w["train"],
            "--valid-data",
            w["valid"],
            "--out",
            w["ft"],
        ]
        + FT
    )
    return w


def snapshot(root):
    return {os.path.join(d, f): open(os.path.join(d, f), "rb").read() for d, _, fs in os.walk(root) for f in fs}


def fails(capsys, main, argv, needles, root):
    before = snapshot(root)
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("\r")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in err, err
    assert snapshot(root) == before, "a file saved before was changed"


# (name, script, argv with {placeholders}, words the error must contain)
CASES = [
    ("steps-0", "train", "--steps 0 --out {root}/new", ["--steps 0"]),
    ("steps-negative", "train", "--steps -3 --out {root}/new", ["--steps -3"]),
    ("micro-batch-0", "train", "--micro-batch 0 --out {root}/new", ["--micro-batch 0"]),
    ("batch-tokens-0", "train", "--batch-tokens 0 --out {root}/new", ["--batch-tokens 0"]),
    ("lr-0", "train", "--lr 0 --out {root}/new", ["--lr 0"]),
    ("lr-nan", "train", "--lr nan --out {root}/new", ["--lr nan"]),
    ("dropout-1", "train", "--dropout 1 --out {root}/new", ["--dropout 1", "[0, 1)"]),
    ("dropout-negative", "train", "--dropout -0.1 --out {root}/new", ["--dropout -0.1"]),
    ("save-every-0", "train", "--save-every 0 --out {root}/new", ["--save-every 0"]),
    ("eval-every-0", "train", "--eval-every 0 --out {root}/new", ["--eval-every 0"]),
    ("log-every-negative", "train", "--log-every -1 --out {root}/new", ["--log-every -1"]),
    (
        "tokenizer-garbage",
        "train",
        "--data {text} --tokenizer {root}/garbage.model --out {root}/new",
        ["garbage.model", "not a SentencePiece model"],
    ),
    ("tokenizer-missing", "train", "--data {text} --tokenizer {root}/nope.model --out {root}/new", ["not found"]),
    ("null-text", "train", "--data {null} --out {root}/new", ["record 2", "'text'", "null"]),
    ("number-text", "train", "--data {number} --out {root}/new", ["record 2", "12", "not a string"]),
    ("out-is-a-file", "train", "--data {text} --out {root}/afile", ["afile", "is a file"]),
    (
        "rerun-existing-out",
        "train",
        "--data {text} --steps 2 --out {run}",
        ["already holds a run", "--resume", "--overwrite"],
    ),
    (
        "resume-changed-model",
        "train",
        "--data {text} --steps 4 --out {run} --resume --model small --seq-len 64",
        ["--model small", "--seq-len 64", "tiny"],
    ),
    ("resume-no-more-steps", "train", "--data {text} --steps 2 --out {run} --resume", ["already at step 2", "--steps"]),
    ("resume-stop-after-behind", "train", "--steps 9 --stop-after 1 --out {run} --resume", ["--stop-after 1", "(2)"]),
    ("ft-label-smoothing-1", "finetune", "--label-smoothing 1 --out {root}/new", ["--label-smoothing 1"]),
    ("ft-epochs-0", "finetune", "--epochs 0 --out {root}/new", ["--epochs 0"]),
    ("ft-batch-0", "finetune", "--batch 0 --out {root}/new", ["--batch 0"]),
    ("ft-warmup-epochs-neg", "finetune", "--warmup-epochs -1 --out {root}/new", ["--warmup-epochs -1"]),
    ("ft-mask-epochs-0", "finetune", "--mask-epochs 0 --out {root}/new", ["--mask-epochs 0"]),
    (
        "ft-one-class",
        "finetune",
        "--init {run}/last.pt --task classify --train-data {oneclass} --valid-data {oneclass} --out {root}/new",
        ["only one label", "'x'"],
    ),
    (
        "ft-null-source",
        "finetune",
        "--init {run}/last.pt --train-data {nullsrc} --valid-data {valid} --out {root}/new",
        ["'document'", "null"],
    ),
    (
        "ft-rerun-existing-out",
        "finetune",
        "--init {run}/last.pt --train-data {train} --valid-data {valid} --out {ft}",
        ["already holds a run"],
    ),
    (
        "ft-resume-changed-data",
        "finetune",
        "--train-data {valid} --valid-data {valid} --out {ft} --resume",
        ["--train-data", "the run has"],
    ),
    ("eval-limit-0", "eval", "{ft}/best.pt --limit 0", ["--limit 0"]),
    ("eval-beam-0", "eval", "{ft}/best.pt --beam 0", ["--beam 0"]),
    ("eval-min-above-max", "eval", "{ft}/best.pt --min-len 9 --max-len 4", ["--min-len 9", "--max-len 4"]),
    ("eval-batch-size-0", "eval", "{ft}/best.pt --batch-size 0", ["--batch-size 0"]),
]
if not torch.cuda.is_available():
    CASES.append(("device-cuda-without-gpu", "train", "--device cuda --out {root}/new", ["--device cuda", "no CUDA"]))
SCRIPTS = {"train": train.main, "finetune": finetune.main, "eval": evaluate_script.main}


@pytest.mark.parametrize("name,script,argv,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, script, argv, needles, world, capsys):
    fresh = "--resume" not in argv
    extra = TINY if script == "train" and fresh else FT if script == "finetune" and fresh else []
    argv = extra + argv.format(**world).split()  # the case's flags win over the tiny preset's
    fails(capsys, SCRIPTS[script], argv, needles, world["root"])


def test_trailing_blank_line_is_no_paragraph_break(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("first document\nsecond document\nthird one\n\n")
    assert read_texts(str(f)) == ["first document", "second document", "third one"]
    f.write_text("para one\nstill one\n\npara two\n")
    assert read_texts(str(f)) == ["para one still one", "para two"]


def test_overwrite_replaces_the_run(world, tmp_path):
    out = str(tmp_path / "o")
    flags = ["--data", world["text"], "--steps", "1"] + TINY
    train.main(flags + ["--out", out])
    train.main(flags + ["--out", out, "--overwrite"])
    assert len(open(os.path.join(out, "log.jsonl")).readlines()) == 2  # one step line and one eval, not mixed


# -----------------------------------------------------------------------------
# NaN: the step is not applied (on the device), the run stops at the next logging point and saves


def test_nan_keeps_the_last_good_checkpoint(world, tmp_path, monkeypatch, capsys):
    from core.objectives import OBJECTIVES

    steps, real_lr, pmlm = [], train.lr_at, OBJECTIVES["pmlm"]

    def lr_at(step, *a):  # the loop asks for each step's learning rate first: which step runs
        steps.append(step)
        return real_lr(step, *a)

    def loss(args):  # step 4's training losses (not the held-out ones) are NaN
        real = pmlm.loss(args)
        return lambda m, b: {
            k: (v * float("nan") if k == "loss" and m.training and steps[-1] == 4 else v) for k, v in real(m, b).items()
        }

    monkeypatch.setattr(train, "lr_at", lr_at)
    monkeypatch.setitem(OBJECTIVES, "pmlm", pmlm._replace(loss=loss))
    out = str(tmp_path / "nan")
    with pytest.raises(SystemExit) as e:
        train.main(["--data", world["text"], "--steps", "8", "--out", out] + TINY[:-2] + ["--save-every", "2"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "non-finite at step 5" in err and os.path.join(out, "last.pt") in err and "not applied" in err, err
    state = torch.load(os.path.join(out, "last.pt"), weights_only=True)
    assert state["step"] == 5  # --log-every 1: found at once; step 5 left the weights as step 4 did
    assert all(torch.isfinite(v).all() for v in state["model"].values())


# -----------------------------------------------------------------------------
# SIGINT: a checkpoint at the current step, one line, a non-zero status


def default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_saves_the_current_step(world, tmp_path):
    out = str(tmp_path / "sig")
    flags = ["--data", world["text"], "--steps", "100000", "--out", out] + TINY[:-2] + ["--save-every", "100000"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # the child gets the default SIGINT handler: a suite started from a background shell (or nohup)
    # runs with SIGINT ignored, which the child would inherit and rightly keep (guards.StopSignals)
    p = subprocess.Popen(
        [sys.executable, "train.py"] + flags,
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
    )
    seen = []
    for line in p.stdout:  # wait until a few steps are done
        seen.append(line)
        if line.startswith("step ") and int(line.split()[1].split("/")[0]) >= 3:
            break
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGINT, err
    err_lines = [l for l in err.splitlines() if l.strip()]
    assert len(err_lines) == 1 and "SIGINT" in err_lines[0], err
    step = torch.load(os.path.join(out, "last.pt"), weights_only=True)["step"]
    last_logged = max(int(l.split()[1].split("/")[0]) for l in seen + rest.splitlines() if l.startswith("step "))
    assert step >= 3 and step >= last_logged and f"after step {step}" in err_lines[0]


# -----------------------------------------------------------------------------
# eval.py: results named per checkpoint and data set; a directory stands for its runs


def test_eval_names_results_and_reads_directories(world, tmp_path, capsys):
    import shutil

    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    shutil.copy(os.path.join(world["ft"], "best.pt"), run / "best.pt")
    shutil.copy(os.path.join(world["ft"], "best.pt"), run / "other.pt")
    common = [
        "--data",
        world["valid"],
        "--limit",
        "3",
        "--beam",
        "1",
        "--batch-size",
        "4",
        "--latency-samples",
        "1",
        "--no-lead",
    ]
    evaluate_script.main([str(run / "best.pt"), str(run / "other.pt")] + common)
    rows = evaluate_script.main([str(tmp_path / "runs")] + common)  # the directory: a/best.pt only
    assert [r["model"] for r in rows] == [str(run / "best.pt")]
    assert str(run / "best.pt") in capsys.readouterr().err
    names = sorted(os.listdir(run))
    evals = [n for n in names if n.startswith("eval-")]
    assert len(evals) == 2 and any(n.startswith("eval-other-valid-") for n in evals), names
    assert all(n.endswith("-sample3-beam1.json") for n in evals)
    assert len([n for n in names if n.startswith("outputs-")]) == 2


def test_unseen_validation_labels_are_said(capsys):
    from core.tasks import Labels

    labels = Labels.from_targets(["a", "b", "a"], ["a", "zz", "zz"], "train.jsonl")
    assert labels.names == ["a", "b"] and labels.ids(["zz"]) == [-1]
    out = capsys.readouterr().out
    assert "2 validation examples" in out and "'zz'" in out and "train.jsonl" in out


def test_long_line_reaches_the_tokenizer_trainer():
    """SentencePiece drops sentences past 65536 bytes without a word: a 100k-character line is fed
    to it in pieces (and stays one document for pretraining)."""
    from core.tokenizer import training_sentences

    words = [f"w{i}" for i in range(30000)]
    pieces = list(training_sentences([" ".join(words), "short one"]))
    assert max(len(p) for p in pieces) <= 4096 and len(pieces) > 20
    assert " ".join(pieces).split() == words + ["short", "one"]


def test_finetune_extends_with_more_epochs(world, tmp_path):
    import shutil

    out = str(tmp_path / "ft")
    shutil.copytree(world["ft"], out)
    first = torch.load(os.path.join(out, "last.pt"), weights_only=True)
    best_before = open(os.path.join(out, "best.pt"), "rb").read()
    finetune.main(["--out", out, "--resume", "--epochs", "2"])
    last = torch.load(os.path.join(out, "last.pt"), weights_only=True)
    assert last["step"] == 2 * first["step"] and last["args"]["epochs"] == 2
    best = torch.load(os.path.join(out, "best.pt"), weights_only=True)["best_valid_loss"]
    assert best <= first["best_valid_loss"]  # best.pt is replaced only by a lower validation loss
    if best == first["best_valid_loss"]:
        assert open(os.path.join(out, "best.pt"), "rb").read() == best_before


def test_torchrun_bad_data_says_the_error_first(tmp_path):
    """Under torchrun the user's first line is the one `error:` line (rank 0's; the other ranks,
    which meet the same error, are stopped by torchrun before they repeat it). Each worker exits
    with status 2; torchrun itself reports any failed worker with status 1 and its own summary."""
    missing = str(tmp_path / "nope.txt")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "train.py",
            "--data",
            missing,
            "--out",
            str(tmp_path / "o"),
        ]
        + TINY,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode != 0 and lines[0] == f"error: data file not found: {missing}", r.stderr[:2000]
    assert sum(l.startswith("error: ") for l in lines) == 1 and "exitcode  : 2" in r.stderr


# -----------------------------------------------------------------------------
# eval.py's records say what was evaluated, where, and how


def test_eval_records_what_it_evaluated(world, capsys):
    """--limit at or past the data's size evaluates all of it, the report's head gives the n evaluated
    and says the limit was past it, and neither the file names nor the report call that a sample;
    the JSON names the device the latency was measured on, not 'auto'; a classifier's files carry no
    decoding settings."""
    import glob
    import json

    ck = os.path.join(world["ft"], "best.pt")
    evaluate_script.main(
        [ck, "--data", world["valid"], "--limit", "100", "--beam", "2", "--latency-samples", "1", "--no-lead"]
    )
    out = capsys.readouterr().out
    assert "all of them are evaluated" in out and "a sample of" not in out
    assert "8 examples (all of them; --limit 100 is past them)" in out  # the n evaluated, in the report's head
    names = glob.glob(os.path.join(world["ft"], "eval-best-valid-*.json"))
    assert names and not any("sample" in n for n in names), names
    saved = json.load(open(names[0]))
    assert saved["n"] == 8 and saved["generation"]["device"] == "cpu"
    # the LEAD baselines' outputs beside the summarizer's, so that "beats LEAD" is a paired interval
    evaluate_script.main([ck, "--data", world["valid"], "--beam", "2", "--latency-samples", "1"])
    from reproduce import significance

    lead = glob.glob(os.path.join(world["ft"], "outputs-LEAD-8-valid-*.jsonl"))
    model = [p for p in glob.glob(os.path.join(world["ft"], "outputs-best-valid-*beam2.jsonl"))]
    assert lead and model, os.listdir(world["ft"])
    mean, low, high = significance.compare(model[0], lead[0], "rougeL")
    assert low <= mean <= high
    args = evaluate_script.get_args([ck, "--beam", "2"])
    assert "-beam2" in result_names(ck, args)[0]
    assert "-beam" not in result_names(ck, args, "classify")[0]


def test_elmer_exit_uses_the_checkpoints_measure_and_its_classifier():
    """A threshold alone keeps the measure the checkpoint was fine-tuned with; a measure whose
    weights the checkpoint lacks is refused."""
    from core.errors import UserError
    from core.elmer.exit_measures import resolve_exit

    state = dict(elmer=dict(exit_measure="state", exit_threshold=0.99), model={"exit_clf.weight": torch.zeros(1)})
    assert resolve_exit((None, 0.95), state, "ck") == ("state", 0.95)
    assert resolve_exit((None, None), state, "ck") == ("state", 0.99)
    assert resolve_exit(("entropy", None), state, "ck") == ("entropy", 0.5)
    with pytest.raises(UserError, match="must be in"):
        resolve_exit((None, 2.0), state, "ck")  # a cosine above 1, for the state measure
    old = dict(elmer=dict(exit_measure="entropy"), model={})
    with pytest.raises(UserError, match="holds no exit classifier"):
        resolve_exit(("classifier", 0.9), old, "ck")
    args = evaluate_script.get_args(["ck.pt", "--exit-threshold", "0.95"])
    gen = dict(exit_rule=resolve_exit((None, 0.95), state, "ck"))  # the row's settings (core/decodings.py)
    assert "-exit-state0.95" in result_names("ck.pt", args, gen=gen)[0]
