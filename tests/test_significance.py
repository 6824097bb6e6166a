"""reproduce/significance.py: the interval over the test examples and the fine-tuning seed, the
verdicts read from it, and the command that compares evaluated runs."""

import os


def test_paired_bootstrap():
    """An ordering holds only beyond the noise of the sample: identical scores are not resolved, a
    margin on every example holds, a wide spread around a small margin does not."""
    from reproduce import significance

    a = [float(i % 7) for i in range(300)]
    mean, low, high = significance.paired_bootstrap(a, a)
    assert (mean, low, high) == (0.0, 0.0, 0.0) and significance.verdict(">", low, high) == "not resolved"
    assert significance.verdict(">=", low, high) == "holds" and significance.verdict("~", low, high) == "holds"
    mean, low, high = significance.paired_bootstrap([x + 1 for x in a], a)
    assert abs(mean - 1) < 1e-9 and significance.verdict(">", low, high) == "holds"
    assert significance.verdict(">", *significance.paired_bootstrap(a, [x + 1 for x in a])[1:]) == "reversed"
    mean, low, high = significance.bootstrap(a)  # one run's interval: around its mean, narrower with more examples
    _, low4, high4 = significance.bootstrap(a * 4)
    assert low < mean == sum(a) / len(a) < high and high - low > high4 - low4
    noisy = [x + (20 if i % 2 else -19.8) for i, x in enumerate(a)]  # +0.1 on average, spread 20
    mean, low, high = significance.paired_bootstrap(noisy, a)
    assert low < 0 < mean < high and significance.verdict(">", low, high) == "not resolved"
    assert significance.detectable(low, high) > (high - low) / 2 > 0  # more than the half-width: 80% power


def test_verdicts_with_a_margin():
    """`>=` is non-inferiority within the margin, `~` equivalence within it; a straddling interval
    is not resolved."""
    from reproduce.significance import verdict

    assert [verdict(">=", lo, hi, 1.0) for lo, hi in ((-0.8, 0.5), (-1.5, 0.2), (-3.0, -1.2))] == [
        "holds",
        "not resolved",
        "reversed",
    ]
    assert [verdict("~", lo, hi, 1.0) for lo, hi in ((-0.8, 0.5), (-0.5, 1.5), (1.2, 2.0), (-2.0, -1.1))] == [
        "holds",
        "not resolved",
        "reversed",
        "reversed",
    ]


def test_the_seed_term_widens_one_seed_sides_by_the_right_amount():
    """The interval adds sigma^2 (1/k_a + 1/k_b) to the example SE's variance: one seed a side with a
    known sigma widens it to exactly 1.96 sqrt(SE^2 + 2 sigma^2); three seeds a side less; sigma 0 is
    the test sample's interval alone."""
    import math

    from reproduce.significance import detectable, seed_interval

    low, high = seed_interval(1.0, 0.4, 0.6, 1, 1)
    assert math.isclose(high - 1.0, 1.96 * math.sqrt(0.4**2 + 2 * 0.6**2)) and math.isclose(1.0 - low, high - 1.0)
    assert math.isclose(seed_interval(1.0, 0.4, 0.0, 1, 1)[1] - 1.0, 1.96 * 0.4)
    three = seed_interval(1.0, 0.4, 0.6, 3, 3)
    assert math.isclose(three[1] - 1.0, 1.96 * math.sqrt(0.4**2 + 2 * 0.6**2 / 3)) and three[1] < high
    assert math.isclose(detectable(low, high), 2.8 * math.sqrt(0.4**2 + 2 * 0.6**2))


def outputs(path, right, n=400):
    """A classification outputs file whose first `right` examples are right."""
    import json as js

    rows = [
        dict(task="classify", source=f"s{i}", prediction="p" if i < right else "q", reference="p") for i in range(n)
    ]
    path.write_text("\n".join(js.dumps(r) for r in rows))
    return str(path)


def test_a_one_seed_pair_is_not_resolved_by_the_test_sample_alone(tmp_path):
    """Two runs 5 points apart on 400 examples that differ only there: the examples alone say 'holds';
    a seed spread of 3 points a run (one seed a side) leaves it not resolved, with the interval the
    sigma term makes. Dropping sigma would keep 'holds'."""
    import math

    from reproduce import significance

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = outputs(tmp_path / "a" / "o.jsonl", 220), outputs(tmp_path / "b" / "o.jsonl", 200)
    (alone,) = significance.pair_rows([a, b], sigma=0.0)
    assert alone["difference"] == 5.0 and alone["verdict"] == "holds" and alone["low"] > 0
    (row,) = significance.pair_rows([a, b], sigma=3.0)
    half = 1.96 * math.sqrt(row["se"] ** 2 + 2 * 3.0**2)
    assert math.isclose(row["high"] - row["low"], 2 * half) and row["verdict"] == "not resolved"
    assert row["sigma"] == 3.0 and row["sigma_from"] == "--sigma" and math.isclose(row["detectable"], half / 1.96 * 2.8)
    # without --sigma, one seed a side has no spread of its own: 0, and the row says so
    assert significance.pair_rows([a, b])[0]["sigma_from"].startswith("none: one seed a side")


def test_the_example_se_and_the_pooled_seed_spread():
    """example_se resamples each side's per-example mean over its seeds (the seeds are the sigma
    term's, not drawn); seed_spread pools the variances of runs with several seeds, by their degrees
    of freedom, and says nothing without one."""
    import math

    import numpy as np
    from reproduce import significance

    rng = np.random.default_rng(0)
    a, b = rng.normal(30, 10, (2, 500)), rng.normal(29, 10, (1, 500))
    assert significance.example_se(a, b) == significance.example_se(a.mean(0, keepdims=True), b)
    mean, se = significance.example_se(a, b)
    d = a.mean(0) - b[0]
    assert math.isclose(mean, d.mean()) and abs(se / (d.std() / math.sqrt(500)) - 1) < 0.1
    sigma, dof = significance.seed_spread([[1.0, 2.0, 3.0], [5.0, 5.0], [7.0]])  # variances 1 and 0; [7] says nothing
    assert dof == 3 and math.isclose(sigma, math.sqrt(2 / 3))
    assert significance.seed_spread([[7.0], []]) == (None, 0)


def test_an_archived_interval_gives_back_its_example_se():
    """An interval an earlier report recorded drew each side's seeds besides the examples (the
    reference below is that bootstrap, draw by draw); archived_se takes the seed draw's variance out
    of it, which leaves the example SE of example_se or a little more, never less by much."""
    import numpy as np
    from reproduce import significance

    def recorded(a, b, samples=2000, seed=0):  # the bootstrap of the reports before the seed term
        rng, n = np.random.default_rng(seed), a.shape[1]
        diffs = []
        for _ in range(samples):
            idx = rng.integers(0, n, n)
            sa, sb = rng.integers(0, len(a), len(a)), rng.integers(0, len(b), len(b))
            diffs.append(a[sa][:, idx].mean() - b[sb][:, idx].mean())
        return np.quantile(diffs, [0.025, 0.975])

    rng = np.random.default_rng(1)
    common = rng.normal(30, 10, 800)
    # (seeds a side, how far apart a side's seeds are, per-example noise of a seed): the spreads of
    # results/cpu-budget, where a seed's spread is of the order of the example SE
    for ka, kb, shift, noise in ((1, 1, 0.0, 6), (3, 3, 0.5, 6), (3, 1, 1.0, 12), (3, 3, 1.0, 12)):
        a = common + rng.normal(0, noise, (ka, 800)) + shift * np.arange(ka)[:, None]
        b = common + rng.normal(0, noise, (kb, 800))
        low, high = recorded(a, b)
        se = significance.example_se(a, b)[1]
        got = significance.archived_se(low, high, a.mean(1), b.mean(1))
        assert 0.93 * se < got < 1.4 * se, (ka, kb, got, se)
        if ka > 1:  # the seed draw's variance is what it takes out
            assert (high - low) / 2 / 1.96 > 1.15 * got
    # seeds 2 points apart against an example SE of 0.17: the seed draw is nearly all the recorded
    # variance, and the recorded SE stands whole
    a, b = common + rng.normal(0, 6, (3, 800)) + 2.0 * np.arange(3)[:, None], common + rng.normal(0, 6, (3, 800))
    low, high = recorded(a, b)
    assert significance.archived_se(low, high, a.mean(1), b.mean(1)) == (high - low) / 2 / 1.96


def test_the_command_line(tmp_path, capsys):
    """--help prints the docstring and exits 0; one file on both sides is refused; two outputs files
    of one folder are named by file, not 'x - x'."""
    from reproduce import significance

    assert significance.main(["--help"]) == 0
    assert "paired bootstrap over the examples" in capsys.readouterr().out
    (tmp_path / "x").mkdir()
    one = outputs(tmp_path / "x" / "outputs-best-test.jsonl", 220)
    two = outputs(tmp_path / "x" / "outputs-last-test.jsonl", 200)
    assert significance.main([one, one]) == 2
    assert "stands twice" in capsys.readouterr().err
    assert significance.main([one + "," + two, two]) == 2
    assert significance.main([one, two, "--sigma", "0.5"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("x/outputs-best-test - x/outputs-last-test, accuracy: +5.00")
    assert "seed spread 0.50 from --sigma" in printed
    assert significance.main([one, two, "--sigma", "-1"]) == 2


def test_a_comparison_is_kept_until_its_files_change(tmp_path):
    import json as js
    from reproduce import significance

    def write(path, right, mtime):
        rows = [
            dict(task="classify", source=f"s{i}", prediction="x" if i < right else "y", reference="x")
            for i in range(20)
        ]
        path.write_text("\n".join(js.dumps(r) for r in rows))
        os.utime(path, (mtime, mtime))
        return str(path)

    a, b = write(tmp_path / "a.jsonl", 15, 1000), write(tmp_path / "b.jsonl", 10, 1000)
    first = significance.compare_seeds([a], [b], "accuracy")
    assert first[0] == 25.0 and significance.compare_seeds([a], [b], "accuracy") is first
    write(tmp_path / "b.jsonl", 5, 2000)  # scored again: a new file
    assert significance.compare_seeds([a], [b], "accuracy")[0] == 50.0


def test_pairs_are_written_as_a_table(tmp_path, capsys):
    """Several pairs in one call: one row per pair and metric, the sides named by their runs'
    directories; tools.pairs writes them as the table a doc's study block renders; files not in
    pairs are refused by both."""
    import json as js

    import pytest

    from reproduce import significance
    from tools import pairs, records

    paths = {}
    for run, right in (("x", 16), ("x-s2", 14), ("y", 10), ("z", 12)):
        (tmp_path / run).mkdir()
        rows = [
            dict(task="classify", source=f"s{i}", prediction="p" if i < right else "q", reference="p")
            for i in range(20)
        ]
        paths[run] = str(tmp_path / run / "outputs-best-test.jsonl")
        with open(paths[run], "w") as f:
            f.write("\n".join(js.dumps(r) for r in rows))
    files = [paths["x"] + "," + paths["x-s2"], paths["y"], paths["x"], paths["z"]]
    assert significance.main(files) == 0
    assert "x,x-s2 - y, accuracy: +25.00" in capsys.readouterr().out
    out = str(tmp_path / "pairs.json")
    assert pairs.main(files + ["--json", out]) == 0
    with open(out) as f:
        d = js.load(f)
    assert [(r["a"], r["b"], r["seeds"], r["n"], r["difference"]) for r in d["rows"]] == [
        ("x,x-s2", "y", "2x1", 20, 25.0),
        ("x", "z", "1x1", 20, 20.0),
    ]
    text = records.table(d)
    assert "| x,x-s2 | y | 2x1 | 20 | accuracy | +25.00 |" in text and "python -m tools.pairs" in text
    assert significance.main(files[:3]) == 2
    with pytest.raises(SystemExit):
        pairs.main(files[:3] + ["--json", out])
