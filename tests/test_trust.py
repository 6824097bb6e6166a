"""Trust, round 4: the reproduction runner never shows a stale result as current, compares what
changes a result, refuses bad input in one line (no traceback), and significance.py refuses files
it cannot pair."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import plan  # noqa: E402
import report  # noqa: E402
import reproduce  # noqa: E402
import runstate  # noqa: E402
import significance  # noqa: E402


def resolved_for(out):
    args = reproduce.get_args(["--budget", "tiny", "--out", out])
    fields = dict(reproduce.budget_fields(args), budget="tiny")
    return args, fields, {r.name: reproduce.resolve(r, fields, out) for r in plan.PLAN}


def fake_ckpt(path, **fields):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(fields, path)


# -----------------------------------------------------------------------------
# 1. a result names the checkpoint it came from, and one whose input changed is stale

def test_an_extended_pretraining_makes_its_fine_tuning_and_evaluation_stale(tmp_path):
    out = str(tmp_path / "r")
    args, fields, resolved = resolved_for(out)
    fake_ckpt(os.path.join(out, "pre-pmlm", "last.pt"), step=4, args={})
    with open(os.path.join(out, "pre-pmlm", "log.jsonl"), "w") as f:
        f.write(json.dumps(dict(step=4, valid_ae_loss=5.0, unigram_entropy=6.0)) + "\n")
    fake_ckpt(os.path.join(out, "sum-pmlm", "last.pt"), step=10, args=dict(epochs=1, steps=10), init_step=4)
    fake_ckpt(os.path.join(out, "sum-pmlm", "best.pt"), step=10)
    res = os.path.join(out, "sum-pmlm", "eval-best-test.json")
    with open(res, "w") as f:
        json.dump(dict(rouge1=30.0, rouge2=10.0, rougeL=28.0), f)
    ev_argv = resolved["eval-sum-pmlm"][0]
    state = dict(runs={"eval-sum-pmlm": dict(command=runstate.command(plan.BY_NAME["eval-sum-pmlm"], ev_argv),
                                            files=[res], status="done")})
    ft, ev = plan.BY_NAME["sum-pmlm"], plan.BY_NAME["eval-sum-pmlm"]
    assert runstate.progress_of(ft, resolved["sum-pmlm"][0], fields, out, state, resolved)[0] == 1.0
    assert runstate.stale_reason(ft, resolved, out) is None
    text = open(report.write(args, fields, dict(state, unavailable={}), resolved)).read()
    assert "pre-pmlm step 4" in text and "STALE" not in text
    # a later sitting extends the pretraining to step 6
    fake_ckpt(os.path.join(out, "pre-pmlm", "last.pt"), step=6, args={})
    assert runstate.progress_of(ft, resolved["sum-pmlm"][0], fields, out, state, resolved) == (0.0, None)
    why = runstate.stale_reason(ft, resolved, out)
    assert "step 4" in why and "step 6" in why and runstate.stale_reason(ev, resolved, out) == why
    text = open(report.write(args, fields, dict(state, unavailable={}), resolved)).read()
    row = next(l for l in text.splitlines() if l.startswith("| sum-pmlm |"))
    assert "STALE" in row and "28.00" not in row
    # a fine-tuning written before runs recorded their pretraining step: stale when that is newer
    fake_ckpt(os.path.join(out, "sum-pmlm", "last.pt"), step=10, args=dict(epochs=1, steps=10))
    os.utime(os.path.join(out, "sum-pmlm", "last.pt"), (1, 1))
    assert "not recorded" in runstate.stale_reason(ft, resolved, out)


def test_the_listing_says_what_is_stale(tmp_path, capsys):
    out = str(tmp_path / "r")
    _, _, resolved = resolved_for(out)
    fake_ckpt(os.path.join(out, "pre-pmlm", "last.pt"), step=8, args={})
    fake_ckpt(os.path.join(out, "sum-pmlm", "last.pt"), step=10, args=dict(epochs=1, steps=10), init_step=4)
    assert reproduce.main(["--budget", "tiny", "--out", out, "--dry-run", "--only", "^sum-pmlm$"]) == 0
    text = capsys.readouterr().out
    assert "sum-pmlm" in text and "stale (fine-tuned from pre-pmlm at step 4, which is now at step 8)" in text


def test_finetune_records_the_step_it_started_from(tmp_path, text_file):
    import finetune
    import train
    from conftest import TINY, write_task_files
    pre = str(tmp_path / "pre")
    train.main(TINY + ["--steps", "3", "--data", text_file, "--out", pre, "--eval-every", "100"])
    paths = write_task_files(tmp_path, dict(train=16, valid=4))
    ft = str(tmp_path / "ft")
    finetune.main(["--init", os.path.join(pre, "last.pt"), "--train-data", paths["train"], "--valid-data", paths["valid"],
                   "--out", ft, "--epochs", "1", "--batch", "8", "--micro-batch", "8", "--rouge-examples", "0",
                   "--max-src", "24", "--max-tgt", "8", "--dtype", "float32"])
    assert torch.load(os.path.join(ft, "last.pt"), weights_only=True)["init_step"] == 3


# -----------------------------------------------------------------------------
# 2. what changes a result is compared, normalised

def test_paths_spelled_otherwise_and_step_tied_intervals_change_nothing(tmp_path):
    a = "python train.py --objective pmlm --steps 4 --eval-every 4 --data x/../x/data/pretrain.txt --out ./r/pre-pmlm"
    b = f"python train.py --objective pmlm --steps 10 --eval-every 10 --data x/data/pretrain.txt --out {os.path.abspath('r/pre-pmlm')}"
    assert runstate.what_it_ran(a) == runstate.what_it_ran(b)
    assert runstate.what_it_ran(a) != runstate.what_it_ran(a.replace("pmlm --steps", "mlm --steps"))


# -----------------------------------------------------------------------------
# 3 and 4. bad input: one line, exit 2, nothing created or overwritten

@pytest.mark.parametrize("argv,words", [
    (["--only", "(unclosed"], "not a regular expression"), (["--skip", "*x"], "not a regular expression"),
    (["--dtype", "fp8"], "--dtype"), (["--steps", "0"], "--steps 0"), (["--permutations", "0"], "--permutations"),
    (["--epochs", "-1"], "--epochs"), (["--limit", "0"], "--limit"), (["--jobs", "1000"], "--jobs 1000")])
def test_arguments_refused(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        reproduce.get_args(["--budget", "tiny"] + argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_limit_reaches_a_budget_that_evaluates_everything():
    args = reproduce.get_args(["--budget", "gpu", "--limit", "50"])
    assert "--limit 50" in reproduce.budget_fields(args)["eval"]


def test_out_that_is_a_file_or_a_broken_state_json_is_refused_and_kept(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("mine")
    assert reproduce.main(["--budget", "tiny", "--out", str(f), "--dry-run"]) == 2
    assert "is a file" in capsys.readouterr().err and f.read_text() == "mine"
    for bad in ("", "garbage{", '{"runs": []}', '{"runs": {"pre-pmlm": {"seconds": "long"}}}', "[1, 2]"):
        out = tmp_path / f"r{abs(hash(bad))}"
        out.mkdir()
        (out / "state.json").write_text(bad)
        assert reproduce.main(["--budget", "tiny", "--out", str(out), "--dry-run"]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "state.json" in err and "Traceback" not in err, err
        assert (out / "state.json").read_text() == bad


def test_dry_run_creates_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    assert reproduce.main(["--budget", "tiny", "--out", str(out), "--dry-run"]) == 0
    assert not out.exists()


def test_ctrl_c_while_workers_start_leaves_no_traceback(tmp_path):
    """SIGINT right after --jobs 2 started: every process ends quietly."""
    import signal
    import time
    p = subprocess.Popen([sys.executable, "bench/reproduce.py", "--budget", "tiny", "--out", str(tmp_path / "r"),
                          "--jobs", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert "Traceback" not in err, err[-2000:]


# -----------------------------------------------------------------------------
# 5. significance.py pairs only files it can pair

def outputs(path, task, sources):
    with open(path, "w") as f:
        for s in sources:
            f.write(json.dumps(dict(task=task, source=s, prediction="a b", reference="a c")) + "\n")
    return str(path)


def test_significance_refuses_files_it_cannot_pair(tmp_path, capsys):
    a = outputs(tmp_path / "a.jsonl", "summarize", ["x", "y", "z"])
    b = outputs(tmp_path / "b.jsonl", "summarize", ["x", "y"])
    c = outputs(tmp_path / "c.jsonl", "classify", ["x", "y", "z"])
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    summary = tmp_path / "eval-best.json"
    summary.write_text(json.dumps(dict(rouge1=1.0), indent=1))
    for pair, words in (((a, b), "same examples"), ((a, c), "one task"), ((a, str(empty)), "no outputs"),
                        ((str(summary), a), "eval-*.json"), ((a, str(tmp_path / "missing.jsonl")), "cannot read")):
        assert significance.main(list(pair)) == 2, pair
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
