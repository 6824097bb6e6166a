"""Is a difference between two evaluated models more than the test sample's noise? A paired
bootstrap over the examples both were scored on (Koehn 2004's method): resample the examples with
replacement, and read the 95% interval of the mean per-example difference.

    python bench/significance.py A/outputs-best-test-sample1000.jsonl B/outputs-best-test-sample1000.jsonl

Summarization outputs are compared on ROUGE-1/2/L, classification outputs on accuracy. The report
of bench/reproduce.py reads every ordering of either through it: "holds" only where the interval
lies above zero.
"""
import json
import os
import sys

import numpy as np

CACHE = {}  # (path, mtime, metric) -> per-example scores


def read_rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def metrics_of(path):
    """The metrics an outputs file is scored on: accuracy for classification, ROUGE otherwise."""
    rows = read_rows(path)
    return ("accuracy",) if rows and rows[0].get("task") == "classify" else ("rouge1", "rouge2", "rougeL")


def per_example(path, metric="rougeL"):
    """The per-example score (x100) of one of eval.py's outputs files: ROUGE F1, or accuracy (100 where
    the predicted label is the reference); and its sources (to pair on)."""
    key = (path, os.path.getmtime(path), metric)
    if key not in CACHE:
        rows = read_rows(path)
        if metric == "accuracy":
            scores = [100.0 * (r["prediction"] == r["reference"]) for r in rows]
        else:
            from rouge_score import rouge_scorer
            scorer = rouge_scorer.RougeScorer([metric], use_stemmer=True)
            scores = [100 * scorer.score(r["reference"], r["prediction"])[metric].fmeasure for r in rows]
        CACHE[key] = (scores, [r["source"] for r in rows])
    return CACHE[key]


def paired_bootstrap(a, b, samples=2000, seed=0):
    """(mean of a - b, low, high): the 95% interval of the mean difference over `samples`
    resamplings of the pairs."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired scores needed: {len(a)} against {len(b)}")
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    means = d[np.random.default_rng(seed).integers(0, len(d), (samples, len(d)))].mean(1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(d.mean()), float(low), float(high)


def compare(path_a, path_b, metric="rougeL"):
    """paired_bootstrap of two outputs files, which must hold the same sources in the same order."""
    (a, src_a), (b, src_b) = per_example(path_a, metric), per_example(path_b, metric)
    if src_a != src_b:
        raise ValueError(f"{path_a} and {path_b} were not scored on the same examples")
    return paired_bootstrap(a, b)


def verdict(op, low, high):
    """One pair of an ordering 'A op B' read from the interval of A - B: 'holds', 'reversed'
    (B better beyond the noise) or 'within noise' ('>=' holds unless reversed)."""
    if high < 0:
        return "reversed"
    if op == ">=" or low > 0:
        return "holds"
    return "within noise"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    for m in metrics_of(sys.argv[1]):
        mean, low, high = compare(sys.argv[1], sys.argv[2], m)
        print(f"{m}: A - B = {mean:+.2f}, 95% interval [{low:+.2f}, {high:+.2f}]: A > B {verdict('>', low, high)}")
