"""Is a difference between two evaluated models more than the noise of the test sample and of
fine-tuning? Two sources of noise, added as variances:

* the test sample: a paired bootstrap over the examples both sides were scored on (Koehn 2004's
  method). Each side's score on an example is its mean over the side's fine-tuning seeds; 2,000
  draws of the examples with replacement give SE, the standard error of the mean difference over
  examples (example_se);
* the fine-tuning seed: a side of k seeds is the mean of k fine-tunings, each off the recipe's own
  mean by the seed spread sigma (the standard deviation of one run's test metric across seeds, on
  the same test examples), which adds sigma^2 (1/k_a + 1/k_b) to the difference's variance. One,
  two or three seeds cannot measure sigma for themselves: the report pools it over every run of the
  task evaluated under several seeds (seed_spread: summarization's ROUGE metrics, classification's
  accuracy) and states it with where it comes from.

The 95% interval is the normal one, difference +- 1.96 sqrt(SE^2 + sigma^2 (1/k_a + 1/k_b))
(seed_interval), and the smallest difference it would detect at 80% power is 2.8 times that
standard deviation (detectable). With sigma 0 it is the test sample's interval alone, which with
one seed a side calls a null effect "holds" or "reversed" about a third of the time.

An interval recorded by an earlier report (reproduce/archive.py's verdicts.json) came from a
bootstrap that drew each side's seeds with replacement besides the examples; archived_se takes the
example SE back out of it (its variance less what the seed draw added), and the report adds the
sigma term to that. A pair of a chain measured then only through its neighbours (a - c of
a > b > c) has an example SE at most the sum of theirs (a - c = (a - b) + (b - c) on every example).

    python -m reproduce.significance A/outputs-best-test.jsonl B/outputs-best-test.jsonl --sigma 0.6
    python -m reproduce.significance A/outputs.jsonl,A-s2/outputs.jsonl B/outputs.jsonl,B-s2/outputs.jsonl
    python -m reproduce.significance A B C D       # two pairs: A - B, then C - D

A side of several seeds is their outputs files joined by commas. --sigma gives the seed spread of
every metric compared; without it, sigma is pooled from the sides' own seeds where a side has two
or more, and is 0 otherwise, and the output says which. `python -m tools.pairs A B ... --json PATH`
writes the same rows as the table a doc's `study` block renders (tools/records.py), with the
command, machine and date.

Summarization outputs are compared on ROUGE-1/2/L, classification outputs on accuracy. The report
of reproduce/runner.py reads every ordering of either through it (verdict): "holds" only where the
interval lies above zero (or, for `>=` and `~`, inside the equivalence margin), "reversed" where it
lies below, "not resolved" otherwise.
"""

import argparse
import hashlib
import json
import math
import os
import sys

import numpy as np

Z = 1.96  # two-sided 95%
Z_POWER = 0.84  # 80% power
SEED_SHARE = 0.9  # archived_se: past this share of a recorded interval's variance, its seed draw's, keep it whole
CACHE = {}  # (digest of the file's bytes, metric) -> per-example scores: a copy of a file is not scored again
DIGESTS = {}  # (path, mtime, size) -> digest
COMPARED = {}  # ((path, mtime) of each side's files, metric) -> compare_seeds' result


def read_rows(path):
    """The rows of one of eval.py's outputs-*.jsonl files, or ValueError saying why it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte {e.start}): not one of eval.py's outputs files") from None
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(
                f"{path} line {i} is not a JSON record: give eval.py's outputs-*.jsonl file, not its "
                f"eval-*.json summary"
            ) from None
        if not isinstance(row, dict) or not {"source", "prediction", "reference"} <= set(row):
            raise ValueError(
                f"{path} line {i} has no source / prediction / reference: not one of eval.py's outputs "
                f"files (outputs-*.jsonl)"
            )
        bad = [k for k in ("source", "prediction", "reference") if not isinstance(row[k], str)]
        if bad:
            raise ValueError(f"{path} line {i}: {bad[0]} is {json.dumps(row[bad[0]])}, not a text")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path} holds no outputs")
    return rows


def kind_of(path):
    """'classify' or 'summarize': what an outputs file holds."""
    return "classify" if read_rows(path)[0].get("task") == "classify" else "summarize"


def check_pair(path_a, path_b):
    """ValueError, in one line, unless both files hold outputs of one task on the same examples."""
    ka, kb = kind_of(path_a), kind_of(path_b)
    if ka != kb:
        raise ValueError(f"{path_a} holds {ka} outputs and {path_b} {kb} outputs: compare files of one task")
    ra, rb = read_rows(path_a), read_rows(path_b)
    if len(ra) != len(rb) or [r["source"] for r in ra] != [r["source"] for r in rb]:
        raise ValueError(
            f"{path_a} ({len(ra)} examples) and {path_b} ({len(rb)}) were not scored on the same "
            f"examples (another --limit, split or data): compare runs evaluated on one sample"
        )


def metrics_of(path):
    """The metrics an outputs file is scored on: accuracy for classification, ROUGE otherwise."""
    rows = read_rows(path)
    return ("accuracy",) if rows and rows[0].get("task") == "classify" else ("rouge1", "rouge2", "rougeL")


def digest(path):
    """The SHA-1 of the file at path, read again only when its mtime or size changed."""
    st = os.stat(path)
    key = (path, st.st_mtime, st.st_size)
    if key not in DIGESTS:
        with open(path, "rb") as f:
            DIGESTS[key] = hashlib.sha1(f.read()).hexdigest()
    return DIGESTS[key]


def per_example(path, metric="rougeL"):
    """The per-example score (x100) of one of eval.py's outputs files: ROUGE F1, or accuracy (100 where
    the predicted label is the reference); and its sources (to pair on). ROUGE-1, 2 and L are scored
    in one pass and kept for the next call."""
    key = (digest(path), metric)
    if key not in CACHE:
        rows = read_rows(path)
        sources = [r["source"] for r in rows]
        if metric == "accuracy":
            CACHE[key] = ([100.0 * (r["prediction"] == r["reference"]) for r in rows], sources)
        else:
            from rouge_score import rouge_scorer

            names = ("rouge1", "rouge2", "rougeL") if metric in ("rouge1", "rouge2", "rougeL") else (metric,)
            scorer = rouge_scorer.RougeScorer(list(names), use_stemmer=True)
            scored = [scorer.score(r["reference"], r["prediction"]) for r in rows]
            for m in names:
                CACHE[(key[0], m)] = ([100 * s[m].fmeasure for s in scored], sources)
    return CACHE[key]


def bootstrap(x, samples=2000, seed=0):
    """(mean of x, low, high): the 95% interval of the mean over `samples` resamplings of x."""
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        raise ValueError("no scores to resample")
    means = x[np.random.default_rng(seed).integers(0, len(x), (samples, len(x)))].mean(1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(x.mean()), float(low), float(high)


def paired_bootstrap(a, b, samples=2000, seed=0):
    """(mean of a - b, low, high): the 95% interval of the mean difference over `samples`
    resamplings of the pairs."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired scores needed: {len(a)} against {len(b)}")
    return bootstrap(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64), samples, seed)


def interval(path, metric):
    """bootstrap of one outputs file's per-example metric: its mean and 95% interval, alone (a
    figure's error bar; an ordering reads the paired interval of compare, which is narrower)."""
    return bootstrap(per_example(path, metric)[0])


def compare(path_a, path_b, metric="rougeL"):
    """paired_bootstrap of two outputs files, which must hold outputs of one task on the same
    sources in the same order (check_pair)."""
    check_pair(path_a, path_b)
    (a, _), (b, _) = per_example(path_a, metric), per_example(path_b, metric)
    return paired_bootstrap(a, b)


def example_se(a, b, samples=2000, seed=0):
    """(mean difference of A - B, its standard error over the test examples), where a and b are
    (seeds, examples) score matrices on the same examples: each side's per-example mean over its
    seeds, paired, and the standard deviation of the mean difference over `samples` resamplings of
    the examples. The seeds are not drawn: their variance is seed_interval's sigma term."""
    a, b = np.atleast_2d(np.asarray(a, dtype=np.float64)), np.atleast_2d(np.asarray(b, dtype=np.float64))
    if a.shape[1] != b.shape[1] or not a.shape[1]:
        raise ValueError(f"paired scores needed: {a.shape[1]} examples against {b.shape[1]}")
    d = a.mean(0) - b.mean(0)
    means = d[np.random.default_rng(seed).integers(0, len(d), (samples, len(d)))].mean(1)
    return float(d.mean()), float(means.std())


def seed_interval(difference, se, sigma, k_a, k_b):
    """(low, high): the 95% normal interval of a difference whose standard error over the test
    examples is SE, between sides of k_a and k_b fine-tuning seeds whose seed spread is sigma."""
    half = Z * math.sqrt(se**2 + sigma**2 * (1 / k_a + 1 / k_b))
    return difference - half, difference + half


def seed_spread(groups):
    """(sigma, degrees of freedom): the seed spread pooled over groups, each the per-seed values of
    one run's metric under its seeds (a group of one says nothing and is left out); (None, 0) where
    no group has two seeds. Pooled as variances: sum (k - 1) s^2 / sum (k - 1)."""
    groups = [np.asarray(g, dtype=np.float64) for g in groups if len(g) > 1]
    dof = sum(len(g) - 1 for g in groups)
    if not dof:
        return None, 0
    return float(math.sqrt(sum(g.var(ddof=1) * (len(g) - 1) for g in groups) / dof)), dof


def archived_se(low, high, seeds_a, seeds_b):
    """The standard error over test examples inside a 95% interval [low, high] that an earlier report
    recorded, whose bootstrap drew each side's seeds with replacement besides the examples: the
    interval's variance less the variance the seed draw added (each side's per-seed metrics'
    population variance over its seed count). A seed draw that repeats a seed averages fewer seeds'
    per-example noise, so what is left is at least the example SE of example_se. Where the seed draw
    makes nearly all of the recorded variance (SEED_SHARE), what is left is the noise of the draws,
    and the recorded interval's SE is kept whole (wider, never narrower)."""
    recorded = ((high - low) / (2 * Z)) ** 2
    seeds = sum(float(np.var(s)) / len(s) for s in (seeds_a, seeds_b) if len(s))
    return math.sqrt(recorded - seeds if seeds < SEED_SHARE * recorded else recorded)


def _stamp(path):
    """A file as a comparison's cache knows it: its path and time, None where it is missing (check_pair
    then says so)."""
    return path, os.path.getmtime(path) if os.path.exists(path) else None


def compare_seeds(paths_a, paths_b, metric="rougeL"):
    """example_se of two sides, each a list of outputs files (one per fine-tuning seed), all of one
    task on the same sources in the same order; kept for the next call while no file changes (the
    runner rewrites its report after every run)."""
    key = (tuple(map(_stamp, paths_a)), tuple(map(_stamp, paths_b)), metric)
    if key not in COMPARED:
        for p in list(paths_a[1:]) + list(paths_b):
            check_pair(paths_a[0], p)
        a = [per_example(p, metric)[0] for p in paths_a]
        b = [per_example(p, metric)[0] for p in paths_b]
        COMPARED[key] = example_se(a, b)
    return COMPARED[key]


VERDICTS = ("holds", "reversed", "not resolved")


def verdict(op, low, high, margin=1.0):
    """One pair of an ordering 'A op B' read from the 95% interval [low, high] of A - B:
      >   holds above 0, reversed below 0;
      >=  holds above -margin (A no worse than B by more than the margin), reversed below it;
      ~   holds inside [-margin, margin], reversed wholly outside it;
    and 'not resolved' otherwise (the interval straddles the line)."""
    if op == ">":
        return "holds" if low > 0 else "reversed" if high < 0 else "not resolved"
    if op == ">=":
        return "holds" if low > -margin else "reversed" if high < -margin else "not resolved"
    if op == "~":
        return (
            "holds"
            if -margin < low and high < margin
            else "reversed"
            if low > margin or high < -margin
            else "not resolved"
        )
    raise ValueError(f"unknown operator {op!r}")


def detectable(low, high):
    """The smallest difference a comparison this wide would find at 95% confidence and 80% power:
    (1.96 + 0.84) standard errors, the standard error read from the interval's half-width."""
    return (high - low) / 2 / Z * (Z + Z_POWER)


def side_name(paths, files=False):
    """A side as its runs' directories (cls-mlae,cls-mlae-s2 for two seeds' outputs files), or with
    `files` as directory/file (x/outputs-best-test): what tells two files of one folder apart."""

    def one(p):
        d = os.path.basename(os.path.dirname(os.path.abspath(p)))
        return f"{d}/{os.path.basename(p).removesuffix('.jsonl')}" if files else d

    return ",".join(map(one, paths))


def pair_rows(files, sigma=None):
    """One row per pair of FILES (A B C D ...: A - B, then C - D; a side's seeds joined by commas)
    and per metric: the sides, seeds, examples, difference, the example SE, the seed spread sigma and
    where it comes from, the interval, the verdict of A > B and the effect it could detect; sigma
    None pools it from the sides' own seeds. ValueError, in one line, where two files cannot be
    paired or a file stands twice."""
    rows = []
    for first, second in zip(files[0::2], files[1::2]):
        side_a, side_b = ([p for p in a.split(",") if p] for a in (first, second))
        real = [os.path.realpath(p) for p in side_a + side_b]
        twice = next((p for p, r in zip(side_a + side_b, real) if real.count(r) > 1), None)
        if twice:
            raise ValueError(f"{twice} stands twice in the pair {first} {second}: compare two runs, each seed once")
        files_too = side_name(side_a) == side_name(side_b)  # two files of one folder: name them by file too
        for m in metrics_of(side_a[0]):
            mean, se = compare_seeds(side_a, side_b, m)
            s, where = sigma, "--sigma"
            if s is None:
                s, dof = seed_spread([[np.mean(per_example(p, m)[0]) for p in side] for side in (side_a, side_b)])
                where = f"the sides' seeds ({dof} degrees of freedom)"
            if s is None:
                s, where = 0.0, "none: one seed a side (give --sigma)"
            low, high = seed_interval(mean, se, s, len(side_a), len(side_b))
            rows.append(
                dict(
                    a=side_name(side_a, files_too),
                    b=side_name(side_b, files_too),
                    seeds=f"{len(side_a)}x{len(side_b)}",
                    n=len(read_rows(side_a[0])),
                    metric=m,
                    difference=mean,
                    se=se,
                    sigma=s,
                    sigma_from=where,
                    low=low,
                    high=high,
                    interval=f"[{low:+.2f}, {high:+.2f}]",
                    verdict=verdict(">", low, high),
                    detectable=detectable(low, high),
                )
            )
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m reproduce.significance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", help="outputs files in pairs, A B [C D ...]; a side's seeds joined by commas")
    p.add_argument(
        "--sigma",
        type=float,
        help="the seed spread of every metric compared (default: pooled from "
        "the sides' own seeds, 0 with one seed a side)",
    )
    try:
        a = p.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # --help: 0, with the docstring on stdout; a wrong call: 2
        return e.code
    if len(a.files) % 2:
        print(f"error: give the outputs files in pairs (A B [C D ...]); {len(a.files)} given", file=sys.stderr)
        return 2
    if a.sigma is not None and not a.sigma >= 0:
        print(f"error: --sigma {a.sigma}: a spread is 0 or more", file=sys.stderr)
        return 2
    try:
        rows = pair_rows(a.files, a.sigma)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for r in rows:
        print(
            f"{r['a']} - {r['b']}, {r['metric']}: {r['difference']:+.2f}, 95% interval {r['interval']} "
            f"({r['seeds']} seeds; example SE {r['se']:.2f}, seed spread {r['sigma']:.2f} from {r['sigma_from']}): "
            f"A > B {r['verdict']}, detectable {r['detectable']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
