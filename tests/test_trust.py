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

from core import finetune_flags  # noqa: E402
from reproduce import plan, report, runstate, significance, staleness  # noqa: E402
from reproduce import runner as reproduce  # noqa: E402


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
    fake_ckpt(os.path.join(out, "pre-pmlm", "last.pt"), step=4, args=dict(model="tiny"), kind="pretrain/pmlm")
    with open(os.path.join(out, "pre-pmlm", "log.jsonl"), "w") as f:
        f.write(json.dumps(dict(step=4, valid_ae_loss=5.0, unigram_entropy=6.0)) + "\n")
    fake_ckpt(os.path.join(out, "sum-pmlm", "last.pt"), step=10, args=dict(epochs=1, steps=10), init_step=4)
    fake_ckpt(os.path.join(out, "sum-pmlm", "best.pt"), step=10)
    res = os.path.join(out, "sum-pmlm", "eval-best-test.json")
    with open(res, "w") as f:
        json.dump(dict(rouge1=30.0, rouge2=10.0, rougeL=28.0), f)
    ev_argv = resolved["eval-sum-pmlm"][0]
    state = dict(
        runs={
            "eval-sum-pmlm": dict(
                command=staleness.command(plan.BY_NAME["eval-sum-pmlm"], ev_argv), files=[res], status="done"
            )
        }
    )
    ft, ev = plan.BY_NAME["sum-pmlm"], plan.BY_NAME["eval-sum-pmlm"]
    assert runstate.progress_of(ft, resolved["sum-pmlm"][0], fields, out, state, resolved)[0] == 1.0
    assert staleness.stale_reason(ft, resolved, out, runstate.load_state(out)) is None
    text = open(report.write(args, fields, dict(state, unavailable={}), resolved)).read()
    assert "pre-pmlm step 4" in text and "STALE" not in text
    # a later sitting extends the pretraining to step 6
    fake_ckpt(os.path.join(out, "pre-pmlm", "last.pt"), step=6, args=dict(model="tiny"), kind="pretrain/pmlm")
    assert runstate.progress_of(ft, resolved["sum-pmlm"][0], fields, out, state, resolved) == (0.0, None)
    why = staleness.stale_reason(ft, resolved, out, runstate.load_state(out))
    assert (
        "step 4" in why
        and "step 6" in why
        and staleness.stale_reason(ev, resolved, out, runstate.load_state(out)) == why
    )
    text = open(report.write(args, fields, dict(state, unavailable={}), resolved)).read()
    row = next(l for l in text.splitlines() if l.startswith("| sum-pmlm |"))
    assert "STALE" in row and "28.00" not in row
    # a fine-tuning written before runs recorded their pretraining step: stale when that is newer
    fake_ckpt(os.path.join(out, "sum-pmlm", "last.pt"), step=10, args=dict(epochs=1, steps=10))
    os.utime(os.path.join(out, "sum-pmlm", "last.pt"), (1, 1))
    assert "not recorded" in staleness.stale_reason(ft, resolved, out, runstate.load_state(out))


def test_a_pretraining_run_again_to_the_same_step_makes_its_fine_tuning_stale(tmp_path):
    """A pretraining run again from step 0 (its weights lost with a machine) ends at the step its
    fine-tuning started from: the fine-tuning, which ended before that run did, came from the
    earlier run, and is stale (as is its evaluation) until it runs again."""
    out = str(tmp_path / "r")
    args, fields, resolved = resolved_for(out)
    fake_ckpt(os.path.join(out, "pre-pmlm", "last.pt"), step=4, args=dict(model="tiny"), kind="pretrain/pmlm")
    fake_ckpt(os.path.join(out, "sum-pmlm", "last.pt"), step=10, args=dict(epochs=1, steps=10), init_step=4)
    ft, ev = plan.BY_NAME["sum-pmlm"], plan.BY_NAME["eval-sum-pmlm"]

    res = os.path.join(out, "sum-pmlm", "eval-best-test.json")  # its evaluation, restored without weights
    with open(res, "w") as f:
        json.dump(dict(rouge1=30.0, rouge2=10.0, rougeL=28.0), f)
    ev_argv = resolved["eval-sum-pmlm"][0]
    evaluated = dict(command=staleness.command(ev, ev_argv), files=[res], status="done", archived=True)

    def ended(pre, sum_pmlm, status="done"):
        runs = {"pre-pmlm": dict(status=status, finished=pre), "sum-pmlm": dict(status="done", finished=sum_pmlm)}
        runstate.save_state(out, dict(runs=dict(runs, **{"eval-sum-pmlm": evaluated})))
        return runstate.progress_of(ev, ev_argv, fields, out, runstate.load_state(out), resolved)[0]

    assert ended("2026-11-28 21:42", "2026-11-28 22:15") == 1.0  # the fine-tuning after its pretraining: current
    assert staleness.stale_reason(ft, resolved, out, runstate.load_state(out)) is None
    # the pretraining's run of a later sitting, the same step: the evaluation is not done either, so a
    # runner that runs the fine-tuning again runs its evaluation after it
    assert ended("2026-11-29 21:20", "2026-11-28 22:15") == 0.0
    why = staleness.stale_reason(ft, resolved, out, runstate.load_state(out))
    assert "pre-pmlm" in why and "an earlier run" in why and "2026-11-28 22:15 < 2026-11-29 21:20" in why
    assert staleness.stale_reason(ev, resolved, out, runstate.load_state(out)) == why
    ended("2026-11-29 21:20", "2026-11-28 22:15", status="stopped")  # short of its end: the step decides
    assert staleness.stale_reason(ft, resolved, out, runstate.load_state(out)) is None


def test_a_checkpoint_is_read_once_until_it_changes(tmp_path, monkeypatch):
    """The report, written after every run, reads each checkpoint's lineage once per version of the
    file (loading all of them every time was most of a sitting's time at the tiny budget)."""
    path = str(tmp_path / "pre" / "last.pt")
    fake_ckpt(path, step=4, args={})
    os.utime(path, (1000, 1000))
    loads = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a[0]) or real(*a, **k))
    assert [staleness.pretraining_step(str(tmp_path), "pre") for _ in range(3)] == [4, 4, 4]
    assert len(loads) == 1
    fake_ckpt(path, step=6, args={})  # rewritten now: read again, and again while it is this recent
    assert staleness.pretraining_step(str(tmp_path), "pre") == 6 and len(loads) == 2


def test_the_listing_says_what_is_stale(tmp_path, capsys):
    out = str(tmp_path / "r")
    _, _, resolved = resolved_for(out)
    fake_ckpt(os.path.join(out, "pre-pmlm", "last.pt"), step=8, args=dict(model="tiny"), kind="pretrain/pmlm")
    fake_ckpt(
        os.path.join(out, "sum-pmlm", "last.pt"),
        step=10,
        args=dict(epochs=1, steps=10),
        init_step=4,
        kind="finetune/summarize",
    )
    assert reproduce.main(["--budget", "tiny", "--out", out, "--dry-run", "--only", "^sum-pmlm$"]) == 0
    text = capsys.readouterr().out
    assert "sum-pmlm" in text and "stale (fine-tuned from pre-pmlm at step 4, which is now at step 8)" in text


# -----------------------------------------------------------------------------
# 2. what changes a result is compared, normalised


def test_paths_spelled_otherwise_and_step_tied_intervals_change_nothing(tmp_path):
    a = "python train.py --objective pmlm --steps 4 --eval-every 4 --data x/../x/data/pretrain.txt --out ./r/pre-pmlm"
    b = (
        "python train.py --objective pmlm --steps 10 --eval-every 10 --data x/data/pretrain.txt "
        f"--out {os.path.abspath('r/pre-pmlm')}"
    )
    assert staleness.what_it_ran(a) == staleness.what_it_ran(b)
    assert staleness.what_it_ran(a) != staleness.what_it_ran(a.replace("pmlm --steps", "mlm --steps"))


# -----------------------------------------------------------------------------
# 3 and 4. bad input: one line, exit 2, nothing created or overwritten


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--only", "(unclosed"], "not a regular expression"),
        (["--skip", "*x"], "not a regular expression"),
        (["--dtype", "fp8"], "--dtype"),
        (["--steps", "0"], "--steps 0"),
        (["--permutations", "0"], "--permutations"),
        (["--epochs", "-1"], "--epochs"),
        (["--limit", "0"], "--limit"),
        (["--jobs", "1000"], "--jobs 1000"),
    ],
)
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

    p = subprocess.Popen(
        [sys.executable, "-m", "reproduce", "--budget", "tiny", "--out", str(tmp_path / "r"), "--jobs", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
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
    for pair, words in (
        ((a, b), "same examples"),
        ((a, c), "one task"),
        ((a, str(empty)), "no outputs"),
        ((str(summary), a), "eval-*.json"),
        ((a, str(tmp_path / "missing.jsonl")), "cannot read"),
    ):
        assert significance.main(list(pair)) == 2, pair
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err


# -----------------------------------------------------------------------------
# 7, 8, 9: data left out is said; small ones; what a long run tells its user


def test_empty_examples_are_counted_and_said(tmp_path, capsys):
    from core.tasks import load_split

    path = tmp_path / "d.jsonl"
    rows = [dict(document=f"text {i}" if i % 4 else " ", summary="s") for i in range(40)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_split("summarize", "test", str(path))
    assert len(data) == 30 and data.skipped == 10 and data.shuffled().skipped == 10
    err = capsys.readouterr().err
    assert "10 of 40 examples left out" in err and "'document'" in err


def test_a_save_cleans_what_a_killed_save_left(tmp_path):
    from core import checkpoint

    path = str(tmp_path / "last.pt")
    (tmp_path / "last.pt.tmp999999").write_bytes(b"half")
    checkpoint.save(path, dict(step=1))
    assert os.path.exists(path) and not any(".tmp" in p for p in os.listdir(tmp_path))


def test_ae_probe_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "x.pt"
    bad.write_text("not a checkpoint")
    for argv in ([str(bad)], [str(bad), "--windows", "0"]):
        r = subprocess.run(
            [sys.executable, "-m", "studies.ae_probe"] + argv, cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert lines[-1].split(":")[0] in ("error", "ae_probe.py"), r.stderr


def test_the_tokenizer_says_it_is_training(tmp_path, text_file):
    from core.data import read_texts
    from core.tokenizer import cached_tokenizer

    said = []
    texts = read_texts(text_file)[:300]
    cached_tokenizer(texts, 600, str(tmp_path), say=said.append)
    cached_tokenizer(texts, 600, str(tmp_path), say=said.append)  # cached: nothing to say
    assert len(said) == 1 and "training a 600-piece" in said[0]


def test_progress_in_a_log_file_is_lines_not_one_carriage_returned_line(tmp_path):
    import io
    from core.progress import progress_line

    buf = io.StringIO()  # not a terminal
    show = progress_line("generating", buf)
    for i in range(1, 101):
        show(i, 100)
    text = buf.getvalue()
    assert "\r" not in text and 10 <= text.count("\n") <= 12 and text.rstrip().endswith("100/100")


def test_train_says_held_out_with_its_step_and_the_distance_under_the_entropy(text_file, tmp_path, capsys):
    import train
    from conftest import TINY

    train.main(TINY + ["--steps", "3", "--data", text_file, "--out", str(tmp_path / "p")])
    out = capsys.readouterr().out
    assert "held-out, step 3 |" in out and "this batch: " in out
    last = [l for l in out.splitlines() if l.startswith("done:")][-1]
    assert "nats under the unigram entropy" in last or "nats above the unigram entropy" in last
    rec = lambda loss: {"valid_ae_hidden_loss": loss, "unigram_entropy": 6.774}  # noqa: E731
    assert train.under_entropy(rec(6.9099)) == "ae_hidden_loss 6.9099, 0.14 nats above the unigram entropy 6.774"
    assert train.under_entropy(rec(6.1474)) == "ae_hidden_loss 6.1474, 0.63 nats under the unigram entropy 6.774"


# -----------------------------------------------------------------------------
# 6. one table of which runs a flag applies to, walked


def parser_and_table(module, argv, table):
    captured = {}
    real = module.parse_args

    def capture(p, a=None):
        captured["p"] = p
        return real(p, a)

    module.parse_args = capture
    try:
        args = module.get_args(argv)
    finally:
        module.parse_args = real
    return captured["p"], table(args)


@pytest.mark.parametrize("script", ["train", "finetune"])
def test_every_flag_is_in_the_table_or_applies_always(script, monkeypatch):
    """A new flag must say which runs it applies to: the walk fails until it enters the table (train.py:
    an objective record names it; finetune.py: its declaration's Applies, unless a set every run reads
    declares it)."""
    import finetune
    import train

    if script == "train":
        tables = {}
        monkeypatch.setattr(train, "refuse_unused", lambda args, applies, notes_to=None: tables.update(applies))
        p, table = parser_and_table(train, [], lambda args: tables)
        known = set(table) | set(train.ALWAYS_APPLIES)
    else:
        p, table = parser_and_table(
            finetune, [], lambda args: finetune_flags.unused_flags(finetune.parser(), args, "unilm")
        )
        known = set(table) | set(finetune.ALWAYS_APPLIES)
    missing = sorted(a.dest for a in p._actions if a.dest not in known)
    assert not missing, f"{script}.py flags in no table: {missing}"


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--objective", "pmlm", "--no-cross-rel-pos"], "--cross-rel-pos applies only to --objective mlae --decoder b"),
        (["--objective", "mlae", "--decoder", "a", "--no-cross-rel-pos"], "--cross-rel-pos applies only"),
        (["--objective", "mlae", "--length-grad"], "--length-grad applies only to --objective t5-nar"),
    ],
)
def test_train_refuses_flags_of_another_objective(argv, words):
    import train
    from core.errors import UserError

    with pytest.raises(UserError, match=words):
        train.get_args(argv)


def test_finetune_table_refuses_exit_flags_where_they_do_nothing():
    import finetune

    args = finetune.get_args(["--exit", "soft", "--exit-threshold", "0.5", "--exit-train", "all"])
    table = finetune_flags.unused_flags(finetune.parser(), args, "elmer")
    assert not table["exit_threshold"][0] and not table["exit_train"][0]
    args = finetune.get_args(["--exit-train", "all", "--exit-measure", "state"])
    table = finetune_flags.unused_flags(finetune.parser(), args, "unilm")
    assert not table["exit_train"][0] and not table["exit_measure"][0]


def test_the_report_writes_its_results_as_data(tmp_path):
    out = str(tmp_path / "r")
    args, fields, resolved = resolved_for(out)
    fake_ckpt(os.path.join(out, "pre-pmlm", "last.pt"), step=4, args=dict(model="tiny"), kind="pretrain/pmlm")
    with open(os.path.join(out, "pre-pmlm", "log.jsonl"), "w") as f:
        f.write(json.dumps(dict(step=4, valid_ae_loss=5.0, unigram_entropy=6.0)) + "\n")
    report.write(args, fields, dict(runs={}, unavailable={}), resolved)
    data = json.load(open(os.path.join(out, "results.json")))
    assert data["budget"] == "tiny" and data["pretraining"]["pre-pmlm"]["under"] == 1.0
    assert {"paper", "claim", "theirs", "metric", "verdict", "pairs"} <= set(data["orderings"][0])


def test_an_error_of_another_process_says_it_stopped_the_run(monkeypatch, capsys):
    from core import errors

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(errors.time, "sleep", lambda s: None)

    @errors.main_guard
    def main():
        raise errors.UserError("bad.jsonl line 3 is not JSON")

    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err == ["error: bad.jsonl line 3 is not JSON (process 1 of 2: this stopped the run)"]
