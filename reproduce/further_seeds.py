"""Which further fine-tuning seeds the claims need. Every compared run's first seed runs; a further
seed (NAME-s2, NAME-s3 ..., all in the last stage) runs only where a pair of a claim that reads
NAME needs it: one that is not resolved now and would be with one more seed a side if its
difference held, that is where

    |difference| > 1.96 sqrt(SE^2 + sigma^2 (1/(k_a + 1) + 1/(k_b + 1)))

(SE the pair's standard error over the test examples, sigma the seed spread of its metric, k_a and
k_b its seeds now: reproduce/significance.py). A pair resolved at one seed a side, or too close
for another seed to resolve, does not take the seed's hour from a claim it can change; a pair not
read yet gives no reason until it is. The runner decides when it reaches the run, from the
evaluations as they are then; --dry-run and RESULTS.md say which seeds were left out and why. A
first seed that only claims with archived verdicts read
(their outputs gone, the verdict kept: reproduce/claims.py) is not run again.
"""

import math
import os

from reproduce import significance
from reproduce.claims import archived_seed_runs, archived_verdicts, compared, seed_spread
from reproduce.orderings import CHECKS, ORDERINGS, chain_pairs, parse_chain
from reproduce.plan import (
    BY_NAME,
    PLAN,
    STAGES,
    needs_of,
    seed_number,
    seed_one,
    seeds_of,
    stage_of,
)
from reproduce.runstate import eval_results

LAST_STAGE = len(STAGES) - 1  # the further seeds


def pairs_reading(name):
    """(a, b, metric) of each pair of a claim's chain that names run NAME (every pair of the chain,
    adjacent or not), timings apart (a further seed does not decide a latency)."""
    return [
        (a, b, metric)
        for _, _, metric, chain, _ in ORDERINGS
        if metric != "latency_ms"
        for a, b, _, _ in chain_pairs(chain)
        if name in (a, b)
    ]


def evaluated(state, out):
    """{run: its test metrics} of every fine-tuning evaluated in OUT (its first result row)."""
    names = {r.name for r in PLAN if r.script == "finetune"}
    return {n: rows[0] for n in names if (rows := eval_results(state, "eval-" + n, out))}


def needs_a_seed(d, se, sigma, k_a, k_b):
    """Whether a pair whose interval straddles zero now would lie off it with one more seed a side."""
    return abs(d) > significance.Z * math.sqrt(se**2 + sigma**2 * (1 / (k_a + 1) + 1 / (k_b + 1)))


def archived_only(name, out):
    """Why fine-tuning NAME's first seed need not run again: every claim that reads it keeps an
    archived verdict in OUT (reproduce/archive.py, `verdicts`), whose runs' outputs are gone, and no
    check (orderings.CHECKS) reads it; else None."""
    kept = archived_verdicts(out)
    claims = [(chain, metric) for _, _, metric, chain, _ in ORDERINGS if name in parse_chain(chain)[0]]
    checked = any(name in parse_chain(chain)[0] for _, _, _, chain in CHECKS)
    if not claims or checked or not all(c in kept for c in claims):
        return None
    dates = sorted({f"{kept[c]['commit']}, {kept[c]['written']}" for c in claims})
    return f"not needed: every claim reading it keeps its archived verdict ({'; '.join(dates)})"


def not_needed(name, state, out):
    """Why run NAME (a fine-tuning, or its evaluation) need not run, or None where it runs: a first
    seed whose claims all keep archived verdicts (archived_only); a further seed whose every pair is
    resolved now, or would stay unresolved with one more seed a side."""
    run = BY_NAME[name]
    if run.script == "eval":
        name = needs_of(run)[0]
    if BY_NAME[name].script != "finetune" or not os.path.isdir(out):
        return None
    if seed_number(name) == 1:
        return archived_only(name, out)
    if stage_of(name) != LAST_STAGE:
        return None
    metrics = evaluated(state, out)
    spread = seed_spread(metrics, archived_seed_runs(out))
    seen = dict(state, _out=out)
    below = [n for n in seeds_of(seed_one(name), list(BY_NAME)) if seed_number(n) < seed_number(name)]
    if missing := [n for n in below if n not in metrics]:  # the runner reaches the lower seeds first
        return f"not needed while {missing[0]} is not evaluated"
    reasons = []
    for a, b, metric in pairs_reading(seed_one(name)):
        sa, sb = ([n for n in seeds_of(x, list(BY_NAME)) if n in metrics] for x in (a, b))
        read = compared(seen, sa, sb, metric) if sa and sb else None
        sigma = spread.get(metric, {}).get("sigma")
        if read is None or sigma is None:  # not read yet: no reason for the seed until it is
            reasons.append(f"{a} - {b} not read yet")
            continue
        d, se = read
        low, high = significance.seed_interval(d, se, sigma, len(sa), len(sb))
        if low <= 0 <= high and needs_a_seed(d, se, sigma, len(sa), len(sb)):
            return None
        why = "resolved" if not low <= 0 <= high else "too close for one more seed a side"
        reasons.append(f"{a} - {b} {d:+.2f} {metric} [{low:+.2f}, {high:+.2f}] {why}")
    if not reasons:
        return "not needed: no claim reads it"
    return "not needed: " + "; ".join(reasons)
