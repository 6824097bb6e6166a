"""reproduce/significance.py: the paired bootstrap over test examples and seeds, the verdicts read
from its interval, and the command that compares evaluated runs."""
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
    assert [verdict(">=", lo, hi, 1.0) for lo, hi in ((-0.8, 0.5), (-1.5, 0.2), (-3.0, -1.2))] == \
        ["holds", "not resolved", "reversed"]
    assert [verdict("~", lo, hi, 1.0) for lo, hi in ((-0.8, 0.5), (-0.5, 1.5), (1.2, 2.0), (-2.0, -1.1))] == \
        ["holds", "not resolved", "reversed", "reversed"]


def test_seeds_widen_the_interval():
    """Two seeds a side that disagree widen a pair's interval beyond the examples' own noise; one
    seed a side is the paired bootstrap."""
    import numpy as np
    from reproduce import significance
    rng = np.random.default_rng(0)
    base = rng.normal(30, 10, 500)
    one = significance.seeded_bootstrap([base + 1], [base])
    assert one == significance.paired_bootstrap(list(base + 1), list(base)) or abs(one[0] - 1) < 1e-9
    calm = significance.seeded_bootstrap([base + 1, base + 1], [base, base])
    spread = significance.seeded_bootstrap([base + 3, base - 1], [base, base])
    assert abs(calm[0] - 1) < 1e-9 and abs(spread[0] - 1) < 1e-9
    assert spread[2] - spread[1] > 5 * (calm[2] - calm[1])


def test_seeded_bootstrap_scores_each_draw_as_the_draw_by_draw_reference():
    """The draws scored at once (examples as counts, a matrix product per side) give each draw the
    mean a draw-by-draw loop over the same generator gives, and so the same interval; a comparison
    is kept until one of its files changes."""
    import numpy as np
    from reproduce import significance

    def reference(a, b, samples=2000, seed=0):
        rng, n = np.random.default_rng(seed), a.shape[1]
        diffs = []
        for _ in range(samples):
            idx = rng.integers(0, n, n)
            sa, sb = rng.integers(0, len(a), len(a)), rng.integers(0, len(b), len(b))
            diffs.append(a[sa][:, idx].mean() - b[sb][:, idx].mean())
        return float(a.mean() - b.mean()), *map(float, np.quantile(diffs, [0.025, 0.975]))
    rng = np.random.default_rng(3)
    for ka, kb, n in ((1, 1, 37), (3, 2, 200), (2, 3, 1)):
        a, b = rng.normal(30, 10, (ka, n)), rng.normal(29, 10, (kb, n))
        assert np.allclose(significance.seeded_bootstrap(a, b, samples=300), reference(a, b, samples=300),
                           rtol=0, atol=1e-9)


def test_a_comparison_is_kept_until_its_files_change(tmp_path):
    import json as js
    from reproduce import significance

    def write(path, right, mtime):
        rows = [dict(task="classify", source=f"s{i}", prediction="x" if i < right else "y", reference="x")
                for i in range(20)]
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
        rows = [dict(task="classify", source=f"s{i}", prediction="p" if i < right else "q", reference="p")
                for i in range(20)]
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
        ("x,x-s2", "y", "2x1", 20, 25.0), ("x", "z", "1x1", 20, 20.0)]
    text = records.table(d)
    assert "| x,x-s2 | y | 2x1 | 20 | accuracy | +25.00 |" in text and "python -m tools.pairs" in text
    assert significance.main(files[:3]) == 2
    with pytest.raises(SystemExit):
        pairs.main(files[:3] + ["--json", out])


def outputs(path, right, n=400):
    """A classification outputs file whose first `right` examples are right."""
    import json as js
    rows = [dict(task="classify", source=f"s{i}", prediction="p" if i < right else "q", reference="p")
            for i in range(n)]
    path.write_text("\n".join(js.dumps(r) for r in rows))
    return str(path)


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
    assert significance.main([one, two]) == 0
    assert capsys.readouterr().out.startswith("x/outputs-best-test - x/outputs-last-test, accuracy: +5.00")
