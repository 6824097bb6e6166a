"""RESULTS.md of reproduce/runner.py: the setting (hardware, versions, date), each pretraining's
held-out loss against the unigram entropy of the held-out text, the papers' tables, whether each of
their orderings holds here, and every run's command; and results.json beside it, the same as data
(per run its pretraining, the step it came from and the distance under the entropy, its metrics;
per ordering each pair's difference, interval and verdict, the seed spread and the summary, as
reproduce/claims.py reads them), which the docs are rendered from (tools/render_docs.py) once a
snapshot of it is committed under results/."""

import datetime
import json
import os
import platform
import subprocess
import sys

from core.data import held_out_key
from reproduce import significance
from reproduce.further_seeds import not_needed
from reproduce.claims import (
    mean_over_seeds,
    ordering,
    orderings,
    outputs_of,
    pair_text,
    spread_text,
    summary,
    verdict_text,
)
from reproduce.orderings import CHECKS, MARGIN, TABLES
from reproduce.plan import BY_NAME, seeds_of, steps_of
from reproduce.runstate import eval_results
from reproduce.staleness import init_step_of, stale_reason

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
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=os.path.dirname(os.path.abspath(__file__)),
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    # what --dtype (the scripts' default: auto) resolves to here: auto differs between CPUs
    flag = dtype_flag or "auto"
    dtype = str(resolve_dtype(flag, torch.device("cuda" if torch.cuda.is_available() else "cpu"))).split(".")[-1]
    return (
        f"CPU {cpu} ({os.cpu_count()} cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}); "
        f"GPU {gpu}; compute dtype {dtype} (--dtype {flag}); Python {platform.python_version()}, torch "
        f"{torch.__version__}, triton {tv}; commit {commit}"
    )


def read_jsonl(path):
    """The records of a JSONL log; a line that is not one (the last line of a run killed while writing
    it) is left out, and said so."""
    if not os.path.exists(path):
        return []
    rows, bad = [], 0
    with open(path, errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                row, bad = None, bad + 1
            if isinstance(row, dict):
                rows.append(row)
    if bad:
        print(
            f"note: {path}: {bad} line(s) that are not a JSON record left out (a run killed while writing?)",
            file=sys.stderr,
        )
    return rows


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
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + [
        "| " + " | ".join(fmt(v) for v in r) + " |" for r in rows
    ]


def gap_of(out, resolved, name):
    """The pretraining of a fine-tuned run: (its name, nats under the unigram entropy) or (None, None)."""
    pre = next((d for d in resolved[name][1] if d.startswith("pre-")), None)
    p = pretraining(out, pre) if pre else None
    return pre, (p[3] - p[1] if p else None)


def write(args, fields, state, resolved):
    """RESULTS.md and results.json of OUT: the pretrainings, every fine-tuning's result and
    validation curve, the papers' tables and orderings, ELMER's exit curves, every run."""
    out = args.out
    state = dict(state, _out=out)  # where the recorded result files are (run_files)
    lines = [
        f"# The papers' comparisons at the `{args.budget}` budget",
        "",
        f"Written by `python -m reproduce --budget {args.budget}` on {datetime.date.today()} "
        f"({datetime.datetime.now():%H:%M}). Pretraining: the plan's {fields['steps']} steps "
        f"(`{fields['train']}`); fine-tuning `{fields['finetune']}`; evaluation "
        f"`{fields['eval'] or 'the whole test split'}`.",
        "",
        f"Hardware and versions: {environment(args.dtype)}.",
        "",
    ]
    elsewhere = steps_elsewhere(out, resolved, fields)
    if elsewhere:  # a row is read at the step its pretraining is at, whatever the plan says now
        lines += [
            "Not at the plan's steps, and read as they are: "
            + ", ".join(f"{n} at step {s} (the plan: {p})" for n, s, p in elsewhere)
            + ".",
            "",
        ]
    data = dict(
        budget=args.budget,
        written=f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
        environment=environment(args.dtype),
        steps=fields["steps"],
        steps_elsewhere={n: s for n, s, _ in elsewhere},
        pretraining={},
        runs={},
        orderings=[],
    )
    lines += pretraining_section(out, state, resolved, data)
    metrics, stale_names = finetuned(out, state, resolved, data)
    lines += tables_section(out, state, resolved, data, metrics, stale_names)
    lines += exit_section(state)
    lines += orderings_section(state, resolved, data, metrics, stale_names)
    lines += runs_section(state, resolved)
    path = os.path.join(out, "RESULTS.md")
    for name, text in ((path, "\n".join(lines)), (os.path.join(out, "results.json"), json.dumps(data, indent=1))):
        tmp = f"{name}.{os.getpid()}.tmp"  # two runners may write at once: each its own, then one rename
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, name)
    return path


def pretraining_section(out, state, resolved, data):
    """The pretrainings against the unigram plateau (recorded in data["pretraining"])."""
    unavailable = state.get("unavailable", {})
    lines = [
        "## Pretraining: held-out loss against the unigram entropy",
        "",
        f"Every pretraining reads the same tokens. A row under {PLATEAU} nats below the unigram entropy "
        "(the loss of a model that ignores context) is marked PLATEAU: what its fine-tuned rows show says "
        "little about the objective.",
        "",
    ]
    rows = []
    for name in (n for n in resolved if n.startswith("pre-")):
        p = pretraining(out, name)
        rec = state["runs"].get(name, {})
        if p is None:
            rows.append([name, BY_NAME[name].label, unavailable.get(name, "not run"), "", "", "", "", ""])
            continue
        step, loss, key, ent = p
        data["pretraining"][name] = dict(
            label=BY_NAME[name].label,
            step=step,
            held_out_loss=loss,
            loss=key,
            unigram_entropy=ent,
            under=ent - loss,
            plateau=ent - loss < PLATEAU,
            seconds=rec.get("seconds"),
        )
        rows.append(
            [
                name,
                BY_NAME[name].label,
                step,
                f"{loss:.3f} ({key})",
                f"{ent:.3f}",
                f"{ent - loss:.3f}",
                "PLATEAU" if ent - loss < PLATEAU else "left it",
                fmt_secs(rec.get("seconds")),
            ]
        )
    return (
        lines + table(["run", "what", "step", "held-out loss", "unigram entropy", "below it", "", "time"], rows) + [""]
    )


def finetuned(out, state, resolved, data):
    """({fine-tuning: its test result}, the stale ones' names): every evaluated, current fine-tuning,
    recorded in data["runs"] with its validation curve."""
    unavailable = state.get("unavailable", {})
    metrics, stale_names = {}, set()
    for name in (n for n in resolved if BY_NAME[n].script == "finetune"):
        got = eval_results(state, "eval-" + name, out)
        stale = stale_reason(BY_NAME[name], resolved, out, state)
        if got and stale:
            stale_names.add(name)
        if not got or stale or name in unavailable or "eval-" + name in unavailable:
            continue
        pre, gap = gap_of(out, resolved, name)
        metrics[name] = got[0]
        data["runs"][name] = dict(
            label=BY_NAME[name].label,
            pretraining=pre,
            pretraining_step=init_step_of(out, name)[0] if pre else None,
            under=gap,
            metrics={k: v for k, v in got[0].items() if k != "generation"},
            seconds=state["runs"].get(name, {}).get("seconds"),
            eval_seconds=state["runs"].get("eval-" + name, {}).get("seconds"),
            validation=validation_curve(out, name),
        )
        spread = intervals_of(state, name)
        if spread:
            data["runs"][name]["intervals"] = spread
    return metrics, stale_names


def tables_section(out, state, resolved, data, metrics, stale_names):
    """The papers' tables: each run's pretraining, seeds, whether its validation flattened, its
    test metrics (means over seeds); then the LEAD and majority-class floors."""
    unavailable, lines = state.get("unavailable", {}), []
    for title, names in TABLES:
        rows, cols = [], None
        for name in names.split():
            pre, gap = gap_of(out, resolved, name)
            started = init_step_of(out, name)[0] if pre else None
            at = f" step {started}" if started is not None else ""
            note = (
                "none"
                if pre is None
                else f"{pre}: not run"
                if gap is None
                else f"{pre}{at} ({gap:.2f} under)"
                if gap >= PLATEAU
                else f"PLATEAU ({pre}{at}: {gap:.2f})"
            )
            seeds = [n for n in seeds_of(name, list(resolved)) if n in metrics]
            if not seeds:
                why = (
                    f"STALE: {stale_reason(BY_NAME[name], resolved, out, state)}; the same command runs it again"
                    if name in stale_names
                    else unavailable.get(name)
                    or unavailable.get("eval-" + name)
                    or {"done": "trained, not evaluated"}.get(state["runs"].get(name, {}).get("status"), "not run")
                )
                rows.append([name, BY_NAME[name].label, why])
                continue
            r = metrics[seeds[0]]
            cols = cols or (
                ["accuracy", "macro_f1"]
                if "accuracy" in r
                else ["rouge1", "rouge2", "rougeL", "decoding", "iterations", "mean_exit"]
            )
            mean = lambda c: mean_over_seeds(metrics, seeds, c)[0] if isinstance(r.get(c), float) else r.get(c)
            flat = all(data["runs"][n]["validation"]["flat"] for n in seeds)
            rows.append(
                [name, BY_NAME[name].label, note, len(seeds), "yes" if flat else "NO"]
                + [mean(c) for c in cols]
                + [r.get("params_M"), mean("latency_ms"), mean("samples_per_s")]
            )
        cols = (
            ["run", "what", "pretraining", "seeds", "valid. flat"]
            + (cols or [])
            + (["params_M", "latency_ms", "samples_per_s"] if cols else [])
        )
        width = len(cols)
        lines += [f"## {title}", ""] + table(cols, [r + [""] * (width - len(r)) for r in rows]) + [""]
    lines += [
        "Each row is the mean over the seeds evaluated; 'valid. flat' says whether every seed's validation "
        "loss stopped falling before its last validation (early stopping), else NO: it was still falling "
        "when the run reached its most epochs.",
        "",
    ]
    lead = state.get("lead")
    if lead:
        lines += [
            "LEAD baselines on the same test examples: "
            + "; ".join(f"{r['model']} {r['rouge1']:.2f} / {r['rouge2']:.2f} / {r['rougeL']:.2f}" for r in lead)
            + " (ROUGE-1/2/L).",
            "",
        ]
    majority = state.get("majority")
    if majority:
        lines += [
            f"Majority class on the same test examples (the best a classifier that ignores its input scores): "
            f"accuracy {majority['accuracy']:.2f}, macro-F1 {majority['macro_f1']:.2f}.",
            "",
        ]
    return lines


def exit_section(state):
    """ELMER's exit curves, one table per measure, and whether tokens leave earlier as the
    threshold loosens."""
    unavailable = state.get("unavailable", {})
    lines = [
        "## ELMER: the exit curves (hard exit, one checkpoint, a threshold per row)",
        "",
        "dec_flops: the decoder's multiply-adds relative to exit disabled (eval.py).",
        "",
    ]
    for name in (n for n in BY_NAME if n.startswith("eval-sweep-elmer-hard")):
        sweep = eval_results(state, name, state["_out"])
        if not sweep:
            lines += [f"{name}: {unavailable.get(name, 'not run')}", ""]
            continue
        thr = lambda r: float(r.get("exit_threshold", r.get("exit_entropy", 0.0)))
        measure = sweep[0].get("exit_measure", "entropy")
        sweep.sort(key=thr, reverse=measure != "entropy")  # from the strictest threshold to the loosest
        lines += [f"### {measure}", ""] + table(
            ["threshold", "rougeL", "mean_exit", "exit_frac", "entropy p50 / p5 per layer", "dec_flops", "latency_ms"],
            [
                [
                    f"{thr(r):g}",
                    r.get("rougeL"),
                    r.get("mean_exit"),
                    r.get("exit_frac"),
                    f"{r['entropy_p50']} / {r['entropy_p5']}" if "entropy_p50" in r else "",
                    r.get("dec_flops"),
                    r.get("latency_ms"),
                ]
                for r in sweep
            ],
        )
        exits = [r.get("mean_exit") for r in sweep]
        falls = all(a >= b for a, b in zip(exits, exits[1:])) if None not in exits else None
        lines += [
            "",
            f"Tokens leave earlier as the threshold loosens (mean exit layer never increases): "
            f"{'holds' if falls else 'does not hold' if falls is False else 'not measured'}.",
            "",
        ]
    return lines


def orderings_section(state, resolved, data, metrics, stale_names):
    """The papers' orderings read pair by pair (reproduce/claims.py; recorded in data["orderings"]
    and data["seed_spread"]), and the summary."""
    read, spread = orderings(state, resolved, metrics, stale_names, state["_out"])
    lines = [
        "## The papers' orderings here",
        "",
        "Each pair a claim's chain names is read (a > b > c: a > b, b > c and a > c) from the 95% interval "
        "of its difference, which counts the test sample and the fine-tuning seed (reproduce/significance.py): "
        "difference +- 1.96 sqrt(SE^2 + sigma^2 (1/k_a + 1/k_b)), SE the standard error over the test examples "
        "both sides were scored on (a paired bootstrap of each side's mean over its seeds), k the seeds a side, "
        "sigma the seed spread below. `>` holds where the interval lies above zero and is reversed where it "
        f"lies below; `>=` holds where it lies above -{MARGIN:g} (the equivalence margin, fixed before the "
        f"runs), `~` where it lies inside +-{MARGIN:g}; a pair is not resolved otherwise. Every pair gives the "
        "smallest difference it would detect (80% power). The papers' pairs decide a claim: it holds when "
        "every one holds, is reversed when one is; a pair with one of the project's controls (a run from no "
        "pretraining no paper has) is shown apart and decides nothing. A claim whose runs' outputs are gone "
        "keeps the verdict measured then (archived, with its commit and date, and its pairs read again with "
        "the seed term beside what was recorded). 'here' lists the runs in the order measured. Latency "
        "compares the mean over seeds. A pair whose sides trained in other compute dtypes (their "
        "pretraining / fine-tuning, as the runner recorded them: machines with and without bf16) says so.",
        "",
        "The seed spread sigma (one run's test metric across fine-tuning seeds, its standard deviation), pooled "
        "over every run evaluated under several seeds: " + spread_text(spread) + ".",
        "",
    ]
    rows = []
    for o in read:
        rows.append(
            [
                o["number"],
                o["paper"],
                o["claim"],
                o["theirs"],
                o["metric"],
                o["here"],
                "; ".join(map(pair_text, o["pairs"])),
                verdict_text(o),
                "; ".join(map(pair_text, o["controls"])),
            ]
        )
    data["orderings"], data["seed_spread"] = read, spread
    lines += table(
        [
            "#",
            "paper",
            "ordering",
            "the paper's figures",
            "metric",
            "here",
            "the paper's pairs: difference (seeds a side), 95% interval",
            "verdict",
            "the project's controls (decide nothing)",
        ],
        rows,
    ) + [""]
    data["summary"] = summary(read)
    lines += [data["summary"]["sentence"], ""]
    checks = [
        dict(what=what, check=check, **ordering(state, resolved, metrics, stale_names, metric, chain, spread))
        for what, check, metric, chain in CHECKS
    ]
    data["checks"] = checks
    lines += [
        "## The project's checks of its own choices",
        "",
        "Read as a claim is (the same intervals and verdicts), and no claim of the papers: the recipe's "
        "choices the claims rest on.",
        "",
    ]
    lines += table(
        ["choice", "check", "metric", "here", "pairs: difference (seeds a side), 95% interval", "verdict"],
        [
            [c["what"], c["check"], c["metric"], c["here"], "; ".join(map(pair_text, c["pairs"])), c["verdict"]]
            for c in checks
        ],
    ) + [""]
    return lines


def runs_section(state, resolved):
    """Every run of the plan: its status, time and command."""
    unavailable, rows = state.get("unavailable", {}), []
    for name in resolved:
        rec = state["runs"].get(name, {})
        status = rec.get("status") or unavailable.get(name) or not_needed(name, state, state["_out"]) or "not run"
        rows.append(
            [
                name,
                status + (f": {rec['error']}" if rec.get("error") else ""),
                fmt_secs(rec.get("seconds")),
                f"`{rec.get('command') or ''}`",
            ]
        )
    return ["## Runs", ""] + table(["run", "status", "time", "command"], rows) + [""]


def steps_elsewhere(out, resolved, fields):
    """[(pretraining, its step now, the plan's steps)] of the pretrainings at another step than the
    plan's (a sitting of other --steps, or a run not yet finished)."""
    out_ = []
    for name in (n for n in resolved if n.startswith("pre-")):
        p = pretraining(out, name)
        if p and p[0] != steps_of(BY_NAME[name], fields):
            out_.append((name, p[0], steps_of(BY_NAME[name], fields)))
    return out_


def validation_curve(out, name):
    """A fine-tuning's validation losses [(step, loss)] from its log, and whether the curve is flat
    at its end: the lowest loss came before the last validation (the run stopped on validation)."""
    curve = [
        (r["step"], r["valid_loss"]) for r in read_jsonl(os.path.join(out, name, "log.jsonl")) if "valid_loss" in r
    ]
    best = min(range(len(curve)), key=lambda i: curve[i][1]) if curve else None
    return dict(curve=curve, flat=best is not None and best < len(curve) - 1)


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
