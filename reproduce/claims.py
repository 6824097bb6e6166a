"""The papers' claims read from OUT (RESULTS.md's "The papers' orderings here"; results.json's
orderings, seed_spread and summary): each ordering of orderings.ORDERINGS read pair by pair.

* Every pair a chain claims is read: each link, and the runs further apart (a > b > c also claims
  a > c, orderings.chain_pairs), each from its interval over the test examples and the fine-tuning
  seeds (reproduce/significance.py), with the smallest difference it would detect.
* The seed spread sigma of each metric is pooled over every run evaluated under several seeds:
  OUT's, and the runs behind the archived verdicts (below), each named with its source.
* The papers' pairs decide a claim: it holds when every one holds, is reversed when one is, and is
  not resolved otherwise. A pair with one of the project's controls (orderings.CONTROLS) is shown apart
  and decides nothing.
* A claim OUT cannot read (its runs' per-example outputs lost with a machine before the archive
  kept them) keeps the verdict an earlier report measured. OUT/verdicts.json, which
  `python -m reproduce.archive restore` puts there, holds each such claim as that report recorded
  it, with its commit and date and its runs' metrics per seed; the claim is shown as archived,
  with its pairs read again with the seed term (significance.archived_se), never as "not measured".
"""

import json
import os
import sys

from reproduce import significance
from reproduce.orderings import CONTROLS, MARGIN, ORDERINGS, chain_pairs, parse_chain
from reproduce.plan import seed_one, seeds_of
from reproduce.runstate import run_files

VERDICTS_FILE = "verdicts.json"  # in OUT and in the archive: the claims an earlier report measured
SPREAD_METRICS = ("rouge1", "rouge2", "rougeL", "accuracy")  # summarization's and classification's


def outputs_of(state, run_name):
    """The per-example outputs file (eval.py's outputs-*.jsonl) of a run's first evaluation, or None."""
    for f in list(run_files(state, "eval-" + run_name, state["_out"]))[:1]:
        path = os.path.join(
            os.path.dirname(f), "outputs-" + os.path.basename(f)[len("eval-") : -len(".json")] + ".jsonl"
        )
        if os.path.exists(path):
            return path
    return None


def mean_over_seeds(metrics, names, metric):
    """The mean of a metric over the seeds of a run that were evaluated, and those seeds."""
    got = [n for n in names if metrics.get(n, {}).get(metric) is not None]
    return (sum(metrics[n][metric] for n in got) / len(got) if got else None), got


def compared(state, a, b, metric):
    """significance.compare_seeds of two sides, each a list of runs (the seeds of one fine-tuning), on
    a ROUGE metric or accuracy: (mean difference, its example SE), or None where it cannot be read
    (another metric, no outputs file, no rouge-score, different examples)."""
    pa, pb = [outputs_of(state, n) for n in a], [outputs_of(state, n) for n in b]
    if not (metric.startswith("rouge") or metric == "accuracy") or not all(pa) or not all(pb):
        return None
    try:
        return significance.compare_seeds(pa, pb, metric)
    except (ImportError, ValueError) as e:
        print(f"note: no interval for {'+'.join(a)} against {'+'.join(b)}: {e}", file=sys.stderr)
        return None


def diff_examples(state, name):
    """How many test examples a run's outputs file holds (what a pair's interval is over)."""
    path = outputs_of(state, name)
    return len(significance.read_rows(path)) if path else None


# -----------------------------------------------------------------------------
# the archived verdicts and the seed spread


def verdicts_file(out):
    """OUT/verdicts.json (reproduce/archive.py): {"claims": [...], "seed_runs": [...]}, empty where absent."""
    path = os.path.join(out, VERDICTS_FILE)
    if not os.path.exists(path):
        return dict(claims=[])
    with open(path) as f:
        return json.load(f)


def archived_verdicts(out):
    """The claims OUT/verdicts.json keeps: {(chain, metric): its record}."""
    return {(r["chain"], r["metric"]): r for r in verdicts_file(out)["claims"]}


def archived_seed_runs(out):
    """The archived records whose runs the seed spread pools: each claim OUT/verdicts.json keeps, and
    the seed groups it keeps of claims measured again since (its `seed_runs`, reproduce/archive.py)."""
    d = verdicts_file(out)
    return d["claims"] + d.get("seed_runs", [])


def same(a, b):
    """Whether two records of a run's test metrics are one measurement (every spread metric equal)."""
    return all(a.get(m) == b.get(m) for m in SPREAD_METRICS)


def seed_spread(metrics, archived):
    """{metric: dict(sigma, dof, runs)}: significance.seed_spread over every run evaluated under
    several seeds, OUT's (metrics) and those behind the archived records (archived_seed_runs), each
    run in `runs` with where it was measured, its seeds and their standard deviation."""
    groups = {}  # (where, run) -> {seed's run: its metrics}
    for name, m in metrics.items():
        groups.setdefault(("here", seed_one(name)), {})[name] = m
    for rec in archived:  # two claims of one report name one measurement of a run
        for name, m in rec.get("runs", {}).items():
            groups.setdefault((f"archived {rec['commit']}", seed_one(name)), {})[name] = m
    for (where, run), seeds in list(groups.items()):  # a claim measured here is archived as it reads here
        if where != "here" and all(metrics.get(n) is not None and same(metrics[n], m) for n, m in seeds.items()):
            del groups[(where, run)]
    spread = {}
    for metric in SPREAD_METRICS:
        runs, values = [], []
        for (where, run), seeds in sorted(groups.items(), key=lambda kv: (kv[0][0] != "here", kv[0])):
            v = [float(s[metric]) for s in seeds.values() if isinstance(s.get(metric), (int, float))]
            if len(v) > 1:
                values.append(v)
                runs.append(dict(run=run, source=where, seeds=len(v), sd=significance.seed_spread([v])[0]))
        sigma, dof = significance.seed_spread(values)
        spread[metric] = dict(sigma=sigma, dof=dof, runs=runs)
    return spread


def spread_text(spread):
    """The seed spread of each metric, where it comes from, as RESULTS.md states it."""
    parts = []
    for metric, s in spread.items():
        if s["sigma"] is None:
            parts.append(f"{metric}: none measured (its intervals cover the test examples only)")
            continue
        runs = ", ".join(f"{r['run']} {r['sd']:.2f} ({r['seeds']} seeds, {r['source']})" for r in s["runs"])
        parts.append(f"{metric} **{s['sigma']:.2f}** ({s['dof']} degrees of freedom: {runs})")
    return "; ".join(parts)


# -----------------------------------------------------------------------------
# a claim: its pairs and its verdict


def claim_verdict(pairs, missing):
    """A claim's verdict from its pairs, the papers' only (a control's decides nothing): reversed where
    one is (whatever is still to run), not measured while a run of the paper's is missing, else not
    resolved where one is, else holds. `missing`: the runs not measured, as the verdict names them."""
    lost = [n for n in missing if n.split()[0] not in CONTROLS]
    verdicts = [p["verdict"] for p in pairs if not p["control"]]
    if "reversed" in verdicts:
        return "reversed" + (f" (not measured: {', '.join(lost)})" if lost else "")
    if lost:
        return "not measured (" + ", ".join(lost) + ")"
    return "not resolved" if "not resolved" in verdicts else "holds"


def with_interval(pair, se, sigma, n=None):
    """A pair read from its example SE and the seed spread: its interval, verdict, detectable effect."""
    low, high = significance.seed_interval(pair["difference"], se, sigma or 0.0, *pair["seeds"])
    pair.update(
        se=se,
        sigma=sigma,
        low=low,
        high=high,
        verdict=significance.verdict(pair["op"], low, high, MARGIN),
        detectable=significance.detectable(low, high),
    )
    if n is not None:
        pair["n"] = n
    return pair


def recipe_dtypes(state, resolved, names):
    """The compute dtypes a side's runs trained in, as the runner recorded them: (its pretraining's,
    its fine-tunings'), each a sorted tuple (the pretraining's empty for a run from no pretraining),
    None where a record has none."""
    runs = state.get("runs", {})

    def kinds(ns):
        got = [runs.get(n, {}).get("dtype") for n in ns]
        return None if not got or None in got else tuple(sorted(set(got)))

    pre = sorted({d for n in names for d in resolved.get(n, ([], []))[1] if d.startswith("pre-")})
    return kinds(pre) if pre else (), kinds(names)


def ordering(state, resolved, metrics, stale_names, metric, chain, spread):
    """One claim read from OUT: its runs' values (means over seeds), each pair's difference,
    interval and verdict, the papers' pairs apart from the controls', and the claim's verdict."""
    names, _ = parse_chain(chain)
    vals, used = {}, {}
    for n in names:
        vals[n], used[n] = mean_over_seeds(metrics, seeds_of(n, list(resolved)), metric)
    sigma = spread.get(metric, {}).get("sigma")
    pairs = []
    for a, b, op, adjacent in chain_pairs(chain):
        if vals[a] is None or vals[b] is None:
            continue
        pair = dict(
            a=a,
            b=b,
            op=op,
            adjacent=adjacent,
            control=a in CONTROLS or b in CONTROLS,
            seeds=[len(used[a]), len(used[b])],
            difference=vals[a] - vals[b],
        )
        (pa, fa), (pb, fb) = recipe_dtypes(state, resolved, used[a]), recipe_dtypes(state, resolved, used[b])
        known = None not in (pa, fa, pb, fb)
        if known and (fa != fb or (pa and pb and pa != pb)):  # not one recipe on both sides: said beside the pair
            pair["dtypes"] = {a: [pa, fa], b: [pb, fb]}
        diff = None if metric == "latency_ms" else compared(state, used[a], used[b], metric)
        if metric == "latency_ms":  # the means' order
            better = vals[a] < vals[b] if op == "<" else vals[a] > vals[b]
            pair["verdict"] = "holds" if better else "reversed"
        elif diff is None:
            pair.update(verdict="not resolved", note="no interval: its per-example outputs cannot be read")
        else:
            pair["difference"] = diff[0]
            with_interval(pair, diff[1], sigma, diff_examples(state, used[a][0]))
        pairs.append(pair)
    missing = [n + (" is stale" if n in stale_names else "") for n in names if vals[n] is None]
    measured = sorted((n for n in names if vals[n] is not None), key=lambda n: vals[n], reverse=metric != "latency_ms")
    here = (" < " if metric == "latency_ms" else " > ").join(f"{n} {vals[n]:.2f}" for n in measured)
    return dict(
        metric=metric,
        chain=chain,
        values=vals,
        seeds={n: used[n] for n in names},
        pairs=[p for p in pairs if not p["control"]],
        controls=[p for p in pairs if p["control"]],
        here=here,
        verdict=claim_verdict(pairs, missing),
    )


def archived_ordering(rec, spread):
    """A claim as an earlier report measured it (a record of OUT/verdicts.json), its pairs read again
    with the seed term: each recorded pair's example SE taken out of its recorded interval
    (significance.archived_se, or the SE it recorded), a pair not recorded bounded by the sum of the
    links' SEs between its runs; each pair keeps what was recorded then."""
    metric, chain, values, seeds = rec["metric"], rec["chain"], rec["values"], rec["seeds"]
    names, _ = parse_chain(chain)
    sigma = spread.get(metric, {}).get("sigma")
    runs = rec.get("runs", {})
    recorded = {(p["a"], p["b"]): p for p in rec["pairs"] + rec.get("controls", [])}

    def per_seed(n):
        return [runs[s][metric] for s in seeds.get(n, []) if isinstance(runs.get(s, {}).get(metric), (int, float))]

    ses = {
        k: p["se"] if "se" in p else significance.archived_se(p["low"], p["high"], per_seed(k[0]), per_seed(k[1]))
        for k, p in recorded.items()
        if "low" in p
    }
    pairs = []
    for a, b, op, adjacent in chain_pairs(chain):
        if values.get(a) is None or values.get(b) is None:
            continue
        old = recorded.get((a, b), {})
        pair = dict(
            a=a,
            b=b,
            op=op,
            adjacent=adjacent,
            control=a in CONTROLS or b in CONTROLS,
            seeds=[len(seeds[a]), len(seeds[b])],
            difference=old.get("difference", values[a] - values[b]),
        )
        if metric == "latency_ms":
            better = values[a] < values[b] if op == "<" else values[a] > values[b]
            pair["verdict"] = old.get("verdict", "holds" if better else "reversed")
        else:
            se = ses.get((a, b))
            if se is None:  # a - c = (a - b) + (b - c) on every example: its SE is at most the sum of theirs
                i, j = names.index(a), names.index(b)
                links = [ses.get((names[k], names[k + 1])) for k in range(i, j)]
                if None in links:
                    continue
                se, pair["se_bound"] = sum(links), True
            with_interval(pair, se, sigma, old.get("n"))
        if old:
            pair["recorded"] = {k: old[k] for k in ("low", "high", "verdict") if k in old}
        pairs.append(pair)
    missing = [n for n in names if values.get(n) is None]
    return dict(
        metric=metric,
        chain=chain,
        values=values,
        seeds=seeds,
        pairs=[p for p in pairs if not p["control"]],
        controls=[p for p in pairs if p["control"]],
        here=rec.get("here", ""),
        verdict=claim_verdict(pairs, missing),
        archived=dict(commit=rec["commit"], written=rec["written"], source=rec.get("source"), verdict=rec["verdict"]),
    )


def orderings(state, resolved, metrics, stale_names, out):
    """(every claim of orderings.ORDERINGS read here, the seed spread): from OUT's runs, or, where OUT
    cannot measure a claim, from the verdict OUT/verdicts.json keeps of it."""
    archived = archived_verdicts(out)
    spread = seed_spread(metrics, archived_seed_runs(out))
    read = []
    for number, (paper, claim, metric, chain, theirs) in enumerate(ORDERINGS, 1):
        o = ordering(state, resolved, metrics, stale_names, metric, chain, spread)
        if o["verdict"].startswith("not measured") and (chain, metric) in archived:
            o = archived_ordering(archived[(chain, metric)], spread)
        read.append(dict(number=number, paper=paper, claim=claim, theirs=theirs, **o))
    return read, spread


def pair_text(p):
    """One pair as RESULTS.md and the docs print it: its difference (seeds a side), 95% interval,
    verdict and the effect it could detect; how an archived pair was read; latency: the means' order."""
    if "low" not in p:
        text = f"{p['a']} {p['op']} {p['b']}: {p['verdict']}" + (f" ({p['note']})" if "note" in p else "")
        return text + dtypes_text(p)
    seeds = "x".join(str(k) for k in p.get("seeds", []))
    text = (
        f"{p['a']} - {p['b']}: {p['difference']:+.2f}"
        + (f" ({seeds})" if seeds else "")
        + f" [{p['low']:+.2f}, {p['high']:+.2f}], {p['verdict']}"
    )
    text += f", detectable {p['detectable']:.2f}" if "detectable" in p else ""
    text += " (its example SE bounded by the links between)" if p.get("se_bound") else ""
    then = p.get("recorded", {})
    if "low" in then:
        text += f"; recorded [{then['low']:+.2f}, {then['high']:+.2f}], {then['verdict']}"
    return text + dtypes_text(p)


def dtypes_text(p):
    """Where a pair's sides trained in other compute dtypes: which, side by side (pretraining /
    fine-tuning)."""
    if "dtypes" not in p:
        return ""
    side = lambda n: " / ".join("+".join(k) for k in p["dtypes"][n] if k)  # noqa: E731
    return f" (trained in other dtypes: {p['a']} {side(p['a'])}, {p['b']} {side(p['b'])})"


def verdict_text(o):
    """A claim's verdict, and where it is archived, when and at what commit it was measured and what
    that report said."""
    a = o.get("archived")
    if not a:
        return o["verdict"]
    return f"{o['verdict']} (archived: measured at {a['commit']} on {a['written']}, recorded as {a['verdict']})"


def summary(read):
    """The count of each verdict among the claims, the archived ones, the pairs that hold, and the
    README's sentence of them."""
    counts = {v: sum(o["verdict"].startswith(v) for o in read) for v in ("holds", "reversed", "not resolved")}
    counts["not measured"] = len(read) - sum(counts.values())
    archived = [o["number"] for o in read if o.get("archived")]
    holding = [
        f"{p['a']} {p['op']} {p['b']} ({p['difference']:+.2f} {o['metric']}" + (", a control)" if p["control"] else ")")
        for o in read
        for p in o["pairs"] + o["controls"]
        if p["verdict"] == "holds"
    ]
    sentence = (
        f"{counts['holds']} of {len(read)} claims hold here; {counts['reversed']} reversed, "
        f"{counts['not resolved']} not resolved at this budget"
        + (f", {counts['not measured']} not measured yet." if counts["not measured"] else ".")
    )
    if archived:
        sentence += (
            f" Claim{'s' if len(archived) > 1 else ''} {', '.join(map(str, archived))} "
            f"{'are' if len(archived) > 1 else 'is'} read from archived verdicts (the outputs are gone)."
        )
    sentence += (" The pairs that hold: " + "; ".join(holding) + ".") if holding else " No pair holds."
    return dict(counts, total=len(read), archived=archived, holding=holding, sentence=sentence)
