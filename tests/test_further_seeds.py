"""reproduce/further_seeds.py: a further seed of the last stage runs only where a pair it would enter
has its first seeds under plan.SEED_GAP points apart; the runner's --dry-run says which and why."""
import json
import os

from reproduce import plan
from reproduce import runner as reproduce
from reproduce.further_seeds import not_needed, pairs_reading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def evaluated(out, values):
    """state.json's records of evaluations with the given test metrics ({run: {metric: value}})."""
    runs = {}
    for name, metrics in values.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        with open(os.path.join(out, name, "eval-best-test.json"), "w") as f:
            json.dump(dict(metrics, model="best.pt"), f)
        runs["eval-" + name] = dict(status="done", seconds=1.0, files=[f"{name}/eval-best-test.json"])
    return dict(runs=runs)


def test_a_control_seed_is_spared_only_when_its_pair_is_wide(tmp_path):
    out = str(tmp_path)
    wide = evaluated(out, {"sum-mlm": dict(rougeL=38.0), "sum-unilm-scratch": dict(rougeL=35.5)})
    why = not_needed("sum-unilm-scratch-s2", wide, out)
    assert why and "sum-mlm - sum-unilm-scratch +2.50 rougeL" in why
    assert not_needed("eval-sum-unilm-scratch-s3", wide, out) == why  # its evaluation goes with it
    assert not_needed("sum-unilm-scratch", wide, out) is None  # the first seed always runs
    assert not_needed("sum-mlm-s2", wide, out) is None  # a central run: every seed
    close = evaluated(out, {"sum-mlm": dict(rougeL=38.0), "sum-unilm-scratch": dict(rougeL=36.5)})
    assert not_needed("sum-unilm-scratch-s2", close, out) is None
    unread = evaluated(out, {"sum-mlm": dict(rougeL=38.0)})
    unread["runs"].pop("eval-sum-mlm")
    assert not_needed("sum-unilm-scratch-s2", unread, out) is None  # not measured yet: it runs


def test_every_pair_a_run_enters_must_be_wide():
    """A run in the middle of a chain enters two pairs; a run in two claims, each claim's pairs;
    latencies are not read (a further seed does not decide a timing), and each pair on its claim's
    metric."""
    assert pairs_reading("sum-mlae-cross-partial") == [("sum-mlae-none", "sum-mlae-cross-partial", "rougeL"),
                                                       ("sum-mlae-cross-partial", "sum-mlae-cross-random", "rougeL")]
    assert ("sum-mlae-m15", "sum-mlae-none", "rouge2") in pairs_reading("sum-mlae-none")
    assert all(m != "latency_ms" for _, _, m in pairs_reading("elmer-hard"))


def test_one_close_pair_keeps_the_seed(tmp_path):
    out = str(tmp_path)
    state = evaluated(out, {"sum-mlae-none": dict(rougeL=38.0), "sum-mlae-cross-partial": dict(rougeL=35.0),
                            "sum-mlae-cross-random": dict(rougeL=34.0)})
    assert not_needed("sum-mlae-cross-partial-s2", state, out) is None
    state = evaluated(out, {"sum-mlae-none": dict(rougeL=38.0), "sum-mlae-cross-partial": dict(rougeL=35.0),
                            "sum-mlae-cross-random": dict(rougeL=32.0)})
    assert "+3.00 rougeL; sum-mlae-cross-partial - sum-mlae-cross-random +3.00" in not_needed(
        "sum-mlae-cross-partial-s2", state, out)


def test_dry_run_and_report_list_a_spared_seed_and_count_no_time_for_it(tmp_path, capsys):
    out = str(tmp_path / "r")
    os.makedirs(out)
    state = evaluated(out, {"sum-mlm": dict(rougeL=38.0), "sum-unilm-scratch": dict(rougeL=30.0)})
    with open(os.path.join(out, "state.json"), "w") as f:
        json.dump(dict(state, budget="cpu"), f)
    assert reproduce.main(["--budget", "cpu", "--out", out, "--dry-run"]) == 0
    text = capsys.readouterr().out
    for n in ("sum-unilm-scratch-s2", "eval-sum-unilm-scratch-s2", "sum-unilm-scratch-s3"):
        line = next(l for l in text.splitlines() if l.split()[:1] == [n])
        assert "not needed: first seeds" in line and "~" not in line, line
    assert not [l for l in text.splitlines() if l.split()[:1] == ["cls-scratch-s2"] and "not needed" in l]
    assert reproduce.main(["--budget", "cpu", "--out", out, "--report-only"]) == 0
    with open(os.path.join(out, "RESULTS.md")) as f:
        md = f.read()
    assert "| sum-unilm-scratch-s2 | not needed: first seeds" in md and "| cls-scratch-s2 | not run |" in md


def test_the_gap_is_wider_than_the_central_runs_seeds_spread():
    """plan.py's reason for SEED_GAP: the seeds of each central run measured here lie closer together."""
    with open(os.path.join(ROOT, "results", "cpu-budget", "results.json")) as f:
        runs = json.load(f)["runs"]
    seen = 0
    for name in plan.CENTRAL:
        seeds = [n for n in plan.seeds_of(name, list(runs)) if n in runs]
        if len(seeds) < 2:
            continue
        metric = "accuracy" if "accuracy" in runs[name]["metrics"] else "rougeL"
        values = [runs[n]["metrics"][metric] for n in seeds]
        assert max(values) - min(values) < plan.SEED_GAP, (name, values)
        seen += 1
    assert seen >= 4


def test_a_seed_spared_during_a_sitting_is_not_run_nor_requeued(tmp_path, capsys, monkeypatch):
    """The runner decides again when it reaches a run (its first seeds may have been evaluated since
    the sitting began): a run spared then is not run, and says so without the word a queue reads
    as "try again later" ("skip")."""
    out = str(tmp_path / "r")
    os.makedirs(out)
    state = evaluated(out, {"sum-mlm": dict(rougeL=38.0), "sum-unilm-scratch": dict(rougeL=30.0)})
    with open(os.path.join(out, "state.json"), "w") as f:
        json.dump(dict(state, budget="cpu"), f)
    looks = []

    def later(name, state, out):  # needed when the sitting lists its runs, spared when it reaches them
        looks.append(name)
        return not_needed(name, state, out) if looks.count(name) > 1 else None
    monkeypatch.setattr(reproduce, "not_needed", later)
    ran = []
    monkeypatch.setattr(reproduce, "execute", lambda *a, **k: ran.append(a) or (0, None, None))
    assert reproduce.main(["--budget", "cpu", "--out", out, "--only", r"^sum-unilm-scratch-s2$", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert not ran and "sum-unilm-scratch-s2: not needed: first seeds" in text and "skip " not in text, text
