"""Which further fine-tuning seeds the claims need. The central claims' runs get all their seeds
(plan.SEEDS). A further seed taken in the last stage (NAME-s2, NAME-s3 of another claim's run, or
of a control) runs only where a claim needs it: where some pair of a claim that reads NAME has its
two first seeds less than plan.SEED_GAP points apart on the claim's metric, or cannot be read yet.
Where every such pair is SEED_GAP or more apart, one seed a side decides the pair, and the seed's
hour goes to a claim it can change. The runner decides when it reaches the run, from the first
seeds' evaluations as they are then; --dry-run and RESULTS.md say which seeds were left out and why.
"""
import os

from reproduce.plan import (BY_NAME, ORDERINGS, SEED_GAP, STAGES, needs_of, parse_chain, seed_number, seed_one,
                            stage_of)
from reproduce.runstate import eval_results

LAST_STAGE = len(STAGES) - 1  # the further seeds of the other claims and of the controls


def pairs_reading(name):
    """(a, b, metric) of each adjacent pair of a claim's chain that names run NAME, timings apart (a
    further seed does not decide a latency)."""
    pairs = []
    for _, _, metric, chain, _ in ORDERINGS:
        names, _ = parse_chain(chain)
        if metric == "latency_ms" or name not in names:
            continue
        i = names.index(name)
        pairs += [(names[j], names[j + 1], metric) for j in (i - 1, i) if 0 <= j < len(names) - 1]
    return pairs


def first_seed_value(state, out, name, metric):
    """Run NAME's test METRIC from its evaluation's result, or None where it has none yet."""
    value = next(iter(eval_results(state, "eval-" + name, out)), {}).get(metric)
    return float(value) if isinstance(value, (int, float)) else None


def not_needed(name, state, out):
    """Why run NAME (a fine-tuning, or the evaluation of one) need not run, or None where it runs:
    a further seed of the last stage whose every compared pair has its first seeds at least
    SEED_GAP points apart."""
    run = BY_NAME[name]
    if run.script == "eval":
        name = needs_of(run)[0]
    if seed_number(name) == 1 or stage_of(name) != LAST_STAGE or not os.path.isdir(out):
        return None
    gaps = []
    for a, b, metric in pairs_reading(seed_one(name)):
        va, vb = first_seed_value(state, out, a, metric), first_seed_value(state, out, b, metric)
        if va is None or vb is None or abs(va - vb) < SEED_GAP:
            return None
        gaps.append(f"{a} - {b} {va - vb:+.2f} {metric}")
    if not gaps:
        return None
    return f"not needed: first seeds {SEED_GAP:g} or more points apart ({'; '.join(gaps)})"
