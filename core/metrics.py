"""How eval.py and finetune.py score outputs: ROUGE-1/2/L F1 for summaries; accuracy and macro-F1
for a classifier's labels, and for the majority class, classification's floor (as LEAD is
summarization's)."""

import numpy as np

from .errors import UserError


def rouge(predictions, references):
    """ROUGE-1/2/L F1 (x100) with stemming, averaged over examples (rouge-score). Imported here,
    where it is used: training, the kernels and the benchmarks run without it."""
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise UserError(
            "ROUGE needs the rouge-score package (pip install rouge-score); without it, "
            "fine-tune with --rouge-examples 0"
        ) from None
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    totals = np.zeros(3)
    for p, r in zip(predictions, references):
        s = scorer.score(r, p)
        totals += [s["rouge1"].fmeasure, s["rouge2"].fmeasure, s["rougeL"].fmeasure]
    r1, r2, rl = 100 * totals / max(1, len(predictions))
    return dict(rouge1=float(r1), rouge2=float(r2), rougeL=float(rl))


def label_scores(pred, gold, n_labels):
    """Accuracy and macro-F1 (x100) of predicted label ids against the gold ones (-1, a label the
    model never saw in training, counts as wrong)."""
    return dict(
        accuracy=100 * sum(p == g for p, g in zip(pred, gold)) / len(gold),
        macro_f1=100 * macro_f1(pred, gold, n_labels),
    )


def macro_f1(pred, gold, n_labels):
    """Mean over the labels that occur in gold or pred of the per-label F1."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    scores = []
    for c in range(n_labels):
        tp = np.sum((pred == c) & (gold == c))
        fp, fn = np.sum((pred == c) & (gold != c)), np.sum((pred != c) & (gold == c))
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0


def majority_scores(targets):
    """The scores of the most frequent label of the examples predicted for every one of them: the
    best any model that ignores its input can score there."""
    names = sorted(set(targets))
    gold = [names.index(t) for t in targets]
    top = max(range(len(names)), key=gold.count)
    return label_scores([top] * len(gold), gold, len(names))
