"""reproduce/further_seeds.py: a further seed runs only where a pair it enters is not resolved now and
would be with one more seed a side; a first seed that only archived verdicts read is not run again;
the runner's --dry-run says which and why."""

import json
import os

from conftest import ROOT

from reproduce import orderings, plan
from reproduce import runner as reproduce
from reproduce import significance
from reproduce.further_seeds import needs_a_seed, not_needed, pairs_reading

N = 400  # test examples of the fake evaluations


def evaluated(out, accuracies):
    """state.json's records of classifier evaluations, each with an outputs file whose first
    `accuracy` percent of N examples are right ({run: accuracy})."""
    runs = {}
    for name, acc in accuracies.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        with open(os.path.join(out, name, "eval-best-test.json"), "w") as f:
            json.dump(dict(accuracy=acc, model="best.pt"), f)
        right = round(acc / 100 * N)
        with open(os.path.join(out, name, "outputs-best-test.jsonl"), "w") as f:
            for i in range(N):
                f.write(
                    json.dumps(
                        dict(
                            source=f"doc {i}",
                            reference="libs",
                            prediction="libs" if i < right else "x",
                            task="classify",
                        )
                    )
                    + "\n"
                )
        runs["eval-" + name] = dict(status="done", seconds=1.0, files=[f"{name}/eval-best-test.json"])
    return dict(runs=runs)


def write_state(out, state):
    with open(os.path.join(out, "state.json"), "w") as f:
        json.dump(dict(state, budget="cpu"), f)


# cls-mlm's three seeds give the seed spread of accuracy (about 1.5 here)
SEEDS = {"cls-mlm": 60.0, "cls-mlm-s2": 62.0, "cls-mlm-s3": 63.0}


def test_a_further_seed_runs_where_one_more_a_side_would_resolve_its_pair(tmp_path):
    out = str(tmp_path)
    far = evaluated(out, dict(SEEDS, **{"cls-pmlm": 75.0, "cls-pmlm-par": 60.0, "cls-pmlm-norel": 60.0}))
    why = not_needed("cls-pmlm-s2", far, out)
    assert why.startswith("not needed: ") and "cls-pmlm - cls-mlm" in why and "resolved" in why, why
    assert not_needed("eval-cls-pmlm-s2", far, out) == why  # its evaluation goes with it
    assert not_needed("cls-pmlm", far, out) is None  # a first seed runs
    near = evaluated(out, dict(SEEDS, **{"cls-pmlm": 61.0, "cls-pmlm-par": 61.0, "cls-pmlm-norel": 61.0}))
    assert "too close for one more seed a side" in not_needed("cls-pmlm-s2", near, out)
    # between: not resolved at one seed, resolved at two a side if the difference held
    for acc in range(62, 75):
        mid = evaluated(out, dict(SEEDS, **{"cls-pmlm": float(acc), "cls-pmlm-par": 50.0, "cls-pmlm-norel": 50.0}))
        if not_needed("cls-pmlm-s2", mid, out) is None:
            break
    else:
        raise AssertionError("no difference made the further seed needed")
    assert 62 < acc < 75


def test_the_rule_is_the_interval_one_more_seed_a_side_would_have():
    d, se, sigma = 3.5, 0.5, 1.5  # 1.96 sqrt(0.5^2 + 1.5^2 (1 + 1)) = 4.27 at one seed a side
    low, high = significance.seed_interval(d, se, sigma, 1, 1)
    assert low < 0 < high and needs_a_seed(d, se, sigma, 1, 1)
    assert not needs_a_seed(0.5, se, sigma, 1, 1)
    # one more seed a side halves the seed term: 1.96 sqrt(0.5^2 + 1.5^2 (1/2 + 1/2)) = 3.10
    assert not needs_a_seed(3.0, se, sigma, 1, 1) and needs_a_seed(3.2, se, sigma, 1, 1)


def test_a_pair_not_read_yet_gives_no_reason_and_a_lower_seed_comes_first(tmp_path):
    out = str(tmp_path)
    state = evaluated(out, SEEDS)
    why = not_needed("cls-pmlm-s2", state, out)
    assert why and "not evaluated" in why  # cls-pmlm itself first
    state = evaluated(out, dict(SEEDS, **{"cls-pmlm": 62.0}))
    assert "cls-pmlm - cls-pmlm-par not read yet" in not_needed("cls-pmlm-s2", state, out)
    state = evaluated(out, dict(SEEDS, **{"cls-mlae": 62.0}))
    assert not_needed("cls-mlae-s3", state, out) == "not needed while cls-mlae-s2 is not evaluated"


def test_every_pair_a_run_enters_adjacent_or_not():
    """A run in the middle of a chain enters its links and the pairs further apart; a run in two claims,
    each claim's pairs; latencies are not read (a further seed does not decide a timing)."""
    pairs = pairs_reading("sum-mlae-cross-partial")
    assert ("sum-mlae-none", "sum-mlae-cross-partial", "rougeL") in pairs
    assert ("sum-mlae-cross-partial", "sum-mlae-cross-random", "rougeL") in pairs
    assert ("sum-mlae-m15", "sum-mlae-none", "rouge2") in pairs_reading("sum-mlae-none")
    assert ("cls-mlae", "cls-t5", "accuracy") in pairs_reading("cls-mlae")  # two links apart
    assert all(m != "latency_ms" for _, _, m in pairs_reading("elmer-hard"))


def test_a_first_seed_only_archived_verdicts_read_is_not_run_again(tmp_path, capsys):
    """With the archive's verdicts in OUT, the runs only claims 1, 6, 7, 8 read are not run again,
    nor the pretrainings only they need; a run another claim reads is (sum-pmlm: claim 4)."""
    from reproduce import archive

    out = str(tmp_path / "r")
    assert archive.main(["restore", os.path.join(ROOT, "results", "cpu-budget", "archive"), out, "--no-weights"]) == 0
    assert reproduce.main(["--budget", "cpu", "--out", out, "--dry-run"]) == 0
    text = capsys.readouterr().out
    line = lambda n: next(l for l in text.splitlines() if l.split()[:1] == [n])
    for n in ("sum-mlm", "sum-unilm-scratch", "cls-t5", "sum-roberta", "eval-sum-mlm"):
        assert "not needed: every claim reading it keeps its archived verdict" in line(n), line(n)
        assert "~" not in line(n)
    # sum-t5: claims 7 and 8 keep archived verdicts, and the fine-tuning rate's check reads it; a run
    # the archive keeps with its outputs is done
    with open(os.path.join(ROOT, "results", "cpu-budget", "archive", "state.json")) as f:
        kept = json.load(f)["runs"]
    for n in ("sum-pmlm", "sum-mlae", "sum-mlae-none", "elmer-hard", "sum-t5", "sum-mlae-lr"):
        assert line(n).split()[1:2] == (["done"] if n in kept else ["to"]), line(n)
    order = [l.split()[0] for l in text.splitlines() if l.startswith("  ") and not l.startswith("   ")]
    # a pretraining goes just before the first run left that needs it; pre-mlm's runs are all done or spared
    assert order.index("pre-t5") == order.index("sum-t5") - 1 and "archived" in line("pre-mlm")
    # the NAR table's check runs right before the NAR claims' first run
    assert order.index("nar-mlae-b-anchored") == order.index("nar-mlae-b") - 1


def test_the_checks_read_no_claim_and_run_one_seed():
    claimed = {n for _, _, _, chain, _ in orderings.ORDERINGS for n in orderings.parse_chain(chain)[0]}
    assert not plan.CHECK_RUNS & claimed
    checked = {n for _, _, _, chain in orderings.CHECKS for n in orderings.parse_chain(chain)[0]}
    assert plan.CHECK_RUNS <= checked and all(plan.SEEDS[n] == 1 for n in plan.CHECK_RUNS)


def test_dry_run_and_report_list_a_spared_seed_and_count_no_time_for_it(tmp_path, capsys):
    out = str(tmp_path / "r")
    os.makedirs(out)
    write_state(out, evaluated(out, dict(SEEDS, **{"cls-pmlm": 75.0, "cls-pmlm-par": 60.0, "cls-pmlm-norel": 60.0})))
    assert reproduce.main(["--budget", "cpu", "--out", out, "--dry-run"]) == 0
    text = capsys.readouterr().out
    for n in ("cls-pmlm-s2", "eval-cls-pmlm-s2"):
        line = next(l for l in text.splitlines() if l.split()[:1] == [n])
        assert "not needed: " in line and "~" not in line, line
    assert reproduce.main(["--budget", "cpu", "--out", out, "--report-only"]) == 0
    with open(os.path.join(out, "RESULTS.md")) as f:
        md = f.read()
    assert "| cls-pmlm-s2 | not needed: " in md


def test_a_seed_spared_during_a_sitting_is_not_run_nor_requeued(tmp_path, capsys, monkeypatch):
    """The runner decides again when it reaches a run (its first seeds may have been evaluated since
    the sitting began): a run spared then is not run, and says so without the word a queue reads
    as "try again later" ("skip")."""
    out = str(tmp_path / "r")
    os.makedirs(out)
    write_state(out, evaluated(out, dict(SEEDS, **{"cls-pmlm": 75.0, "cls-pmlm-par": 60.0, "cls-pmlm-norel": 60.0})))
    looks = []

    def later(name, state, out):  # needed when the sitting lists its runs, spared when it reaches them
        looks.append(name)
        return not_needed(name, state, out) if looks.count(name) > 1 else None

    monkeypatch.setattr(reproduce, "not_needed", later)
    ran = []
    monkeypatch.setattr(reproduce, "execute", lambda *a, **k: ran.append(a) or (0, None, None))
    assert reproduce.main(["--budget", "cpu", "--out", out, "--only", r"^cls-pmlm-s2$", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert [a[1].name for a in ran] == ["pre-pmlm"]  # what it needed when listed; itself not run
    assert "cls-pmlm-s2: not needed: " in text and "skip " not in text, text
