"""Is a difference between two evaluated models more than the test sample's noise? A paired
bootstrap over the examples both were scored on (Koehn 2004's method): resample the examples with
replacement, and read the 95% interval of the mean per-example difference.

    python reproduce/significance.py A/outputs-best-test-sample1000.jsonl B/outputs-best-test-sample1000.jsonl

Summarization outputs are compared on ROUGE-1/2/L, classification outputs on accuracy. The report
of reproduce/runner.py reads every ordering of either through it: "holds" only where the interval
lies above zero.
"""
import json
import os
import sys

import numpy as np

CACHE = {}  # (path, mtime, metric) -> per-example scores


def read_rows(path):
    """The rows of one of eval.py's outputs-*.jsonl files, or ValueError saying why it is not one."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror})") from None
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path} line {i} is not a JSON record: give eval.py's outputs-*.jsonl file, not its "
                             f"eval-*.json summary") from None
        if not isinstance(row, dict) or not {"source", "prediction", "reference"} <= set(row):
            raise ValueError(f"{path} line {i} has no source / prediction / reference: not one of eval.py's outputs "
                             f"files (outputs-*.jsonl)")
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
        raise ValueError(f"{path_a} ({len(ra)} examples) and {path_b} ({len(rb)}) were not scored on the same "
                         f"examples (another --limit, split or data): compare runs evaluated on one sample")


def metrics_of(path):
    """The metrics an outputs file is scored on: accuracy for classification, ROUGE otherwise."""
    rows = read_rows(path)
    return ("accuracy",) if rows and rows[0].get("task") == "classify" else ("rouge1", "rouge2", "rougeL")


def per_example(path, metric="rougeL"):
    """The per-example score (x100) of one of eval.py's outputs files: ROUGE F1, or accuracy (100 where
    the predicted label is the reference); and its sources (to pair on). ROUGE-1, 2 and L are scored
    in one pass and kept for the next call."""
    key = (path, os.path.getmtime(path), metric)
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
                CACHE[(path, key[1], m)] = ([100 * s[m].fmeasure for s in scored], sources)
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


def verdict(op, low, high):
    """One pair of an ordering 'A op B' read from the interval of A - B: 'holds', 'reversed'
    (B better beyond the noise) or 'within noise' ('>=' holds unless reversed)."""
    if high < 0:
        return "reversed"
    if op == ">=" or low > 0:
        return "holds"
    return "within noise"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or any(a.startswith("-") for a in argv):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        check_pair(*argv)
        for m in metrics_of(argv[0]):
            mean, low, high = compare(argv[0], argv[1], m)
            print(f"{m}: A - B = {mean:+.2f}, 95% interval [{low:+.2f}, {high:+.2f}]: A > B {verdict('>', low, high)}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
