"""Trust, round 5, the runner and its reports: what a run's files are is checked, not taken at their
word; a report names the steps its rows come from; an OUT can move; one sitting leaves nothing stale;
damaged files are refused or left out in one line, never a traceback."""

import json
import os
import shutil
import sys

import pytest
import torch

from conftest import ROOT, TINY

from reproduce import plan, report, runstate, significance, staleness  # noqa: E402
from reproduce import runner as reproduce  # noqa: E402


def resolved_for(out, budget="tiny", *flags):
    args = reproduce.get_args(["--budget", budget, "--out", out, *flags])
    fields = dict(reproduce.budget_fields(args), budget=budget)
    return args, fields, {r.name: reproduce.resolve(r, fields, out) for r in plan.plan_for(fields)}


def fake_ckpt(path, **fields):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(fields, path)


def fake_pretraining(out, name="pre-pmlm", step=4, kind="pretrain/pmlm", model="tiny"):
    fake_ckpt(
        os.path.join(out, name, "last.pt"), step=step, args=dict(model=model, objective=kind.split("/")[1]), kind=kind
    )
    with open(os.path.join(out, name, "log.jsonl"), "w") as f:
        f.write(json.dumps(dict(step=step, valid_ae_hidden_loss=5.0, unigram_entropy=6.0)) + "\n")


# -----------------------------------------------------------------------------
# the runner checks what a run's files are


def test_a_checkpoint_of_another_objective_or_preset_is_not_the_plans(tmp_path, capsys):
    out = str(tmp_path / "r")
    fake_pretraining(out, kind="pretrain/t5")  # a T5 copied over the PMLM's last.pt
    assert reproduce.main(["--budget", "tiny", "--out", out, "--dry-run", "--only", "^sum-pmlm$"]) == 0
    text = capsys.readouterr().out
    assert "pre-pmlm/last.pt is a pretrain/t5 checkpoint of --model tiny, not the plan's pretrain/pmlm" in text
    assert "needs pre-pmlm" in text
    # the tiny budget's pretraining read at the cpu budget: another preset, said so in the report
    shutil.rmtree(out)
    fake_pretraining(out)
    assert reproduce.main(["--budget", "cpu", "--out", out, "--report-only"]) == 0
    md = open(os.path.join(out, "RESULTS.md")).read()
    assert "of --model tiny, not the plan's pretrain/pmlm of --model small" in md


def test_an_out_holds_one_budget(tmp_path, capsys):
    out = str(tmp_path / "r")
    os.makedirs(out)
    with open(os.path.join(out, "state.json"), "w") as f:
        json.dump(dict(runs={}, budget="tiny"), f)
    assert reproduce.main(["--budget", "cpu", "--out", out, "--dry-run"]) == 2
    assert "holds the runs of --budget tiny, not cpu" in capsys.readouterr().err


def test_a_fine_tuning_without_its_best_pt_runs_again(tmp_path):
    out = str(tmp_path / "r")
    _, fields, resolved = resolved_for(out)
    run = plan.BY_NAME["sum-pmlm"]
    fake_ckpt(os.path.join(out, "sum-pmlm", "last.pt"), step=3, args=dict(epochs=1, steps=3), kind="finetune/summarize")
    state = dict(runs={})
    assert runstate.progress_of(run, resolved["sum-pmlm"][0], fields, out, state) == (0.0, None)
    fake_ckpt(os.path.join(out, "sum-pmlm", "best.pt"), step=3)
    assert runstate.progress_of(run, resolved["sum-pmlm"][0], fields, out, state)[0] == 1.0


def test_the_report_names_the_steps_its_rows_come_from(tmp_path):
    out = str(tmp_path / "r")
    fake_pretraining(out, step=4)
    args, fields, resolved = resolved_for(out, "tiny", "--steps", "2")
    text = open(report.write(args, fields, dict(runs={}, unavailable={}), resolved)).read()
    assert "the plan's 2 steps" in text and "pre-pmlm at step 4 (the plan: 2)" in text
    data = json.load(open(os.path.join(out, "results.json")))
    assert data["steps"] == 2 and data["steps_elsewhere"]["pre-pmlm"] == 4


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--epochs", "inf"], "--epochs inf: must be a finite number"),
        (["--steps", "0"], "--steps 0"),
        (["--report-only", "--dry-run"], "give one of them"),
    ],
)
def test_runner_flags_refused(flags, words, capsys):
    with pytest.raises(SystemExit) as e:
        reproduce.get_args(["--budget", "tiny", *flags])
    assert e.value.code == 2 and words in capsys.readouterr().err


# -----------------------------------------------------------------------------
# an OUT moved, or named from another folder, is the same OUT


def test_commands_and_files_of_a_moved_out_are_the_same(tmp_path):
    a, b = str(tmp_path / "here" / "r"), "elsewhere/r"
    ev = plan.BY_NAME["eval-sum-pmlm"]
    assert staleness.what_it_ran(
        staleness.command(ev, resolved_for(a)[2]["eval-sum-pmlm"][0])
    ) == staleness.what_it_ran(staleness.command(ev, resolved_for(b)[2]["eval-sum-pmlm"][0]))
    pre = plan.BY_NAME["pre-pmlm"]
    assert staleness.what_it_ran(staleness.command(pre, resolved_for(a)[2]["pre-pmlm"][0])) == staleness.what_it_ran(
        staleness.command(pre, resolved_for(b)[2]["pre-pmlm"][0])
    )
    # result files are recorded relative to OUT, and found from wherever OUT now is
    os.makedirs(os.path.join(a, "sum-pmlm"))
    open(os.path.join(a, "sum-pmlm", "eval-best-test.json"), "w").write("{}")
    state = dict(runs={"eval-sum-pmlm": dict(files=[os.path.join("sum-pmlm", "eval-best-test.json")])})
    assert list(runstate.run_files(state, "eval-sum-pmlm", a)) == [os.path.join(a, "sum-pmlm", "eval-best-test.json")]


def test_a_run_resumes_from_a_moved_folder(tmp_path, text_file):
    """train.py --resume accepts its data file named at its new place when the bytes are the same."""
    import train

    a = tmp_path / "a"
    a.mkdir()
    shutil.copy(text_file, a / "docs.txt")
    train.main(["--data", str(a / "docs.txt"), "--steps", "2", "--stop-after", "1", "--out", str(a / "run")] + TINY)
    b = tmp_path / "b"
    os.rename(a, b)
    train.main(["--data", str(b / "docs.txt"), "--steps", "2", "--out", str(b / "run"), "--resume"] + TINY)
    assert torch.load(b / "run" / "last.pt", weights_only=True)["step"] == 2
    (b / "other.txt").write_text("other words entirely\n" * 50)
    with pytest.raises(SystemExit):  # another file's bytes: still refused
        train.main(["--data", str(b / "other.txt"), "--steps", "3", "--out", str(b / "run"), "--resume"] + TINY)


# -----------------------------------------------------------------------------
# one sitting leaves nothing stale


def test_a_sitting_that_extends_a_pretraining_runs_what_it_made_stale(tmp_path, monkeypatch):
    out = str(tmp_path / "r")
    args, fields, resolved = resolved_for(out, "tiny", "--steps", "6")
    fake_pretraining(out, step=4)
    fake_ckpt(
        os.path.join(out, "sum-pmlm", "last.pt"),
        step=3,
        args=dict(epochs=1, steps=3),
        init_step=4,
        kind="finetune/summarize",
    )
    fake_ckpt(os.path.join(out, "sum-pmlm", "best.pt"), step=3)
    ran = []

    def execute(module, run, argv, log_path, quiet):
        ran.append(run.name)
        if run.name == "pre-pmlm":  # the pretraining goes on to step 6
            fake_pretraining(out, step=6)
        else:
            fake_ckpt(
                os.path.join(out, run.name, "last.pt"),
                step=3,
                args=dict(epochs=1, steps=3),
                init_step=6,
                kind="finetune/summarize",
            )
        return 0, None, None

    monkeypatch.setattr(reproduce, "execute", execute)
    monkeypatch.setattr(reproduce.report, "write", lambda *a, **k: "RESULTS.md")
    # pre-pmlm's weights are kept (plan.KEEP_WEIGHTS), rounded before a run reads them: these fake
    # checkpoints hold none, and what is tested here is the staleness alone
    monkeypatch.setattr(reproduce, "round_in_place", lambda out, name: False)
    runs = [plan.BY_NAME["pre-pmlm"], plan.BY_NAME["sum-pmlm"]]
    state = dict(runs={})
    os.makedirs(out, exist_ok=True)
    mods = dict(train=None, finetune=None, eval=None)
    reproduce.run_left(args, fields, state, resolved, mods, [runs[0]], {}, lambda *a, **k: None, runs)
    assert ran == ["pre-pmlm", "sum-pmlm"]


def test_a_fine_tuning_made_under_another_recipe_is_stale(tmp_path):
    """A fine-tuning whose config.json records another learning rate (an earlier default) is not the
    plan's run now: it is stale, by the flag and both values; the same recipe is not."""
    import finetune

    out = str(tmp_path / "r")
    _, _, resolved = resolved_for(out)
    run = plan.BY_NAME["sum-pmlm"]
    os.makedirs(os.path.join(out, "sum-pmlm"))
    now = vars(finetune.get_args(resolved["sum-pmlm"][0]))
    for lr, stale in ((now["lr"], False), (now["lr"] / 4, True)):
        with open(os.path.join(out, "sum-pmlm", "config.json"), "w") as f:
            json.dump(dict(model={}, args=dict(now, lr=lr)), f)
        why = staleness.stale_reason(run, resolved, out, runstate.load_state(out))
        assert bool(why) == stale, why
    assert why == f"fine-tuned with --lr {now['lr'] / 4}; the plan now runs {now['lr']}"


# -----------------------------------------------------------------------------
# damaged files: left out or refused in one line


def test_reports_leave_out_damaged_files(tmp_path, capsys):
    out = str(tmp_path / "r")
    args, fields, resolved = resolved_for(out)
    fake_pretraining(out)
    with open(os.path.join(out, "pre-pmlm", "log.jsonl"), "a") as f:
        f.write('{"step": 5, "valid_ae_hid')  # a run killed mid-record
    os.makedirs(os.path.join(out, "sum-pmlm"))
    junk = os.path.join(out, "sum-pmlm", "eval-best-test.json")
    open(junk, "w").write("not json at all")
    state = dict(runs={"eval-sum-pmlm": dict(files=[junk], status="done")}, unavailable={})
    text = open(report.write(args, fields, state, resolved)).read()
    err = capsys.readouterr().err
    assert "pre-pmlm" in text and "1 line(s) that are not a JSON record" in err and "is not a JSON result" in err


def test_an_evaluation_whose_result_is_not_json_is_not_done(tmp_path, capsys):
    """An eval run whose recorded file is newer than its checkpoint and of the same command, but holds
    no JSON result (cut short, emptied, edited), is not counted done: one note names the file, and
    the runner evaluates again; the same file holding a result is done."""
    out = str(tmp_path / "r")
    _, fields, resolved = resolved_for(out)
    run, argv = plan.BY_NAME["eval-sum-pmlm"], resolved["eval-sum-pmlm"][0]
    fake_ckpt(argv[0], step=3)
    result = os.path.join(out, "sum-pmlm", "eval-best-test.json")
    state = dict(runs={run.name: dict(files=[result], command=staleness.command(run, argv), status="done")})
    for text, done in (("", 0.0), ("not json", 0.0), ("[1, 2]", 0.0), (json.dumps(dict(rougeL=30.0)), 1.0)):
        open(result, "w").write(text)
        assert runstate.progress_of(run, argv, fields, out, state) == (done, None), text
        err = capsys.readouterr().err
        assert (f"note: {result}, recorded as eval-sum-pmlm's result, is not a JSON result" in err) == (not done)


def outputs(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def test_significance_refuses_what_it_cannot_score(tmp_path, capsys):
    good = outputs(tmp_path / "a.jsonl", [dict(source="s", prediction="p q", reference="p q")])
    null = outputs(tmp_path / "b.jsonl", [dict(source="s", prediction=None, reference="p q")])
    binary = tmp_path / "c.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert significance.main([good, null]) == 2
    assert "b.jsonl line 1: prediction is null, not a text" in capsys.readouterr().err
    assert significance.main([good, str(binary)]) == 2
    assert "c.jsonl is not UTF-8" in capsys.readouterr().err


def test_render_docs_refuses_damaged_and_unmatched_input(tmp_path, monkeypatch):
    from tools import figures, records, render_docs

    monkeypatch.setattr(figures, "ROOT", str(tmp_path))
    monkeypatch.setattr(render_docs, "ROOT", str(tmp_path))
    (tmp_path / "cut.json").write_text('{"orderings": [')
    (tmp_path / "study.json").write_text('{"rows": []}')
    (tmp_path / "log.jsonl").write_text('{"step": 1, "loss": 3.0}\n')
    ordering = dict(
        paper="MLAE", claim="x", metric="rougeL", chain="sum-mlae > sum-t5", values={}, pairs=[], verdict="not measured"
    )
    results = dict(budget="cpu", steps=1, written="-", environment="-", pretraining={}, runs={}, orderings=[ordering])
    (tmp_path / "r.json").write_text(json.dumps(results))
    # an ordering naming a run the plan does not have, and one measuring a run the file has no row of
    for name, change in (("typo", dict(chain="sum-mlae > sum-t6")), ("rowless", dict(values={"sum-t5": 1.0}))):
        (tmp_path / f"{name}.json").write_text(json.dumps(dict(results, orderings=[dict(ordering, **change)])))
    (tmp_path / "t.log").write_text("marker\n| a |\n")
    cases = [
        (lambda: figures._load("cut.json"), "not a readable JSON result file"),
        (
            lambda: render_docs.render_text("<!-- render: study study.json -->\nx\n<!-- /render -->", "d.md"),
            "cannot be drawn",
        ),
        (lambda: figures.held_out("log.jsonl"), "no held-out record"),
        (lambda: render_docs.scorecard("r.json::ELMER"), "no claim of ELMER"),
        (lambda: render_docs.scorecard("typo.json"), "names 'sum-t6', which is no run of the plan"),
        (lambda: render_docs.scorecard("rowless.json"), "names 'sum-t5' as measured, but the file has no row"),
        (lambda: figures._draw_scorecard(None, "typo.json"), "which is no run of the plan"),
        (lambda: render_docs.table("t.log::marker#0"), "#0 names no occurrence"),
        (lambda: render_docs.render_text("<!-- render: study study.json -->\nx\n", "d.md"), "without"),
    ]
    for call, words in cases:
        with pytest.raises(SystemExit) as e:
            call()
        assert words in str(e.value), (words, e.value)
    assert records  # the study's shape is checked by records.table


def test_render_docs_run_as_a_file_says_how_to_run_it():
    import subprocess

    r = subprocess.run(
        [sys.executable, "tools/render_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1 and "python -m tools.render_docs" in r.stderr and "Traceback" not in r.stderr
