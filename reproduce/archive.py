"""The runs of OUT without their weights: what a snapshot commits so that a machine that loses OUT
loses none of the runs that finished. A fine-tuning's checkpoints are only read by its
evaluation; once evaluated, its record (config.json, log.jsonl, its evaluation's eval-*.json and
per-example outputs-*.jsonl, and lineage.json: the pretraining step it started from, which its
last.pt held) is all that its rows, curves and intervals are computed from, and what tells whether
a pretraining run again later still matches it. A pretraining's record is its config.json and
log.jsonl (its held-out curve).

    python -m reproduce.archive save checkpoints/reproduce-cpu results/cpu-budget/archive
    python -m reproduce.archive restore results/cpu-budget/archive checkpoints/reproduce-cpu

    python -m reproduce.archive verdicts results/cpu-budget/results.json results/cpu-budget/archive

`save` keeps every finished pretraining, and every fine-tuning whose evaluation is done and
current, with its evaluation, and never drops a run DEST records: one that OUT runs again keeps
DEST's record and files until it has finished there. It rewrites only the files that changed (JSON lines gzipped, with
no time stamp, so that the same run gives the same bytes), and the packed weights of the
pretrainings the plan keeps (plan.KEEP_WEIGHTS, reproduce/weights.py) in DEST/weights/. `restore`
copies into OUT the runs OUT has no record of, never over a file OUT has, and marks them archived
in OUT/state.json. The runner counts a restored fine-tuning and its evaluation as done, and a
restored pretraining with kept weights too (its last.pt is the packed copy); one whose weights
are gone runs again only where a run left needs them (reproduce/runner.py).

`verdicts` keeps the claims a report measured (a results.json) in DEST/verdicts.json, each with
the commit and date of that report and its runs' metrics per seed: where the outputs behind a
claim are gone (runs that finished before an archive kept them), the report shows that verdict,
archived, instead of "not measured" (reproduce/claims.py). `restore` copies verdicts.json into
OUT and `save` back, as they are.
"""

import argparse
import glob
import gzip
import json
import os
import re
import shutil
import sys

from reproduce.claims import SPREAD_METRICS, VERDICTS_FILE
from reproduce.orderings import ORDERINGS
from reproduce.plan import BY_NAME, needs_of, plan_for, seed_one
from reproduce.runner import budget_fields, get_args, resolve
from reproduce.runstate import claim, load_state, locked_state, progress_of, run_files
from reproduce.staleness import LINEAGE, init_step_of, stale_reason
from reproduce.weights import KEEP_WEIGHTS, WEIGHTS, pack_bytes, packed_path, unpack_into

STATE_KEYS = ("budget", "lead", "majority")  # what state.json holds besides its runs that a report reads


def outputs_file(eval_file):
    """The per-example outputs file that eval.py writes beside an eval-*.json."""
    d, base = os.path.split(eval_file)
    return os.path.join(d, "outputs-" + base[len("eval-") : -len(".json")] + ".jsonl")


def resolved_runs(out, budget):
    """The budget's fields, and every run of its plan resolved for OUT (runner.resolve)."""
    args = get_args(["--budget", budget, "--out", out])
    fields = dict(budget_fields(args), budget=budget)
    return fields, {r.name: resolve(r, fields, out) for r in plan_for(fields)}


def idle(out, name):
    """Whether no runner is running NAME now (runstate.claim): an archived run started again rewrites
    its files until its runner records it as its own."""
    held = claim(out, name)
    if held is not None:
        held.close()
    return held is not None


def finished(out, state, budget):
    """{run: its files, relative to OUT}: every finished pretraining, and every fine-tuning whose
    evaluation is done and current, with that evaluation."""
    fields, resolved = resolved_runs(out, budget)

    def done(name):
        return progress_of(BY_NAME[name], resolved[name][0], fields, out, state, resolved)[0] >= 1

    kept = {}
    for name in resolved:
        run = BY_NAME[name]
        if run.script == "train" and (done(name) or (state["runs"].get(name, {}).get("archived") and idle(out, name))):
            kept[name] = ["config.json", "log.jsonl"]
        elif run.script == "eval" and done(name) and not stale_reason(run, resolved, out, state):
            files = [os.path.relpath(f, out) for f in run_files(state, name, out)]
            kept[needs_of(run)[0]] = ["config.json", "log.jsonl"]
            kept[name] = files + [outputs_file(f) for f in files if os.path.exists(os.path.join(out, outputs_file(f)))]
    return kept


def write_if_changed(path, data):
    """Write bytes DATA to PATH unless it holds them already; True where it wrote."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return True


def previous_records(dest):
    """The runs DEST's state.json records ({} where it has none)."""
    path = os.path.join(dest, "state.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)["runs"]


def save(out, dest):
    """Archive OUT's finished runs into DEST; returns (runs kept, files written)."""
    state = load_state(out)
    budget = state.get("budget")
    if not budget:
        raise SystemExit(f"error: {out} holds no runner's state.json: nothing to archive")
    kept, records, written = finished(out, state, budget), {}, 0
    for name, files in kept.items():
        rec = dict(state["runs"].get(name, {}), files_kept=[], archived=True)
        if BY_NAME[name].script == "finetune":  # the pretraining step it started from, which its last.pt held
            step = init_step_of(out, name)[0]
            written += write_if_changed(os.path.join(dest, name, LINEAGE), json.dumps({"init_step": step}).encode())
            rec["files_kept"].append(os.path.join(name, LINEAGE))
        if name in KEEP_WEIGHTS and os.path.exists(os.path.join(out, name, "last.pt")):
            written += write_if_changed(packed_path(dest, name), pack_bytes(out, name))
            rec["weights"] = os.path.join(WEIGHTS, os.path.basename(packed_path(dest, name)))
        for rel in (os.path.join(name, f) if BY_NAME[name].script != "eval" else f for f in files):
            src = os.path.join(out, rel)
            if not os.path.exists(src):
                continue
            with open(src, "rb") as f:
                data = f.read()
            if rel.endswith(".jsonl"):
                data, rel = gzip.compress(data, mtime=0), rel + ".gz"
            written += write_if_changed(os.path.join(dest, rel), data)
            rec["files_kept"].append(rel)
        records[name] = rec
    # a run DEST records and OUT has not finished stays as DEST has it: an archived pretraining that
    # OUT runs again for the runs that need its weights, stopped before its end, loses nothing
    for name, rec in previous_records(dest).items():
        records.setdefault(name, rec)
    top = {k: state[k] for k in STATE_KEYS if k in state}
    text = json.dumps(dict(top, runs=records), indent=1, sort_keys=True) + "\n"
    written += write_if_changed(os.path.join(dest, "state.json"), text.encode())
    if os.path.exists(os.path.join(out, VERDICTS_FILE)):
        with open(os.path.join(out, VERDICTS_FILE), "rb") as f:
            written += write_if_changed(os.path.join(dest, VERDICTS_FILE), f.read())
    return sorted(records), written


def superseded_seeds(old, new, seed_runs):
    """The seed groups (a run under several seeds, each seed's metrics) of the archived record OLD that
    its replacement NEW does not carry and `seed_runs` does not keep yet, each as {commit, written,
    runs}: a claim measured again from one seed a side keeps the spread its earlier seeds measured,
    which the seed spread of every interval pools (reproduce/claims.py seed_spread)."""
    if not old:
        return []
    groups = {}
    for name, m in old.get("runs", {}).items():
        groups.setdefault(seed_one(name), {})[name] = m
    have = {(r["commit"], seed_one(n)) for r in seed_runs for n in r["runs"]}
    carried = {seed_one(n) for n in new.get("runs", {}) if seed_one(n) != n}  # groups NEW has several seeds of
    return [
        dict(commit=old["commit"], written=old["written"], runs=seeds)
        for base, seeds in sorted(groups.items())
        if len(seeds) > 1 and base not in carried and (old["commit"], base) not in have
    ]


def keep_verdicts(results, dest):
    """Add to DEST/verdicts.json every claim the report RESULTS (a results.json) measured itself, with
    that report's commit and date and the metrics of each seed its claims read; a claim RESULTS only
    carried as archived stays as DEST records it. Returns the claims kept, by number."""
    with open(results) as f:
        d = json.load(f)
    commit = re.search(r"commit (\S+)$", d.get("environment", ""))
    path = os.path.join(dest, VERDICTS_FILE)
    kept, seed_runs = {}, []
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        kept = {(r["chain"], r["metric"]): r for r in old["claims"]}
        seed_runs = old.get("seed_runs", [])
    for o in d["orderings"]:
        if o.get("archived") or o["verdict"].startswith("not measured"):
            continue
        rec = {
            k: o[k]
            for k in (
                "paper",
                "claim",
                "metric",
                "chain",
                "theirs",
                "values",
                "seeds",
                "pairs",
                "controls",
                "here",
                "verdict",
            )
            if k in o
        }
        runs = {
            s: {m: v for m, v in d["runs"][s]["metrics"].items() if m in SPREAD_METRICS or m == o["metric"]}
            for names in o["seeds"].values()
            for s in names
            if s in d["runs"]
        }
        new = dict(
            rec, commit=commit.group(1) if commit else "unknown", written=d["written"], source=results, runs=runs
        )
        seed_runs += superseded_seeds(kept.get((o["chain"], o["metric"])), new, seed_runs)
        kept[(o["chain"], o["metric"])] = new
    order = {(o[3], o[2]): i for i, o in enumerate(ORDERINGS)}
    claims = sorted(kept.values(), key=lambda r: order.get((r["chain"], r["metric"]), len(order)))
    out = dict(claims=claims, seed_runs=seed_runs) if seed_runs else dict(claims=claims)
    write_if_changed(path, (json.dumps(out, indent=1, sort_keys=True) + "\n").encode())
    return [order[(r["chain"], r["metric"])] + 1 for r in claims if (r["chain"], r["metric"]) in order]


def restore(src, out, weights=True):
    """Copy into OUT the archived runs OUT has no record of, with the packed pretrainings' weights unless
    `weights` is False (a report reads none; a run that needs them then runs its pretraining again);
    returns (restored, kept as OUT has them)."""
    with open(os.path.join(src, "state.json")) as f:
        archived = json.load(f)
    os.makedirs(out, exist_ok=True)
    restored, skipped = [], []
    with locked_state(out) as state:
        if state.get("budget", archived["budget"]) != archived["budget"]:
            raise SystemExit(
                f"error: {out} holds the runs of --budget {state['budget']}, {src} those of "
                f"--budget {archived['budget']}: restore into another --out"
            )
        for k in STATE_KEYS:
            if k in archived and not state.get(k):
                state[k] = archived[k]
        for name, rec in archived["runs"].items():
            if name in state["runs"] or name not in BY_NAME:
                skipped.append(name)
                continue
            for rel in rec.pop("files_kept"):
                target = os.path.join(out, rel[: -len(".gz")] if rel.endswith(".gz") else rel)
                if os.path.exists(target):
                    continue
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if rel.endswith(".gz"):
                    with gzip.open(os.path.join(src, rel), "rb") as fin, open(target, "wb") as fout:
                        shutil.copyfileobj(fin, fout)
                else:
                    shutil.copyfile(os.path.join(src, rel), target)
            if rec.get("weights") and weights:
                unpack_into(src, out, name)
            state["runs"][name] = rec
            restored.append(name)
        kept, here = os.path.join(src, VERDICTS_FILE), os.path.join(out, VERDICTS_FILE)
        if os.path.exists(kept) and not os.path.exists(here):
            shutil.copyfile(kept, here)
    return restored, skipped


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m reproduce.archive", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("save", help="archive OUT's finished runs, without weights, into DEST")
    s.add_argument("out")
    s.add_argument("dest")
    r = sub.add_parser("restore", help="copy the runs of an archive into OUT where OUT has no record of them")
    r.add_argument("src")
    r.add_argument("out")
    r.add_argument(
        "--no-weights",
        action="store_true",
        help="the records and outputs alone, not the packed pretrainings (a report reads no weights; a run that "
        "needs one runs its pretraining again)",
    )
    v = sub.add_parser("verdicts", help="keep the claims a results.json measured in DEST/verdicts.json")
    v.add_argument("results")
    v.add_argument("dest")
    args = p.parse_args(argv)
    if args.verb == "verdicts":
        if not os.path.isfile(args.results):
            p.error(f"{args.results}: no such file")
        numbers = keep_verdicts(args.results, args.dest)
        print(f"{os.path.join(args.dest, VERDICTS_FILE)} keeps claims {', '.join(map(str, numbers)) or 'none'}")
        return 0
    if args.verb == "save":
        if not os.path.isfile(os.path.join(args.out, "state.json")):
            p.error(f"{args.out} holds no state.json: not a runner's OUT")
        names, written = save(args.out, args.dest)
        size = sum(
            os.path.getsize(f) for f in glob.glob(os.path.join(args.dest, "**"), recursive=True) if os.path.isfile(f)
        )
        print(f"archived {len(names)} runs in {args.dest} ({written} files written, {size / 1e6:.1f} MB in all)")
    else:
        if not os.path.isfile(os.path.join(args.src, "state.json")):
            p.error(f"{args.src} holds no state.json: not an archive `save` wrote")
        restored, skipped = restore(args.src, args.out, weights=not args.no_weights)
        print(
            f"restored {len(restored)} runs into {args.out}"
            + (f"; {len(skipped)} left as {args.out} has them" if skipped else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
