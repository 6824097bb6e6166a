"""RESULTS.md of reproduce/runner.py: the setting (hardware, versions, date), each pretraining's
held-out loss against the unigram entropy of the held-out text, the papers' tables, whether each of
their orderings holds here, and every run's command; and results.json beside it, the same as data
(per run its pretraining, the step it came from and the distance under the entropy, its metrics;
per ordering each pair's difference, interval and verdict), which the docs are rendered from
(tools/render_docs.py) once a snapshot of it is committed under results/."""
import datetime
import json
import os
import platform
import subprocess
import sys

from core.data import held_out_key
from reproduce import significance
from reproduce.plan import BY_NAME, ORDERINGS, TABLES, parse_chain
from reproduce.runstate import init_step_of, stale_reason

PLATEAU = 0.5  # nats under the unigram entropy a pretraining must reach before its rows say anything


def environment(dtype_flag=None):
    import torch
    from core.distributed import resolve_dtype
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "absent"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
                                capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    # what --dtype (the scripts' default: auto) resolves to here: auto differs between CPUs
    flag = dtype_flag or "auto"
    dtype = str(resolve_dtype(flag, torch.device("cuda" if torch.cuda.is_available() else "cpu"))).split(".")[-1]
    return (f"CPU {cpu} ({os.cpu_count()} cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}); "
            f"GPU {gpu}; compute dtype {dtype} (--dtype {flag}); Python {platform.python_version()}, torch {torch.__version__}, triton {tv}; commit {commit}")


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def pretraining(out, name):
    """The last held-out record of a pretraining run: (step, loss, which loss, unigram entropy) or None."""
    evals = [r for r in read_jsonl(os.path.join(out, name, "log.jsonl")) if "unigram_entropy" in r]
    if not evals:
        return None
    r = evals[-1]
    key = held_out_key(r)  # core/data.py: which loss, and why
    if key is None:
        return None
    return r["step"], r[key], key[6:], r["unigram_entropy"]


def results(state, run_name):
    """The eval rows recorded for an eval run (one, or one per threshold of a sweep)."""
    rows = []
    for f in state["runs"].get(run_name, {}).get("files") or []:
        if os.path.exists(f):
            with open(f) as fh:
                rows.append(json.load(fh))
    return rows


def outputs_of(state, run_name):
    """The per-example outputs file (eval.py's outputs-*.jsonl) of a run's first evaluation, or None."""
    for f in (state["runs"].get("eval-" + run_name, {}).get("files") or [])[:1]:
        path = os.path.join(os.path.dirname(f), "outputs-" + os.path.basename(f)[len("eval-"):-len(".json")] + ".jsonl")
        if os.path.exists(path):
            return path
    return None


def compared(state, a, b, metric):
    """significance.compare of two runs' outputs on a ROUGE metric or accuracy, or None where it
    cannot be read (another metric, no outputs file, no rouge-score, different examples)."""
    pa, pb = outputs_of(state, a), outputs_of(state, b)
    if not (metric.startswith("rouge") or metric == "accuracy") or not pa or not pb:
        return None
    try:
        return significance.compare(pa, pb, metric)
    except (ImportError, ValueError) as e:
        print(f"note: no interval for {a} against {b}: {e}", file=sys.stderr)
        return None


def intervals_of(state, name):
    """{metric: [low, high]}: the 95% bootstrap interval of each metric's mean over a run's test
    examples (its outputs file), or None where it cannot be read (no outputs file, no rouge-score)."""
    path = outputs_of(state, name)
    if not path:
        return None
    try:
        return {m: list(significance.interval(path, m)[1:]) for m in significance.metrics_of(path)}
    except (ImportError, ValueError) as e:
        print(f"note: no interval for {name}: {e}", file=sys.stderr)
        return None


def fmt(v):
    return f"{v:.2f}" if isinstance(v, float) else "" if v is None else str(v)


def table(cols, rows):
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]


def gap_of(out, resolved, name):
    """The pretraining of a fine-tuned run: (its name, nats under the unigram entropy) or (None, None)."""
    pre = next((d for d in resolved[name][1] if d.startswith("pre-")), None)
    p = pretraining(out, pre) if pre else None
    return pre, (p[3] - p[1] if p else None)


def write(args, fields, state, resolved):
    out = args.out
    lines = [f"# The papers' comparisons at the `{args.budget}` budget", "",
             f"Written by `python -m reproduce --budget {args.budget}` on {datetime.date.today()} "
             f"({datetime.datetime.now():%H:%M}). Pretraining: {fields['steps']} steps "
             f"(`{fields['train']}`); fine-tuning `{fields['finetune']}`; evaluation `{fields['eval'] or 'the whole test split'}`.",
             "", f"Hardware and versions: {environment(args.dtype)}.", ""]
    unavailable = state.get("unavailable", {})
    data = dict(budget=args.budget, written=f"{datetime.datetime.now():%Y-%m-%d %H:%M}", environment=environment(args.dtype),
                steps=fields["steps"], pretraining={}, runs={}, orderings=[])

    # pretraining against the unigram plateau
    lines += ["## Pretraining: held-out loss against the unigram entropy", "",
              f"Every pretraining reads the same tokens. A row under {PLATEAU} nats below the unigram entropy "
              "(the loss of a model that ignores context) is marked PLATEAU: what its fine-tuned rows show says "
              "little about the objective.", ""]
    rows = []
    for name in (n for n in resolved if n.startswith("pre-")):
        p = pretraining(out, name)
        rec = state["runs"].get(name, {})
        if p is None:
            rows.append([name, BY_NAME[name].label, unavailable.get(name, "not run"), "", "", "", "", ""])
            continue
        step, loss, key, ent = p
        data["pretraining"][name] = dict(label=BY_NAME[name].label, step=step, held_out_loss=loss, loss=key,
                                         unigram_entropy=ent, under=ent - loss, plateau=ent - loss < PLATEAU,
                                         seconds=rec.get("seconds"))
        rows.append([name, BY_NAME[name].label, step, f"{loss:.3f} ({key})", f"{ent:.3f}", f"{ent - loss:.3f}",
                     "PLATEAU" if ent - loss < PLATEAU else "left it", fmt_secs(rec.get("seconds"))])
    lines += table(["run", "what", "step", "held-out loss", "unigram entropy", "below it", "", "time"], rows) + [""]

    # the papers' tables
    metrics, stale_names = {}, set()
    for title, names in TABLES:
        rows, cols = [], None
        for name in names.split():
            got = results(state, "eval-" + name)
            pre, gap = gap_of(out, resolved, name)
            started = init_step_of(out, name)[0] if pre else None
            at = f" step {started}" if started is not None else ""
            note = ("none" if pre is None else f"{pre}: not run" if gap is None else
                    f"{pre}{at} ({gap:.2f} under)" if gap >= PLATEAU else f"PLATEAU ({pre}{at}: {gap:.2f})")
            stale = stale_reason(BY_NAME[name], resolved, out) if name in BY_NAME else None
            if got and stale:
                rows.append([name, BY_NAME[name].label, f"STALE: {stale}; the same command runs it again"])
                stale_names.add(name)
                continue
            if not got or name in unavailable or "eval-" + name in unavailable:
                rows.append([name, BY_NAME[name].label, unavailable.get(name) or unavailable.get("eval-" + name) or
                             {"done": "trained, not evaluated"}.get(state["runs"].get(name, {}).get("status"), "not run")])
                continue
            r = metrics[name] = got[0]
            data["runs"][name] = dict(label=BY_NAME[name].label, table=title, pretraining=pre, pretraining_step=started,
                                      under=gap, metrics={k: v for k, v in r.items() if k != "generation"},
                                      seconds=state["runs"].get(name, {}).get("seconds"),
                                      eval_seconds=state["runs"].get("eval-" + name, {}).get("seconds"))
            spread = intervals_of(state, name)
            if spread:
                data["runs"][name]["intervals"] = spread
            cls = "accuracy" in r
            cols = cols or (["accuracy", "macro_f1"] if cls else ["rouge1", "rouge2", "rougeL", "decoding", "iterations",
                                                                  "mean_exit"])
            rows.append([name, BY_NAME[name].label, note] + [r.get(c) for c in cols] +
                        [r.get("params_M"), r.get("latency_ms"), r.get("samples_per_s")])
        cols = ["run", "what", "pretraining"] + (cols or []) + (["params_M", "latency_ms", "samples_per_s"] if cols else [])
        width = len(cols)
        lines += [f"## {title}", ""] + table(cols, [r + [""] * (width - len(r)) for r in rows]) + [""]
    lead = state.get("lead")
    if lead:
        lines += ["LEAD baselines on the same test examples: " + "; ".join(
            f"{r['model']} {r['rouge1']:.2f} / {r['rouge2']:.2f} / {r['rougeL']:.2f}" for r in lead) + " (ROUGE-1/2/L).", ""]

    majority = state.get("majority")
    if majority:
        lines += [f"Majority class on the same test examples (the best a classifier that ignores its input scores): "
                  f"accuracy {majority['accuracy']:.2f}, macro-F1 {majority['macro_f1']:.2f}.", ""]

    # the exit curves, one per measure
    lines += ["## ELMER: the exit curves (hard exit, one checkpoint, a threshold per row)", "",
              "dec_flops: the decoder's multiply-adds relative to exit disabled (eval.py).", ""]
    for name in (n for n in BY_NAME if n.startswith("eval-sweep-elmer-hard")):
        sweep = results(state, name)
        if not sweep:
            lines += [f"{name}: {unavailable.get(name, 'not run')}", ""]
            continue
        thr = lambda r: float(r.get("exit_threshold", r.get("exit_entropy", 0.0)))
        measure = sweep[0].get("exit_measure", "entropy")
        sweep.sort(key=thr, reverse=measure != "entropy")  # from the strictest threshold to the loosest
        lines += [f"### {measure}", ""] + table(
            ["threshold", "rougeL", "mean_exit", "exit_frac", "entropy p50 / p5 per layer", "dec_flops", "latency_ms"],
            [[f"{thr(r):g}", r.get("rougeL"), r.get("mean_exit"), r.get("exit_frac"),
              f"{r['entropy_p50']} / {r['entropy_p5']}" if "entropy_p50" in r else "", r.get("dec_flops"), r.get("latency_ms")]
             for r in sweep])
        exits = [r.get("mean_exit") for r in sweep]
        falls = all(a >= b for a, b in zip(exits, exits[1:])) if None not in exits else None
        lines += ["", f"Tokens leave earlier as the threshold loosens (mean exit layer never increases): "
                      f"{'holds' if falls else 'does not hold' if falls is False else 'not measured'}.", ""]

    # the orderings
    lines += ["## The papers' orderings here", "",
              "A ROUGE or accuracy ordering is read pair by pair from a paired bootstrap over the test examples "
              "both models were scored on (reproduce/significance.py): a pair holds where the 95% interval of the "
              "difference lies above zero, is reversed where it lies below, and is within noise otherwise (`>=` "
              "holds unless reversed). Other metrics (latency) compare the point values.", ""]
    rows = []
    for paper, claim, metric, chain, theirs in ORDERINGS:
        names, ops = parse_chain(chain)
        vals = [metrics.get(n, {}).get(metric) for n in names]
        intervals, pairs, pair_data = [], [], []
        missing = [n for n, v in zip(names, vals) if v is None]
        for a, b, op, va, vb in zip(names, names[1:], ops, vals, vals[1:]):
            if va is None or vb is None:  # the pairs that exist are read all the same
                continue
            diff = compared(state, a, b, metric)
            if diff is None:
                pairs.append("holds" if {">": va > vb, ">=": va >= vb, "<": va < vb}[op] else "reversed")
                continue
            mean, low, high = diff
            pairs.append(significance.verdict(op, low, high))
            pair_data.append(dict(a=a, b=b, op=op, difference=mean, low=low, high=high, verdict=pairs[-1]))
            intervals.append(f"{a} - {b}: {mean:+.2f} [{low:+.2f}, {high:+.2f}]")
        if "reversed" in pairs:  # one reversed pair is enough, whatever is still to run
            verdict = "does not hold" + (f" (not measured: {', '.join(missing)})" if missing else "")
        elif missing:
            verdict = "not measured (" + ", ".join(n + (" is stale" if n in stale_names else "") for n in missing) + ")"
        else:
            verdict = "within noise" if "within noise" in pairs else "holds"
        plateau = [p for p in {gap_of(out, resolved, n)[0] for n in names if n not in missing}
                   if p and (gap_of_pre(out, p) or 0) < PLATEAU]
        verdict += f" (on the plateau: {', '.join(sorted(plateau))})" if plateau else ""
        shown = " ".join(f"{n} {fmt(v)}" if i == len(names) - 1 else f"{n} {fmt(v)} {ops[i]}"
                         for i, (n, v) in enumerate(zip(names, vals)))
        rows.append([paper, claim, theirs, metric, shown, "; ".join(intervals), verdict])
        data["orderings"].append(dict(paper=paper, claim=claim, theirs=theirs, metric=metric, chain=chain,
                                      values=dict(zip(names, vals)), pairs=pair_data, verdict=verdict))
    lines += table(["paper", "ordering", "the paper's figures", "metric", "here", "difference, 95% interval", "verdict"],
                   rows) + [""]

    # every run
    lines += ["## Runs", ""]
    rows = []
    for name in resolved:
        rec = state["runs"].get(name, {})
        status = rec.get("status") or unavailable.get(name) or "not run"
        rows.append([name, status + (f": {rec['error']}" if rec.get("error") else ""), fmt_secs(rec.get("seconds")),
                     f"`{rec.get('command') or ''}`"])
    lines += table(["run", "status", "time", "command"], rows) + [""]
    path = os.path.join(out, "RESULTS.md")
    for name, text in ((path, "\n".join(lines)), (os.path.join(out, "results.json"), json.dumps(data, indent=1))):
        tmp = f"{name}.{os.getpid()}.tmp"  # two runners may write at once: each its own, then one rename
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, name)
    return path


def gap_of_pre(out, pre):
    p = pretraining(out, pre)
    return p[3] - p[1] if p else None


def fmt_secs(s):
    if s is None:
        return ""
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


if __name__ == "__main__":
    sys.exit("run python -m reproduce --report-only")
