"""Fill the generated blocks of the docs from committed result files; --check fails when they differ.

    python -m tools.render_docs            # rewrite every block
    python -m tools.render_docs --check    # exit 1 if a block is not what its file renders to (CI)

A block is written in a markdown file as

    <!-- render: KIND PATH -->
    ...generated, never edited by hand...
    <!-- /render -->

KIND names a renderer below (the benchmarks' are in tools/render_bench.py) and PATH a result
file (relative to the repository root) that it reads (for `table`, PATH::MARKER or PATH::MARKER#N,
"~" standing for a space in the marker; `targets` PATH::PREFIX keeps the targets so named;
`scorecard` PATH::measured the claims measured, PATH::PAPER one paper's; `checks` PATH::WHAT the
project's checks of one choice; `study` a file that
tools/records.py wrote): no number in a
block is typed by hand. Files scanned: README.md, docs/*.md, bench/RESULTS.md, releases/README.md.

The `plot-*` kinds draw a figure into docs/figures/ (tools/figures.py: SVG, byte-identical for the
same data) and write the line that shows it; drawing needs matplotlib (`pip install -r requirements-docs.txt`),
the one dependency of this command that the project does not have. --check draws nothing: it
checks the lines and that each figure exists. `plot-layout core/unilm/pmlm.py` (core/mlae/model.py,
core/elmer/model.py) draws the attention layout of that module's example by running its code
(tools/layouts.py, no matplotlib); --check draws it again and compares.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m tools.render_docs [--check]")

from reproduce.claims import pair_text, verdict_text  # noqa: E402
from tools import figures, layouts, records, render_release  # noqa: E402
from tools.render_bench import (
    attention,
    backward,
    backward_loops,
    compile_cost,
    exit_rows,
    fused_backward,
    loops,
    loss_profile,
    step,  # noqa: E402
    sweep,
    targets,
)
from tools.figures import ROOT, _jsonl, _load  # noqa: E402
from reproduce.plan import seeds_of  # noqa: E402

BLOCK = re.compile(r"(<!-- render: (\S+) (\S+) -->\n)(.*?)(<!-- /render -->)", re.S)


def table(spec):
    """PATH::MARKER: the markdown tables (and their target lines) that follow the first line holding
    MARKER in a text result file (a benchmark's log, indented or not), up to the next blank line
    after them, and the run's time where a run.json beside the file names it."""
    path, marker = spec.split("::", 1)
    nth = 1
    if re.search(r"#\d+$", marker):  # MARKER#N: the N-th line holding it
        marker, nth = marker.rsplit("#", 1)
        nth = int(nth)
        if nth < 1:
            raise SystemExit(f"error: {spec}: #{nth} names no occurrence (they count from #1)")
    marker = marker.replace("~", " ")
    with open(os.path.join(ROOT, path)) as f:
        lines = f.read().splitlines()
    hits = [i for i, l in enumerate(lines) if marker in l]
    start = hits[nth - 1] if len(hits) >= nth else None
    if start is None:
        raise SystemExit(f"error: no line holding {marker!r} in {path}")
    out, seen = [], False
    for l in lines[start + 1 :]:
        l = l.strip()  # a log may indent its tables under a case's heading
        if l.startswith("|") or l.startswith("target "):
            out.append(l if l.startswith("|") else f"({l})")
            seen = True
        elif seen and not l.strip():
            break
    note = _run_note(path)  # the run.json beside the file, if it names it
    return (
        "\n".join(o for o in out if o.startswith("|"))
        + "\n"
        + "".join(f"\n{o}" for o in out if not o.startswith("|"))
        + ("\n" if any(not o.startswith("|") for o in out) else "")
        + (f"\n{note}\n" if note else "")
    )


def _run_note(path):
    """The run.json beside a log, if any: how long it took, where, with what command."""
    run = os.path.join(os.path.dirname(os.path.join(ROOT, path)), "run.json")
    if not os.path.exists(run):
        return ""
    with open(run) as f:
        r = json.load(f)
    part = r.get(os.path.basename(path))
    return _took(part, r) if part else ""


def _took(part, r):
    """'`COMMAND` took N min S s (MACHINE).': a run's own machine line, if it has one, else its file's."""
    verb = "ran" if "pieces" in part else "took"
    return f"`{part['command']}` {verb} {render_release.made_in(part)} ({part.get('machine', r['machine'])})."


def run_time(spec):
    """PATH::KEY: the time of one command a run.json records under KEY (the test suite's, say)."""
    path, key = spec.split("::")
    with open(os.path.join(ROOT, path)) as f:
        r = json.load(f)
    if key not in r:
        raise SystemExit(f"error: {path} records no {key!r} (it has {', '.join(sorted(r))})")
    part = r[key]
    if "commit" not in part:
        return _took(part, r) + "\n"
    # the tree it timed, and what its suite held then: a later tree's suite may be longer
    return _took(part, r)[:-1] + f", at {part['commit']} ({part['passed']} passed, {part['skipped']} skipped).\n"


def default_pretraining(path):
    """train.py's log.jsonl: the held-out records against the unigram entropy, and the run's time."""
    evals, key = figures.held_out(path)
    ent = evals[-1]["unigram_entropy"]
    out = [
        "| step | " + " | ".join(str(r["step"]) for r in evals) + " |",
        "|---|" + "---|" * len(evals),
        f"| held-out {key[6:]} | " + " | ".join(f"{r[key]:.3f}" for r in evals) + " |",
        f"| against the unigram entropy {ent:.3f} | "
        + " | ".join(f"{abs(ent - r[key]):.2f} {'under' if ent >= r[key] else 'above'}" for r in evals)
        + " |",
    ]
    note = _run_note(path)
    return "\n".join(out) + ("\n\n" + note if note else "") + "\n"


def default_finetuning(path):
    """finetune.py's log.jsonl: the validation records (loss, ROUGE on its sample) and the run's time."""
    evals = [r for r in _jsonl(path) if "valid_loss" in r]
    cols = [c for c in ("valid_loss", "valid_acc", "valid_rouge1", "valid_rouge2", "valid_rougeL") if c in evals[-1]]
    out = ["| step | " + " | ".join(c[6:] for c in cols) + " |", "|---|" + "---|" * len(cols)]
    out += [
        f"| {r['step']} | "
        + " | ".join(f"{r[c]:.3f}" if c in ("valid_loss", "valid_acc") else f"{r[c]:.2f}" for c in cols)
        + " |"
        for r in evals
    ]
    note = _run_note(path)
    return "\n".join(out) + ("\n\n" + note if note else "") + "\n"


def decoders(folder):
    """A folder of eval.py result files: quality, work and batch-1 latency of each decoder and setting."""
    out = [
        "| run | decoding | setting | ROUGE-1 | ROUGE-2 | ROUGE-L | decoder multiply-adds | mean exit layer | "
        "batch-1 ms | samples/s at batch 64 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in figures.decoder_rows(folder):
        flops = f"{r['dec_flops']:.2f}" if "dec_flops" in r else "-"
        exit_layer = f"{r['mean_exit']:.2f}" if "mean_exit" in r else "-"
        out.append(
            f"| {r['run']} | {r['family']} | {r['shown']} | {r['rouge1']:.2f} | {r['rouge2']:.2f} | "
            f"{r['rougeL']:.2f} | "
            f"{flops} | {exit_layer} | {r['latency_ms']:.1f} | {r['samples_per_s']:.0f} |"
        )
    return "\n".join(out) + "\n"


def _value(v):
    return "-" if v is None else f"{v:.2f}"


def _pair(p):
    """One pair of a claim: its difference, the seeds on each side, the interval and the verdict (with
    the smallest difference this comparison could detect), as RESULTS.md prints it."""
    return pair_text(p)


def checks(spec):
    """reproduce's results.json: the project's checks of its own choices (reproduce/orderings.py CHECKS),
    read as a claim is; PATH::WHAT keeps the checks of one choice (its "what", "~" for a space)."""
    path, _, what = spec.partition("::")
    d = _load(path)
    rows = [c for c in d["checks"] if not what or c["what"] == what.replace("~", " ")]
    if not rows:
        raise SystemExit(f"error: {spec}: no check of {what!r} in {path}")
    out = [
        "| choice | check | here | difference (seeds a side), 95% interval | verdict |",
        "|---|---|---|---|---|",
    ]
    for c in rows:
        pairs = "; ".join(_pair(p) for p in c["pairs"]) or "-"
        out.append(
            f"| {c['what']} | {c['check']} ({c['metric']}, `{c['chain']}`) | {c['here'] or '-'} | {pairs} "
            f"| {c['verdict']} |"
        )
    out += ["", f"At the `{d['budget']}` budget, written {d['written']}; {d['environment']}."]
    return "\n".join(out) + "\n"


def claims_summary(path):
    """reproduce's results.json: the one sentence of how many claims hold, are reversed, are not
    resolved and are not measured yet."""
    d = _load(path)
    if "summary" not in d:
        raise SystemExit(
            f"error: {path} has no summary of the claims: write it again with python -m reproduce --report-only"
        )
    return d["summary"]["sentence"] + "\n"


def scorecard(spec):
    """reproduce's results.json: each paper claim, the paper's figures, ours with the pretrainings' held-out
    loss under the unigram entropy, each pair's difference with its 95% interval, and the verdict;
    PATH::measured leaves out the claims not measured yet, PATH::MLAE keeps one paper's claims (both:
    PATH::MLAE,measured)."""
    path, _, only = spec.partition("::")
    d = _load(path)
    runs, pre = d["runs"], d["pretraining"]
    filters = [f for f in only.split(",") if f]
    papers = [f for f in filters if f != "measured"]
    orderings = [
        o for o in figures.orderings_of(d, path) if not papers or any(o["paper"].startswith(p) for p in papers)
    ]
    if papers and not orderings:
        raise SystemExit(
            f"error: {spec}: no claim of {', '.join(papers)} in {path} (its papers: "
            f"{', '.join(sorted({o['paper'].split()[0] for o in d['orderings']}))})"
        )
    out = [
        "| paper | claim | the paper's figures | here, in the order measured | difference (seeds a side), 95% "
        "interval | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for o in orderings:
        if "measured" in filters and o["verdict"].startswith("not measured"):
            continue
        pairs = "; ".join(_pair(p) for p in o["pairs"]) or "-"
        if o.get("controls"):  # the project's controls: shown, deciding nothing
            pairs += "; the project's controls, deciding nothing: " + "; ".join(_pair(p) for p in o["controls"])
        out.append(
            f"| {o['paper']} | {o['claim']} ({o['metric']}, `{o['chain']}`) | {o.get('theirs', '-')} | "
            f"{o.get('here') or '-'} | {pairs} | {verdict_text(o)} |"
        )
    measured = [o for o in orderings if not o["verdict"].startswith("not measured")]
    used = sorted(
        {runs[n]["pretraining"] for o in measured for n in o["values"] if n in runs and runs[n].get("pretraining")}
    )
    whose = f"{' and '.join(papers)}'s " if papers else ""
    out += [
        "",
        f"{len(measured)} of {whose}{len(orderings)} claims measured at the `{d['budget']}` budget "
        f"({d['steps']} pretraining steps; written {d['written']}; {d['environment']}).",
    ]
    if used:
        out.append(
            "The pretrainings behind them, held-out loss under the unigram entropy at their last step: "
            + ", ".join(
                f"{p} {pre[p]['under']:.2f} nats ({pre[p]['held_out_loss']:.3f} against "
                f"{pre[p]['unigram_entropy']:.3f})"
                for p in used
                if p in pre
            )
            + "."
        )
    return "\n".join(out) + "\n"


def mask_sweep(path):
    """reproduce's results.json: MLAE Figure 3's sweep, one row per initial mask ratio m0, each the run
    of that name (its first seed); for a run with further seeds, a line with their mean, the figure
    the scorecard shows."""
    out = [
        "| m0 | run | ROUGE-2, 95% interval | ROUGE-L | pretraining, under the unigram entropy |",
        "|---|---|---|---|---|",
    ]
    runs, means = _load(path)["runs"], []
    for m, name, r in figures.mask_sweep_rows(path):
        seeds = [runs[n]["metrics"] for n in seeds_of(name, runs) if n in runs]
        if len(seeds) > 1:
            means.append(
                f"{name}: the row is its first seed; the mean of its {len(seeds)} seeds, the scorecard's, is "
                + " and ".join(
                    f"{k} {statistics.mean(x[key] for x in seeds):.2f}"
                    for k, key in (("ROUGE-2", "rouge2"), ("ROUGE-L", "rougeL"))
                )
                + "."
            )
        if not r:
            out.append(f"| {m:g} | {name} | not run | - | - |")
            continue
        low, high = r.get("intervals", {}).get("rouge2", (None, None))
        spread = f" [{low:.2f}, {high:.2f}]" if low is not None else ""
        out.append(
            f"| {m:g} | {name} | {r['metrics']['rouge2']:.2f}{spread} | {r['metrics']['rougeL']:.2f} | "
            f"{r['pretraining']} step {r['pretraining_step']}, {_value(r['under'])} nats |"
        )
    return "\n".join(out + ([""] + means if means else [])) + "\n"


def _kind_of(run):
    """What a fine-tuned run of the plan is, for the time it takes: its task and its decoder."""
    m = run["metrics"]
    if m.get("task") == "classify" or "accuracy" in m:
        return "classification fine-tuning"
    if m.get("arch") == "elmer":
        return "ELMER fine-tuning"
    return (
        "NAR fine-tuning" if str(m.get("decoding", "")).startswith("mask-predict") else "summarization fine-tuning (AR)"
    )


def _minutes(secs):
    return f"{secs:.0f} s" if secs < 90 else f"{secs / 60:.0f} min" if secs < 5400 else f"{secs / 3600:.1f} h"


def run_times(path):
    """reproduce's results.json: how long each kind of run took at the budget, from the runner's clock."""
    d = _load(path)
    kinds = {
        k: []
        for k in (
            "pretraining",
            "LPLM pretraining (ELMER)",
            "summarization fine-tuning (AR)",
            "NAR fine-tuning",
            "classification fine-tuning",
            "ELMER fine-tuning",
            "evaluation",
        )
    }
    for name, p in d["pretraining"].items():
        kinds.setdefault("LPLM pretraining (ELMER)" if name == "pre-elmer" else "pretraining", []).append(
            p.get("seconds")
        )
    for r in d["runs"].values():
        kinds.setdefault(_kind_of(r), []).append(r.get("seconds"))
        kinds.setdefault("evaluation", []).append(r.get("eval_seconds"))
    out = ["| run | runs timed | median | fastest | slowest |", "|---|---|---|---|---|"]
    for kind, secs in kinds.items():
        secs = sorted(s for s in secs if s is not None)
        if secs:
            out.append(
                f"| {kind} | {len(secs)} | {_minutes(statistics.median(secs))} | {_minutes(secs[0])} | "
                f"{_minutes(secs[-1])} |"
            )
    return "\n".join(out + ["", f"`{d['budget']}` budget, written {d['written']}; {d['environment']}."]) + "\n"


def pretrainings(path):
    """reproduce's results.json: every pretraining's held-out loss at its last step against the
    unigram entropy of the held-out text, whether it left the plateau, and its time."""
    d = _load(path)
    out = [
        "| run | what | step | held-out loss | unigram entropy | under it, nats | time |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in sorted(d["pretraining"].items()):
        time_ = _minutes(p["seconds"]) if p.get("seconds") else "-"
        out.append(
            f"| {name} | {p['label']} | {p['step']} | {p['held_out_loss']:.3f} ({p['loss']}) | "
            f"{p['unigram_entropy']:.3f} | {p['under']:.2f}{' (PLATEAU)' if p.get('plateau') else ''} | {time_} "
            "|"
        )
    if not d["pretraining"]:
        out.append("| (none yet) | | | | | | |")
    return "\n".join(out + ["", f"`{d['budget']}` budget, written {d['written']}; {d['environment']}."]) + "\n"


def _lr(v):
    """A learning rate as the flags write it: 1.5e-4, 1e-3."""
    m, e = f"{v:.2e}".split("e")
    return f"{m.rstrip('0').rstrip('.')}e{int(e)}"


def lr_grid(folder):
    """A folder of finetune.py runs that differ in --lr only (one sub-folder each, its config.json and
    log.jsonl): the validation loss of each at every validation, its lowest, and the one chosen."""
    runs = []
    for d in sorted(glob.glob(os.path.join(ROOT, folder, "*", "config.json"))):
        lr = _load(os.path.relpath(d, ROOT))["args"]["lr"]
        log = list(_jsonl(os.path.join(os.path.dirname(os.path.relpath(d, ROOT)), "log.jsonl")))
        evals = [r for r in log if "valid_loss" in r]
        runs.append((lr, {r["step"]: r for r in evals}, min(evals, key=lambda r: r["valid_loss"]), log[-1]["step"]))
    runs.sort(key=lambda r: r[0])
    steps = sorted({s for _, by, _, _ in runs for s in by})
    out = [
        "| peak lr | " + " | ".join(f"step {s}" for s in steps) + " | lowest | ROUGE-L there (sample) | steps run |",
        "|---|" + "---|" * (len(steps) + 3),
    ]
    for lr, by, best, last in runs:
        out.append(
            f"| {_lr(lr)} | "
            + " | ".join(f"{by[s]['valid_loss']:.3f}" if s in by else "-" for s in steps)
            + f" | {best['valid_loss']:.3f} (step {best['step']}) | {best['valid_rougeL']:.2f} | {last} |"
        )
    chosen = min(runs, key=lambda r: r[2]["valid_loss"])
    return "\n".join(out) + f"\n\nLowest validation loss: `--lr {_lr(chosen[0])}`.\n"


def study(path):
    """A study's or benchmark's --json (tools/records.py): its table and the command that made it."""
    return records.table(_load(path))


RENDERERS = {
    "study": study,
    "run-times": run_times,
    "run-time": run_time,
    "default-pretraining": default_pretraining,
    "default-finetuning": default_finetuning,
    "loops": loops,
    "backward": backward,
    "backward-loops": backward_loops,
    "attention": attention,
    "step": step,
    "targets": targets,
    "sweep": sweep,
    "exit": exit_rows,
    "table": table,
    "decoders": decoders,
    "loss-profile": loss_profile,
    "fused-backward": fused_backward,
    "plot-pretraining": figures.plot_pretraining,
    "plot-attention": figures.plot_attention,
    "plot-decoders": figures.plot_decoders,
    "plot-exits": figures.plot_exits,
    "scorecard": scorecard,
    "checks": checks,
    "claims-summary": claims_summary,
    "pretrainings": pretrainings,
    "plot-pretrainings": figures.plot_pretrainings,
    "plot-scorecard": figures.plot_scorecard,
    "mask-sweep": mask_sweep,
    "plot-mask-ratio": figures.plot_mask_ratio,
    "lr-grid": lr_grid,
    "plot-layout": layouts.plot_layout,
    "compile-cost": compile_cost,
    "release": render_release.release,
    "examples": render_release.examples,
    "five-minute": render_release.five_minutes,
}
NEEDS_WHERE = {k for k in RENDERERS if k.startswith("plot-")}


def files():
    return [
        p
        for p in [
            os.path.join(ROOT, "README.md"),
            os.path.join(ROOT, "bench", "RESULTS.md"),
            os.path.join(ROOT, "releases", "README.md"),
        ]
        + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
        if os.path.exists(p)
    ]


def render_text(text, where):
    def one(m):
        kind, path = m.group(2), m.group(3)
        if kind not in RENDERERS:
            raise SystemExit(f"error: {where}: unknown block kind {kind!r} (known: {', '.join(RENDERERS)})")
        if not os.path.exists(os.path.join(ROOT, path.split("::")[0])):
            raise SystemExit(f"error: {where}: the block's result file {path} does not exist")
        try:
            body = RENDERERS[kind](path, where) if kind in NEEDS_WHERE else RENDERERS[kind](path)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:  # a result file of another shape
            raise SystemExit(
                f"error: {where}: the {kind} block of {path} cannot be drawn from it "
                f"({type(e).__name__}: {e}): is it the file that kind reads?"
            ) from None
        return m.group(1) + body + m.group(5)

    opened, blocks = len(re.findall(r"<!-- render: ", text)), len(BLOCK.findall(text))
    if opened != blocks:
        raise SystemExit(
            f"error: {where}: {opened - blocks} render block(s) without a well-formed "
            f"`<!-- render: KIND PATH -->` line or their `<!-- /render -->` end"
        )
    return BLOCK.sub(one, text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs from its file")
    a = p.parse_args(argv)
    figures.DRAW["on"] = not a.check
    stale = []
    for path in files():
        with open(path) as f:
            text = f.read()
        new = render_text(text, os.path.relpath(path, ROOT))
        if new != text:
            stale.append(os.path.relpath(path, ROOT))
            if not a.check:
                with open(path, "w") as f:
                    f.write(new)
    if a.check and stale:
        print(
            f"error: generated blocks out of date in {', '.join(stale)}: run python -m tools.render_docs",
            file=sys.stderr,
        )
        return 1
    print(
        ("checked " if a.check else "rendered ")
        + f"{len(files())} files"
        + (f"; rewrote {', '.join(stale)}" if stale and not a.check else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
