"""reproduce/runner.py: the plan's invariants, the whole tiny budget end to end, and a sitting
that stops and one that continues with only what is left (a half-trained run resumed, finished
runs untouched)."""

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT

from reproduce import orderings, plan  # noqa: E402
from reproduce import runner as reproduce  # noqa: E402


def commands(out):
    args = reproduce.get_args(["--budget", "tiny", "--out", out])
    fields = dict(reproduce.budget_fields(args), budget="tiny")
    return {r.name: reproduce.resolve(r, fields, out) for r in plan.PLAN}


def test_plan(tmp_path, capsys):
    """Every pretraining reads the same tokens (a run with a steps multiple, its multiple of them);
    the runs an ordering compares come from pretrainings of the same steps; every dependency is a
    run of the plan; every ordering and table names runs of the plan; --dry-run prints every
    command and runs nothing."""
    out = str(tmp_path / "r")
    resolved = commands(out)
    budget = [a for a in resolved["pre-pmlm"][0] if a not in ("--objective", "pmlm")]

    def steps(name):
        argv = resolved[name][0]
        return int(argv[argv.index("--steps") + 1])

    for name, (argv, needs) in resolved.items():
        assert all(n in plan.BY_NAME for n in needs), name
        if name.startswith("pre-"):
            for flag in ("--batch-tokens", "--seq-len", "--data", "--model"):
                assert argv[argv.index(flag) + 1] == budget[budget.index(flag) + 1], (name, flag)
            assert steps(name) == max(
                1, round(int(budget[budget.index("--steps") + 1]) * plan.BY_NAME[name].steps_x)
            ), name
    assert steps("pre-pmlm-norel") == steps("pre-pmlm") == 2 * steps("pre-elmer")
    for paper, _, metric, chain, theirs in orderings.ORDERINGS:
        names = orderings.parse_chain(chain)[0]
        assert paper.split()[0] in ("UniLMv2", "MLAE", "ELMER") and theirs, chain  # the paper's own figures beside ours
        assert all(n in plan.BY_NAME for n in names), chain
        pre = {n: [d for d in resolved[n][1] if d.startswith("pre-")] for n in names}
        if metric != "latency_ms":  # a latency does not depend on how long the weights were trained
            assert len({steps(d[0]) for d in pre.values() if d}) <= 1, chain
    for _, names in orderings.TABLES:
        assert all(n in plan.BY_NAME for n in names.split())
    assert reproduce.main(["--budget", "tiny", "--out", out, "--dry-run"]) == 0
    text = capsys.readouterr().out
    for r in plan.plan_for(plan.BUDGETS["tiny"]):  # one seed a fine-tuning at the tiny budget
        assert re.search(rf"^  {re.escape(r.name)} ", text, re.M), r.name
    assert "python train.py --objective mlae --decoder b" in text and "left: " in text
    assert text.index(" stage 1, the central claims") < text.index("  sum-pmlm ") < text.index(" stage 2, ")
    assert not os.path.exists(os.path.join(out, "pre-pmlm"))


def test_run_order():
    """The runner takes the central claims' first seeds first, then every other fine-tuning's first
    seed, then the further seeds (each where a pair needs it); every run after the runs it needs,
    every evaluation right after its fine-tuning's seed group; a NAR fine-tuning is estimated at its
    multiple of epochs, a summarization epoch at the budget's share of the pairs."""
    order = [r.name for r in plan.in_order(plan.PLAN)]
    assert sorted(order) == sorted(r.name for r in plan.PLAN)
    at = {n: i for i, n in enumerate(order)}
    for r in plan.PLAN:
        assert all(at[d] < at[r.name] for d in plan.needs_of(r)), r.name
    stages = [plan.stage_of(n) for n in order]
    assert stages == sorted(stages)
    tuned = [n for n in order if plan.BY_NAME[n].script == "finetune"]
    central = [n for n in tuned if n in plan.CENTRAL or n in plan.BEFORE]  # a check goes before what it checks
    assert tuned[: len(central)] == central and len(central) == len(plan.CENTRAL) + len(plan.BEFORE)
    assert all(at[n] == at[target] - 1 for n, target in plan.BEFORE.items())
    rest = tuned[len(central) :]
    assert [plan.seed_number(n) > 1 for n in rest] == sorted(plan.seed_number(n) > 1 for n in rest)
    assert all(plan.stage_of(n) == 2 for n in tuned if plan.seed_number(n) > 1)
    assert order[: order.index("eval-sum-pmlm")] == ["pre-pmlm", "pre-mlm", "sum-pmlm", "sum-mlm", "sum-unilm-scratch"]
    for n in tuned:
        group = [m for m in tuned if plan.ORDER[m][:3] == plan.ORDER[n][:3]]
        assert (
            at[max(group, key=at.get)]
            < at["eval-" + n]
            < min((at[m] for m in tuned if plan.ORDER[m][:3] > plan.ORDER[n][:3]), default=len(order))
        ), n
    state = {"runs": {"sum-pmlm": {"seconds": 100.0, "status": "done"}}}
    fields = plan.BUDGETS["cpu"]
    assert reproduce.estimate(plan.BY_NAME["nar-t5"], fields, state) == 100.0 * fields["nar_epochs_x"]
    assert reproduce.estimate(plan.BY_NAME["sum-mlae-lr"], fields, state) == 200.0  # a check's longer cap
    assert reproduce.estimate(plan.BY_NAME["nar-t5"], plan.BUDGETS["gpu"], state) == 100.0 * plan.NAR_EPOCHS
    assert reproduce.estimate(plan.BY_NAME["sum-t5"], fields, state) == 100.0
    per_epoch = fields["seconds"]["finetune"]
    assert reproduce.estimate(plan.BY_NAME["sum-t5"], fields, {"runs": {}}) == per_epoch * fields["share"] * 6
    assert reproduce.estimate(plan.BY_NAME["cls-t5"], fields, {"runs": {}}) == per_epoch * 6
    # the budget's share of the summarization pairs, for every summarization run and no classifier
    resolved = {
        n: reproduce.resolve(plan.BY_NAME[n], reproduce.budget_fields(reproduce.get_args(["--budget", "cpu"])), "OUT")[
            0
        ]
        for n in ("sum-t5", "nar-cmlm", "elmer-hard", "cls-t5")
    }
    assert all(" --train-share 0.5 " in " ".join(v) + " " for n, v in resolved.items() if n != "cls-t5")
    assert "--train-share" not in resolved["cls-t5"]


def test_estimates_keep_classification_apart():
    """A classification's fine-tuning and evaluation are estimated from classifications only: a
    summary's times do not lend them hours, nor theirs lend a summary minutes."""
    fields = plan.BUDGETS["cpu"]
    times = {"sum-pmlm": 3000.0, "cls-mlm": 300.0, "eval-sum-pmlm": 200.0, "eval-cls-mlm": 10.0}
    state = {"runs": {n: {"seconds": s, "status": "done"} for n, s in times.items()}}
    assert reproduce.estimate(plan.BY_NAME["sum-t5"], fields, state) == 3000.0
    assert reproduce.estimate(plan.BY_NAME["cls-t5"], fields, state) == 300.0
    assert reproduce.estimate(plan.BY_NAME["eval-sum-t5"], fields, state) == 200.0
    assert reproduce.estimate(plan.BY_NAME["eval-cls-t5"], fields, state) == 10.0
    sweep = next(r for r in plan.PLAN if r.name.startswith("eval-sweep-elmer-hard"))
    assert reproduce.kind_of(sweep) == "eval"


def test_a_runs_time_adds_its_sittings(tmp_path):
    """A run's recorded time is the sum over its sittings when it resumes (a stopped run continued,
    a finished one extended to more epochs), and starts again when the run does."""
    out = str(tmp_path)
    args = reproduce.get_args(["--budget", "tiny", "--out", out])
    resolved, state = commands(out), {"runs": {}}
    run, argv = plan.BY_NAME["sum-pmlm"], commands(out)["sum-pmlm"][0]
    for secs, extra, total in ((10.0, [], 10.0), (5.0, ["--resume"], 15.0), (7.0, ["--overwrite"], 7.0)):
        reproduce.record(args, run, resolved, state, {}, 0, None, None, secs, 0.0, argv + extra)
        assert state["runs"]["sum-pmlm"]["seconds"] == total and reproduce.load_state(out) == state


def log_commands(out, name):
    path = os.path.join(out, "logs", name + ".log")
    with open(path) as f:
        return [l for l in f if l.startswith("$ python")]


def check_tiny_report(out, unavailable):
    """The tiny plan's RESULTS.md and results.json, as the end-to-end test leaves them."""
    with open(os.path.join(out, "RESULTS.md")) as f:
        md = f.read()
    # 4 tiny steps leave no model off the unigram plateau; a fine-tuned row names its pretraining's step
    assert re.search(r"PLATEAU \(pre-pmlm step 4: ", md)
    assert re.search(r"^\| sum-unilm-scratch \| [^|]+ \| none \|", md, re.M)  # a row says what it was pretrained on
    # 'here' lists the runs in the order measured, whatever the claim's; every pair of the chain, the
    # links first, each with the effect it could detect
    pair = r"[-+][\d.]+ \(1x1\) \[[-+][\d.]+, [-+][\d.]+\], (holds|reversed|not resolved), detectable [\d.]+"
    assert re.search(
        r"\| 1 \| UniLMv2 \| PMLM > MLM > no pretraining \| XSum RG-L 36.08 [^|]+ \| rougeL \| "
        r"(sum-(pmlm|mlm|unilm-scratch) [\d.]+( > )?){3} \| "
        rf"sum-pmlm - sum-mlm: {pair}; sum-mlm - sum-unilm-scratch: {pair}; "
        rf"sum-pmlm - sum-unilm-scratch: {pair} \| (holds|reversed|not resolved) \|  \|",
        md,
    )
    # the project's checks, read as claims are and reported apart
    assert re.search(
        r"^\| NAR fine-tuning \| decoder \(b\)'s cross-attention table kept > dropped \| rougeL \| "
        rf"[^|]+ \| nar-mlae-b-anchored - nar-mlae-b: {pair} \| (holds|reversed|not resolved) \|$",
        md,
        re.M,
    )
    # classification orderings are read from the bootstrap too, over eval.py's per-example labels
    assert re.search(
        r"\| AE\+PAR > AE only \| MNLI-m [^|]+ \| accuracy \| (cls-(pmlm|mlm) [\d.]+( > )?){2} \| "
        rf"cls-pmlm - cls-mlm: {pair} \| (holds|reversed|not resolved) \|",
        md,
    )
    # a control's pairs stand apart from the paper's; one seed a run measures no seed spread, and says so
    assert re.search(
        rf"\| cls-t5 - cls-scratch: {pair}; cls-mlm - cls-scratch: {pair}; cls-mlae - cls-scratch: "
        rf"{pair} \|$",
        md,
        re.M,
    )
    assert "accuracy: none measured (its intervals cover the test examples only)" in md
    assert "python finetune.py --init" in md and "Hardware and versions: CPU" in md and "LEAD-8" in md
    assert re.search(r"Majority class on the same test examples .*: accuracy [\d.]+, macro-F1 [\d.]+", md)
    # auto resolves per machine (bf16 on a CPU with bf16 instructions): the setting names the result
    assert re.search(r"compute dtype (float32|bfloat16) \(--dtype auto\)", md)
    for name, why in unavailable.items():
        assert why in md, name
    # each evaluated run's metrics with the 95% interval of their mean (MLAE Figure 3's error bars)
    with open(os.path.join(out, "results.json")) as f:
        runs = json.load(f)["runs"]
    assert {"sum-mlae", "cls-pmlm"} <= set(runs)
    for name, r in runs.items():
        assert set(r["intervals"]) == (
            {"accuracy"} if "accuracy" in r["metrics"] else {"rouge1", "rouge2", "rougeL"}
        ), name
        for m, (low, high) in r["intervals"].items():
            assert low - 1e-9 <= r["metrics"][m] <= high + 1e-9, (name, m)


def check_an_edited_plan_keeps_its_results(out, capsys):
    """A run of other flags than the plan's is not the plan's row, and is not overwritten."""
    with reproduce.locked_state(out) as state:
        rec = state["runs"]["sum-mlae-unilm"]
        rec["command"] = rec["command"].replace(" --mask-schedule none", "")
        rec = state["runs"]["sum-unilm-scratch"]
        rec["command"] = rec["command"].replace(" --arch unilm", " --arch t5")
    stamp = os.path.getmtime(os.path.join(out, "sum-mlae-unilm", "last.pt"))
    assert reproduce.main(["--budget", "tiny", "--out", out, "--quiet"]) == 0
    text = capsys.readouterr().out
    assert re.search(
        r"^  sum-mlae-unilm +ran with other flags than the plan's \(`python finetune.py .*--style unilm "
        r"--train-data .*`\): move \S+sum-mlae-unilm aside",
        text,
        re.M,
    )
    assert re.search(r"^  eval-sum-mlae-unilm +needs sum-mlae-unilm", text, re.M) and "left: 0 runs" in text
    assert os.path.getmtime(os.path.join(out, "sum-mlae-unilm", "last.pt")) == stamp
    with open(os.path.join(out, "RESULTS.md")) as f:
        md = f.read()
    assert re.search(r"^\| sum-mlae-unilm \| [^|]+ \| ran with other flags", md, re.M)
    # an ordering with a run missing still reads the pairs it has (and a reversed one decides it)
    assert re.search(
        r"\| sum-pmlm - sum-mlm: [-+][\d.]+ \(1x1\) \[[-+][\d.]+, [-+][\d.]+\], [a-z ]+, detectable "
        r"[\d.]+ \| (reversed \(not measured: sum-unilm-scratch\)|not measured \(sum-unilm-scratch\))",
        md,
    )


# a pretraining whose weights the archive does not keep (plan.KEEP_WEIGHTS), and the summarization
# fine-tuning built on it
UNKEPT, UNKEPT_FT = "pre-mlm", "sum-mlm"


def check_an_archive_keeps_the_runs_without_weights(out, tmp_path, capsys):
    """A snapshot's archive of OUT, restored into an empty OUT on another machine, gives the same
    report with no run left; a run the archive lacks runs again with the pretraining it needs."""
    from reproduce import archive

    kept = str(tmp_path / "archive")
    assert archive.main(["save", out, kept]) == 0
    assert re.search(r"archived \d+ runs in ", capsys.readouterr().out)
    files = [os.path.relpath(os.path.join(d, f), kept) for d, _, fs in os.walk(kept) for f in fs]
    assert not [f for f in files if f.endswith(".pt")]
    # the kept pretrainings' weights, packed; the runs built on them read the same rounded weights
    from reproduce.weights import is_rounded

    assert sorted(f for f in files if f.endswith(".pt.xz")) == sorted(f"weights/{n}.pt.xz" for n in plan.KEEP_WEIGHTS)
    assert all(is_rounded(os.path.join(out, n, "last.pt")) for n in plan.KEEP_WEIGHTS)
    assert [f for f in files if re.fullmatch(r"sum-pmlm/outputs-best-test\S*\.jsonl\.gz", f)], files
    assert archive.main(["save", out, kept]) == 0  # nothing changed: nothing rewritten
    assert "(0 files written" in capsys.readouterr().out

    elsewhere = str(tmp_path / "elsewhere")
    assert archive.main(["restore", kept, elsewhere]) == 0
    assert reproduce.main(["--budget", "tiny", "--out", elsewhere, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "left: 0 runs" in text
    assert UNKEPT not in plan.KEEP_WEIGHTS
    assert re.search(rf"^  {UNKEPT} +archived: its curve is kept and no run left needs its weights", text, re.M)
    for name in plan.KEEP_WEIGHTS:  # restored with its weights: done, and the weights the original runs read
        assert re.search(rf"^  {name} +done", text, re.M), name
        a, b = (torch.load(os.path.join(w, name, "last.pt"), weights_only=True)["model"] for w in (out, elsewhere))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert reproduce.main(["--budget", "tiny", "--out", elsewhere, "--report-only"]) == 0
    assert archive.main(["save", elsewhere, kept]) == 0  # the restored OUT archives as the original did
    assert "(0 files written" in capsys.readouterr().out
    results = []
    for where in (out, elsewhere):
        with open(os.path.join(where, "results.json")) as f:
            results.append(json.load(f))
    for key in ("pretraining", "runs", "orderings", "summary"):
        assert results[0][key] == results[1][key], key
    check_a_run_again_keeps_its_archived_record(elsewhere, kept, tmp_path)
    # a pretraining run again to another step makes the archived fine-tunings built on it stale
    from reproduce.runstate import load_state
    from reproduce.staleness import stale_reason

    torch.save(dict(step=99), os.path.join(elsewhere, "pre-pmlm", "last.pt"))
    assert (
        stale_reason(plan.BY_NAME["sum-pmlm"], commands(elsewhere), elsewhere, load_state(elsewhere))
        == "fine-tuned from pre-pmlm at step 4, which is now at step 99"
    )

    # the archive without sum-mlm's evaluation: the fine-tuning, its evaluation and its pretraining, whose
    # weights the archive does not keep, run again
    with open(os.path.join(kept, "state.json")) as f:
        state = json.load(f)
    del state["runs"][f"eval-{UNKEPT_FT}"], state["runs"][UNKEPT_FT]
    with open(os.path.join(kept, "state.json"), "w") as f:
        json.dump(state, f)
    again = str(tmp_path / "again")
    assert archive.main(["restore", kept, again]) == 0
    assert reproduce.main(["--budget", "tiny", "--out", again, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "left: 3 runs" in text
    for name in (UNKEPT, UNKEPT_FT, f"eval-{UNKEPT_FT}"):
        assert re.search(rf"^  {name} +to run", text, re.M), name


def check_a_run_again_keeps_its_archived_record(out, kept, tmp_path):
    """An archived pretraining that OUT runs again (its weights not kept, a run left needing them)
    rewrites its log.jsonl: while a runner holds it, and once stopped before its end, a save keeps
    the archive's record and curve as they were."""
    import shutil

    from reproduce import archive
    from reproduce.runstate import claim, load_state, locked_state

    dest = str(tmp_path / "archive-again")
    shutil.copytree(kept, dest)
    with open(os.path.join(dest, "state.json")) as f:
        before = json.load(f)["runs"][UNKEPT]
    with gzip.open(os.path.join(dest, UNKEPT, "log.jsonl.gz")) as f:
        curve = f.read()
    assert load_state(out)["runs"][UNKEPT].get("archived")
    with open(os.path.join(out, UNKEPT, "log.jsonl"), "w") as f:  # the run again, its first record
        f.write(curve.decode().splitlines()[0] + "\n")
    running = claim(out, UNKEPT)  # a runner holds it, its record still the archive's
    archive.save(out, dest)
    running.close()
    with locked_state(out) as state:  # stopped: the runner's record, its own now
        state["runs"][UNKEPT] = dict(status="stopped", secs=1.0)
    archive.save(out, dest)
    with open(os.path.join(dest, "state.json")) as f:
        assert json.load(f)["runs"][UNKEPT] == before
    with gzip.open(os.path.join(dest, UNKEPT, "log.jsonl.gz")) as f:
        assert f.read() == curve


def test_tiny_end_to_end_and_resume(tmp_path, capsys):
    """The whole tiny plan (the runs whose flags this checkout has) over three sittings: a
    pretraining left half done by hand, a sitting stopped after 3 runs (the central claim's
    pretrainings and its first fine-tuning), a sitting that runs only
    what is left, and one that finds nothing to do."""
    import train

    out = str(tmp_path / "r")
    resolved = commands(out)
    os.makedirs(os.path.join(out, "data"))
    reproduce.write_subset(os.path.join(out, "data"))
    # a pretraining that stopped at step 2 of 4, as Ctrl-C leaves one
    train.main(resolved["pre-pmlm"][0] + ["--stop-after", "2"])

    assert reproduce.main(["--budget", "tiny", "--out", out, "--stop-after-runs", "3", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "pre-pmlm                 resume (50%)" in text and "stopped after 3 runs" in text
    first = ["pre-pmlm", "pre-mlm", "sum-pmlm"]  # the central claim's first runs (plan.in_order)
    assert any("--resume" in l for l in log_commands(out, "pre-pmlm"))
    with open(os.path.join(out, "logs", "pre-pmlm.log")) as f:
        assert "resuming from" in f.read()
    stamps = {n: os.path.getmtime(os.path.join(out, n, "last.pt")) for n in first}
    assert not os.path.exists(os.path.join(out, "pre-pmlm-norel"))

    status = reproduce.main(["--budget", "tiny", "--out", out, "--quiet"])
    text = capsys.readouterr().out
    for n in first:  # done in the first sitting: listed as done, not run again
        assert re.search(rf"^  {n} +done", text, re.M)
        assert os.path.getmtime(os.path.join(out, n, "last.pt")) == stamps[n]
        assert len(log_commands(out, n)) == 1
    ran = [n for n in plan.BY_NAME if os.path.exists(os.path.join(out, "logs", n + ".log"))]
    state = reproduce.load_state(out)
    unavailable = state["unavailable"]
    in_budget = {r.name for r in plan.plan_for(plan.BUDGETS["tiny"])}  # one seed at the tiny budget
    assert set(ran) | set(unavailable) == in_budget  # every run ran, or says why not
    assert not unavailable, unavailable  # every flag of the plan exists in the scripts
    assert all(len(log_commands(out, n)) == 1 for n in ran)
    assert status == 0, [(n, r.get("error")) for n, r in state["runs"].items() if r["status"] != "done"]
    from core.distributed import native_bf16_cpu

    machine = "bfloat16" if torch.cuda.is_available() or native_bf16_cpu() else "float32"
    assert {r["dtype"] for r in state["runs"].values()} == {machine}  # what each run computed in, recorded

    check_tiny_report(out, unavailable)
    check_an_archive_keeps_the_runs_without_weights(out, tmp_path, capsys)

    assert reproduce.main(["--budget", "tiny", "--out", out, "--quiet"]) == 0
    assert "left: 0 runs" in capsys.readouterr().out

    check_an_edited_plan_keeps_its_results(out, capsys)


def test_flags_a_run_may_change_between_sittings():
    """More --steps or --epochs extend a run, --dtype may differ per sitting, --resume and --overwrite
    are the runner's: none of them makes a recorded run another run; any other flag does."""
    from reproduce import staleness

    base = "python finetune.py --init x/last.pt --epochs 2 --out o/sum"
    assert staleness.what_it_ran(base) == staleness.what_it_ran(
        "python finetune.py --init x/last.pt --epochs 4 --out o/sum --dtype bfloat16 --resume"
    )
    assert staleness.what_it_ran(base) != staleness.what_it_ran(base + " --mask-schedule none")


def test_two_runners_share_out(tmp_path, capsys):
    """Two runners on one OUT: a run another runner holds is skipped (and the lock goes with its
    holder), and each runner's record survives the other's update of state.json."""
    out = str(tmp_path / "r")
    os.makedirs(out)
    held = reproduce.claim(out, "pre-pmlm")
    assert held is not None and reproduce.claim(out, "pre-pmlm") is None
    assert reproduce.main(["--budget", "tiny", "--out", out, "--only", "^pre-pmlm$"]) == 0
    text = capsys.readouterr().out
    assert "skip pre-pmlm: another runner is running it" in text
    assert not os.path.exists(os.path.join(out, "pre-pmlm"))
    held.close()
    again = reproduce.claim(out, "pre-pmlm")
    assert again is not None
    again.close()
    # runner A read state.json before runner B recorded its run; A's update keeps B's record
    stale = reproduce.load_state(out)
    with reproduce.locked_state(out) as state:
        state["runs"]["pre-mlm"] = dict(status="done", seconds=5.0)
    with reproduce.locked_state(out) as state:
        state["runs"]["pre-pmlm"] = dict(status="stopped", seconds=3.0)
    assert "pre-mlm" not in stale["runs"]
    assert {n: r["status"] for n, r in reproduce.load_state(out)["runs"].items()} == {
        "pre-mlm": "done",
        "pre-pmlm": "stopped",
    }


def test_a_run_recorded_by_another_runner_meanwhile_is_not_run_again(tmp_path, monkeypatch):
    """A runner reads state.json, then takes a run's lock. An evaluation (whose progress is its
    record in state.json) that another runner finished and recorded in between is read again under
    the lock and not run a second time."""
    out = str(tmp_path / "r")
    real_claim, ran = reproduce.claim, []

    def progress(run, argv, fields, out_, state, resolved=None):  # every pretraining and fine-tuning done
        return (1.0 if run.script != "eval" or state["runs"].get(run.name, {}).get("status") == "done" else 0.0), None

    def claim(out_, name):  # the other runner records the evaluation just before this one takes its lock
        with reproduce.locked_state(out_) as state:
            state["runs"][name] = dict(status="done", seconds=1.0)
        return real_claim(out_, name)

    monkeypatch.setattr(reproduce, "progress_of", progress)
    monkeypatch.setattr(reproduce, "claim", claim)
    monkeypatch.setattr(
        reproduce, "execute", lambda module, run, argv, log, quiet: ran.append(run.name) or (0, None, None)
    )
    assert reproduce.main(["--budget", "tiny", "--out", out, "--only", "^eval-sum-pmlm$", "--worker", "1"]) == 0
    assert ran == []


def runner(out, *flags):
    """reproduce/runner.py at the tiny budget as its own process (a worker or a --jobs supervisor)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "reproduce", "--budget", "tiny", "--out", out, *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_until(proc, needle):
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} never printed:\n" + "".join(lines))


def test_worker_waits_for_a_run_another_runner_holds(tmp_path):
    """A worker of --jobs waits for the pretraining another runner is running, then fine-tunes
    from it (a lone runner skips it); a run another runner let go of unfinished ends the wait."""
    import train

    out = str(tmp_path / "r")
    os.makedirs(os.path.join(out, "data"))
    reproduce.write_subset(os.path.join(out, "data"))
    held = reproduce.claim(out, "pre-pmlm")  # "another runner" is this test
    w = runner(out, "--only", "^sum-pmlm$", "--quiet", "--worker", "1")
    try:
        read_until(w, "skip pre-pmlm: another runner is running it")
        train.main(commands(out)["pre-pmlm"][0])
        held.close()
        text = "".join(read_until(w, "=== sum-pmlm: done")) + w.communicate(timeout=300)[0]
    finally:
        w.kill()
    assert w.returncode == 0 and "skip sum-pmlm" not in text, text
    assert reproduce.load_state(out)["runs"]["sum-pmlm"]["runner"] == 1

    # the holder lets pre-mlm go at step 0 (stopped, killed): the worker skips what needs it, and ends
    held = reproduce.claim(out, "pre-mlm")
    w = runner(out, "--only", "^sum-mlm$", "--quiet", "--worker", "2")
    try:
        read_until(w, "skip pre-mlm: another runner is running it")
        held.close()
        text = w.communicate(timeout=120)[0]
    finally:
        w.kill()
    assert w.returncode == 0 and "skip sum-mlm: pre-mlm did not finish" in text, text
    assert not os.path.exists(os.path.join(out, "sum-mlm"))


def test_jobs_stop_and_continue(tmp_path):
    """--jobs 2 as one command: SIGTERM reaches the workers, each saves its run and the command
    exits 143; the same command then resumes what stopped and runs every run once."""
    out = str(tmp_path / "r")
    cmd = ["--steps", "200", "--only", "^(eval-)?(sum|cls)-pmlm$", "--jobs", "2"]
    sup = runner(out, *cmd)
    try:
        read_until(sup, "=== pre-pmlm: python train.py")
        log = os.path.join(out, "pre-pmlm", "log.jsonl")
        for _ in range(600):  # training has begun: its first logged steps are on disk
            if os.path.exists(log):
                break
            time.sleep(0.1)
        sup.send_signal(signal.SIGTERM)
        text = sup.communicate(timeout=120)[0]
    finally:
        sup.kill()
    assert sup.returncode == 143 and "=== pre-pmlm: stopped" in text, text
    assert reproduce.load_state(out)["runs"]["pre-pmlm"]["status"] == "stopped"

    sup = runner(out, *cmd)
    text = sup.communicate(timeout=600)[0]
    assert sup.returncode == 0, text
    assert "left: 5 runs" in text and "pre-pmlm                 resume (" in text
    runs = reproduce.load_state(out)["runs"]
    assert {n: r["status"] for n, r in runs.items()} == dict.fromkeys(
        ["pre-pmlm", "sum-pmlm", "cls-pmlm", "eval-sum-pmlm", "eval-cls-pmlm"], "done"
    )
    assert [("--resume" in c) for c in log_commands(out, "pre-pmlm")] == [False, True]
    commands_of = {n: log_commands(out, n) for n in runs if n != "pre-pmlm"}
    assert all(len(c) == 1 for c in commands_of.values()), (commands_of, text)
    assert "results: " in text


def test_estimates_scale_a_time_measured_in_another_dtype_to_this_machines():
    """A run measured computing in bf16 is estimated slower on a float32-only machine by the training
    step's measured rates (results/studies/dtype.json), and the budget's own figures, measured in
    bf16, the same; a time measured in the dtype this machine computes in is taken as it is."""
    fields = plan.BUDGETS["cpu"]
    with open(
        os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "studies", "dtype.json")
    ) as f:
        rate = {row["dtype"]: row["rate"] for row in json.load(f)["rows"]}
    slower = rate["bfloat16"] / rate["float32"]
    assert slower > 1.5
    bf16 = {"runs": {"sum-pmlm": {"seconds": 100.0, "status": "done", "dtype": "bfloat16"}}}
    assert reproduce.estimate(plan.BY_NAME["sum-t5"], fields, bf16, "bfloat16") == 100.0
    assert reproduce.estimate(plan.BY_NAME["sum-t5"], fields, bf16, "float32") == pytest.approx(100.0 * slower)
    fp32 = {"runs": {"sum-pmlm": {"seconds": 100.0, "status": "done", "dtype": "float32"}}}
    assert reproduce.estimate(plan.BY_NAME["sum-t5"], fields, fp32, "float32") == 100.0
    empty = {"runs": {}}
    assert reproduce.estimate(plan.BY_NAME["cls-t5"], fields, empty, "float32") == pytest.approx(
        reproduce.estimate(plan.BY_NAME["cls-t5"], fields, empty, "bfloat16") * slower
    )
    assert reproduce.estimate(plan.BY_NAME["cls-t5"], fields, empty) == fields["seconds"]["finetune"] * 6
