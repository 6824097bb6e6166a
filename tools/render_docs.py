"""Fill the generated blocks of the docs from committed result files; --check fails when they differ.

    python -m tools.render_docs            # rewrite every block
    python -m tools.render_docs --check    # exit 1 if a block is not what its file renders to (CI)

A block is written in a markdown file as

    <!-- render: KIND PATH -->
    ...generated, never edited by hand...
    <!-- /render -->

KIND names a renderer below and PATH a result file (relative to the repository root) that it
reads (for `table`, PATH::MARKER or PATH::MARKER#N, "~" standing for a space in the marker; `targets`
PATH::PREFIX keeps the targets so named; `scorecard` PATH::measured the claims measured): no number in a
block is typed by hand. Files scanned: README.md, docs/*.md, bench/RESULTS.md.

The `plot-*` kinds draw a figure into docs/figures/ (tools/figures.py: SVG, byte-identical for the
same data) and write the line that shows it; drawing needs matplotlib (`pip install -r requirements-docs.txt`),
the one dependency of this command that the project does not have. --check draws nothing: it
checks the lines and that each figure exists.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

from reproduce.plan import parse_chain
from tools import figures, records
from tools.figures import ROOT, _jsonl, _load

BLOCK = re.compile(r"(<!-- render: (\S+) (\S+) -->\n)(.*?)(<!-- /render -->)", re.S)



def attention(path):
    """bench/bench_attention.py --json: per layout, every method's times, TFLOP/s on visible pairs
    and ours' speed-up (kernel-only rows against ours kernel-only, end-to-end against ours)."""
    d = _load(path)
    out = [f"{d['device']}, torch {d['torch']}, triton {d['triton']}, {d['date']}. Times in ms (median, CUDA events; "
           "ours kernel-only by CUDA-graph replay); TFLOP/s count the visible pairs only (forward 4 H D visible, "
           "forward+backward 3.5x that).", ""]
    for r in d["records"]:
        t = r["tiles"]
        out += [f"**{r['layout']}, D {r['D']}** (B {r['B']}, L {r['L']}; blocks {r['config'][:2]}; visible "
                f"{100 * r['visible'] / (r['B'] * r['L'] ** 2):.1f}% of L*L, computed {100 * r['computed'] / (r['B'] * r['L'] ** 2):.1f}%: "
                f"PARTIAL {t['partial']}, FULL {t['full']}, FAR {t['far']}, GATHER {t['gather']} tiles; codes + map + "
                f"table {r['map_ms']:.3f} ms" + (f" eager, {r['map_graph_ms']:.3f} ms as a graph" if "map_graph_ms" in r
                                                   else "") + ")", "",
                "| method | fwd ms | fwd+bwd ms | fwd TFLOP/s | fwd+bwd TFLOP/s | ours fwd speed-up | ours fwd+bwd speed-up |",
                "|---|---|---|---|---|---|---|"]
        ms = r["methods"]
        for label, m in ms.items():
            mine = ms.get("ours kernel" if "kernel" in label else "ours")
            out.append(f"| {label} | {m['fwd_ms']:.3f} | {m['fwdbwd_ms']:.3f} | {m['fwd_tflops']:.1f} | {m['fwdbwd_tflops']:.1f} | "
                       f"{m['fwd_ms'] / mine['fwd_ms']:.2f}x | {m['fwdbwd_ms'] / mine['fwdbwd_ms']:.2f}x |")
        if r.get("flex_causal_vs_sdpa"):
            f = r["flex_causal_vs_sdpa"]
            out.append(f"\nFlex checked: causal at this shape {f['flex_ms']:.3f} ms against SDPA's causal kernel "
                       f"{f['sdpa_ms']:.3f} ms ({f['sdpa_ms'] / f['flex_ms']:.2f}x its speed): fused.")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def targets(spec):
    """The targets a benchmark's --json lists, met or not; PATH::PREFIX keeps those whose name starts
    with PREFIX ("~" for a space)."""
    path, _, prefix = spec.partition("::")
    d = _load(path)
    out = ["| target | measured | wanted | met |", "|---|---|---|---|"]
    for t in d.get("targets", []) + d.get("forced_targets", []) + d.get("ckpt_targets", []):
        if not t["target"].startswith(prefix.replace("~", " ")):
            continue
        got, want = t["measured"], t["wanted"]
        # bench_attention.py writes an upper bound as a negative number; bench_early_exit.py's are all upper bounds
        at_most = want < 0 or t.get("sense") == "<=" or "exit" in os.path.basename(path) or "ckpt_targets" in d
        shown = "-" if got is None else (f"{got:.1%}" if "map /" in t["target"] else f"{got:.2f}")
        met = t["met"] if isinstance(t["met"], str) else ("yes" if t["met"] else "no")
        wanted = f"{abs(want):.0%}" if "map /" in t["target"] else f"{abs(want):g}"
        out.append(f"| {t['target']} | {shown} | {'<=' if at_most else '>='} {wanted} | {met} |")
    return "\n".join(out) + "\n"


def sweep(path):
    """The block configurations bench_attention.py --sweep timed, per head dim."""
    d = _load(path)
    out = ["| head dim | BM, BN, fwd warps, stages, BMK, BNK, kv warps, stages, dq warps, stages | fwd ms | fwd+bwd ms | chosen |",
           "|---|---|---|---|---|"]
    for r in d["records"]:
        for s in r.get("sweep", []):
            out.append(f"| {r['D']} ({r['layout']}) | {', '.join(map(str, s['config']))} | {s['fwd_ms']:.3f} | "
                       f"{s['fwdbwd_ms']:.3f} | {'yes' if s['config'] == r['config'] else ''} |")
    return "\n".join(out) + "\n"


def exit_rows(path):
    """bench/bench_early_exit.py --graphs --json: decoder time per pass and its ratio."""
    d = _load(path)
    out = [f"{d['device']}, torch {d['torch']}, {d['date']}.", "",
           "| batch | what | ms | / reference |", "|---|---|---|---|"]
    for r in d["rows"]:
        out.append(f"| {r['batch']} | {r['what']} | {r['ms']:.2f} | {r['ratio']:.3f} |")
    return "\n".join(out) + "\n"


def table(spec):
    """PATH::MARKER: the markdown tables (and their target lines) that follow the first line holding
    MARKER in a text result file (a benchmark's log), up to the next blank line after them, and the
    run's time where a run.json beside the file names it."""
    path, marker = spec.split("::", 1)
    nth = 1
    if re.search(r"#\d+$", marker):  # MARKER#N: the N-th line holding it
        marker, nth = marker.rsplit("#", 1)
        nth = int(nth)
    marker = marker.replace("~", " ")
    with open(os.path.join(ROOT, path)) as f:
        lines = f.read().splitlines()
    hits = [i for i, l in enumerate(lines) if marker in l]
    start = hits[nth - 1] if len(hits) >= nth else None
    if start is None:
        raise SystemExit(f"error: no line holding {marker!r} in {path}")
    out, seen = [], False
    for l in lines[start + 1:]:
        if l.startswith("|") or l.startswith("target "):
            out.append(l if l.startswith("|") else f"({l})")
            seen = True
        elif seen and not l.strip():
            break
    note = _run_note(path)  # the run.json beside the file, if it names it
    return "\n".join(o for o in out if o.startswith("|")) + "\n" + "".join(f"\n{o}" for o in out if not o.startswith("|")) \
        + ("\n" if any(not o.startswith("|") for o in out) else "") + (f"\n{note}\n" if note else "")


def loops(path):
    """kernels/aot.py --loops --json: the SASS per loop iteration of each tile class of the attention
    kernels, against the plain FlashAttention loop compiled with the forward's blocks."""
    sys.path.insert(0, ROOT)
    from kernels.aot import LOOP_NAMES, REL_CASES
    rows = _load(path)
    version = os.path.basename(path)[:-5].split("triton-")[-1]
    plain = {c.rsplit("-", 1)[1]: r["loops"][0] for r in rows if r["kernel"] == "_plain_flash_fwd" and r.get("loops")
             for c in r["cases"]}
    names = LOOP_NAMES[True]
    out = [f"Triton {version}, sm_90a. SASS instructions per thread per iteration of each loop; the forward's "
           f"against the plain loop (x plain); after the slash, the fewest cp.async groups its waits leave in flight "
           f"(0: each iteration waits for every copy, the next tiles' too). Plain loop: "
           + ", ".join(f"{d} {n}" for d, n in sorted(plain.items())) + ".", "",
           "| kernel | case | registers | spills | shared KB | " + " | ".join(names) + " |", "|" + "---|" * (5 + len(names))]
    for r in rows:
        if r["module"] != "pseudo_attention" or not r["compiles"] or r["kernel"] == "_delta_kernel":
            continue
        case = r["cases"][0]
        rel = case.split("-")[0] in REL_CASES
        if len(r["loops"]) != len(LOOP_NAMES[rel]):
            continue
        cells = dict(zip(LOOP_NAMES[rel], r["loops"]))
        waits = dict(zip(LOOP_NAMES[rel], r.get("loop_waits") or [None] * len(r["loops"])))
        base = plain.get(case.rsplit("-", 1)[1]) if r["kernel"] == "_fwd_kernel" else None
        show = lambda n: "-" if n not in cells else (f"{cells[n]}" + (f" ({cells[n] / base:.2f})" if base else "")  # noqa: E731
                                                     + ("" if waits[n] is None else f" / {waits[n]}"))
        out.append(f"| {r['kernel']} | {case} | {r['registers']} | {r['spill_stores']}/{r['spill_loads']} | "
                   f"{r['shared'] / 1024:.0f} | "
                   + " | ".join(show(n) for n in names) + " |")
    return "\n".join(out) + "\n"



def _run_note(path):
    """The run.json beside a log, if any: how long it took, where, with what command."""
    run = os.path.join(os.path.dirname(os.path.join(ROOT, path)), "run.json")
    if not os.path.exists(run):
        return ""
    with open(run) as f:
        r = json.load(f)
    part = r.get(os.path.basename(path))
    if not part:
        return ""
    secs = part["seconds"]
    took = f"{secs // 60:.0f} min {secs % 60:.0f} s" if secs >= 60 else f"{secs:.0f} s"
    return f"`{part['command']}` took {took} ({r['machine']})."


def default_pretraining(path):
    """train.py's log.jsonl: the held-out records against the unigram entropy, and the run's time."""
    evals = [r for r in _jsonl(path) if "unigram_entropy" in r]
    key = next(k for k in ("valid_ae_hidden_loss", "valid_ae_loss", "valid_text_loss", "valid_loss") if k in evals[-1])
    ent = evals[-1]["unigram_entropy"]
    out = ["| step | " + " | ".join(str(r["step"]) for r in evals) + " |", "|---|" + "---|" * len(evals),
           f"| held-out {key[6:]} | " + " | ".join(f"{r[key]:.3f}" for r in evals) + " |",
           f"| under the unigram entropy {ent:.3f} | " + " | ".join(f"{ent - r[key]:.2f}" for r in evals) + " |"]
    note = _run_note(path)
    return "\n".join(out) + ("\n\n" + note if note else "") + "\n"


def default_finetuning(path):
    """finetune.py's log.jsonl: the validation records (loss, ROUGE on its sample) and the run's time."""
    evals = [r for r in _jsonl(path) if "valid_loss" in r]
    cols = [c for c in ("valid_loss", "valid_acc", "valid_rouge1", "valid_rouge2", "valid_rougeL") if c in evals[-1]]
    out = ["| step | " + " | ".join(c[6:] for c in cols) + " |", "|---|" + "---|" * len(cols)]
    out += [f"| {r['step']} | " + " | ".join(f"{r[c]:.3f}" if c in ("valid_loss", "valid_acc") else f"{r[c]:.2f}"
                                           for c in cols) + " |" for r in evals]
    note = _run_note(path)
    return "\n".join(out) + ("\n\n" + note if note else "") + "\n"


def decoders(folder):
    """A folder of eval.py result files: quality, work and batch-1 latency of each decoder and setting."""
    out = ["| run | decoding | setting | ROUGE-1 | ROUGE-2 | ROUGE-L | decoder multiply-adds | mean exit layer | "
           "batch-1 ms | samples/s at batch 64 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in figures.decoder_rows(folder):
        flops = f"{r['dec_flops']:.2f}" if "dec_flops" in r else "-"
        exit_layer = f"{r['mean_exit']:.2f}" if "mean_exit" in r else "-"
        out.append(f"| {r['run']} | {r['family']} | {r['shown']} | {r['rouge1']:.2f} | {r['rouge2']:.2f} | {r['rougeL']:.2f} | "
                   f"{flops} | {exit_layer} | {r['latency_ms']:.1f} | {r['samples_per_s']:.0f} |")
    return "\n".join(out) + "\n"


def fused_backward(path):
    """bench/bench_attention.py --json: per layout, ours kernel-only with the backward's two
    structures (dQ fused by atomics into the dK/dV kernel, or a dQ kernel apart), fwd+bwd and
    backward / forward; beside them SDPA's own backward / forward in the same run (flash without a
    mask, and the kernel with the dense mask), what a plain kernel's backward costs at this shape."""
    d = _load(path)

    def ratio(m):
        return f"{(m['fwdbwd_ms'] - m['fwd_ms']) / m['fwd_ms']:.2f}" if m else "-"
    out = [f"{d['device']}, torch {d['torch']}, triton {d['triton']}, {d['date']}; kernel-only, ms (CUDA-graph replay).", "",
           "| layout | dQ kernel apart: fwd+bwd | backward / forward | dQ fused: fwd+bwd | backward / forward | "
           "fused / apart | SDPA flash, no mask: backward / forward | SDPA kernel, dense mask: backward / forward |",
           "|---|---|---|---|---|---|---|---|"]
    for r in d["records"]:
        m = r["methods"]
        alt = r.get("alt_backward")
        if not alt or alt not in m:
            continue
        fused, apart = (m["ours kernel"], m[alt]) if alt.endswith("apart") else (m[alt], m["ours kernel"])
        fwd = m["ours kernel"]["fwd_ms"]
        out.append(f"| {r['layout']} D{r['D']} | {apart['fwdbwd_ms']:.3f} | {(apart['fwdbwd_ms'] - apart['fwd_ms']) / fwd:.2f} | "
                   f"{fused['fwdbwd_ms']:.3f} | {(fused['fwdbwd_ms'] - fused['fwd_ms']) / fwd:.2f} | "
                   f"{fused['fwdbwd_ms'] / apart['fwdbwd_ms']:.3f} | {ratio(m.get('sdpa-nomask'))} | "
                   f"{ratio(m.get('sdpa-mask kernel'))} |")
    return "\n".join(out) + "\n"


_PROFILE = re.compile(r"profile, V (\d+) N (\d+), chunk (\d+), (\w+): wall ([\d.]+) ms per call, "
                      r"its kernels ([\d.]+) ms of GPU time, (\d+) launches")


def loss_profile(path):
    """bench/bench_offramp.py --profile's log: per (V, N) the training loss's GPU time (its kernels,
    profiled) beside its timed time (do_bench, which a host-bound call stretches), ours and the
    chain's, and the launches of each."""
    with open(os.path.join(ROOT, path)) as f:
        lines = f.read().splitlines()
    prof, timed, V, in_loss = {}, {}, None, False
    for line in lines:
        m = _PROFILE.match(line)
        if m:
            prof[(int(m[1]), int(m[2]), m[4])] = (float(m[6]), int(m[7]), int(m[3]))
        elif line.startswith("V = "):
            V, in_loss = int(line.split()[2].rstrip(",")), False
        elif line.startswith("training loss"):
            in_loss = True
        elif in_loss and re.match(r"\| \d", line):
            cells = [c.strip() for c in line.strip("|").split("|")]
            timed[(V, int(cells[0]))] = (float(cells[1]), float(cells[4]))
    out = ["| V | N | chunk | chain GPU ms | ours GPU ms | chain / ours, GPU | chain timed ms | ours timed ms | "
           "chain / ours, timed | launches, chain / ours |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (v, n), (t_ref, t) in timed.items():
        (g_ref, l_ref, _), (g, l, chunk) = prof[(v, n, "torch")], prof[(v, n, "ours")]
        out.append(f"| {v} | {n} | {chunk} | {g_ref:.3f} | {g:.3f} | {g_ref / g:.2f} | {t_ref:.3f} | {t:.3f} | "
                   f"{t_ref / t:.2f} | {l_ref} / {l} |")
    return "\n".join(out) + "\n"


def _value(v):
    return "-" if v is None else f"{v:.2f}"


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
    orderings = [o for o in d["orderings"] if (not papers or any(o["paper"].startswith(p) for p in papers))]
    out = ["| paper | claim | the paper's figures | here | difference, 95% interval | verdict |",
           "|---|---|---|---|---|---|"]
    for o in orderings:
        if "measured" in filters and o["verdict"].startswith("not measured"):
            continue
        names, ops = parse_chain(o["chain"])
        here = " ".join(f"{n} {_value(o['values'][n])}" + (f" {op}" if op else "")
                        for n, op in zip(names, ops + [None])) if any(v is not None for v in o["values"].values()) else "-"
        pairs = "; ".join(f"{p['a']} - {p['b']}: {p['difference']:+.2f} [{p['low']:+.2f}, {p['high']:+.2f}], {p['verdict']}"
                          for p in o["pairs"]) or "-"
        out.append(f"| {o['paper']} | {o['claim']} ({o['metric']}) | {o.get('theirs', '-')} | {here} | {pairs} | "
                   f"{o['verdict']} |")
    measured = [o for o in orderings if not o["verdict"].startswith("not measured")]
    used = sorted({runs[n]["pretraining"] for o in measured for n in o["values"]
                   if n in runs and runs[n].get("pretraining")})
    whose = f"{' and '.join(papers)}'s " if papers else ""
    out += ["", f"{len(measured)} of {whose}{len(orderings)} claims measured at the `{d['budget']}` budget "
                f"({d['steps']} pretraining steps; written {d['written']}; {d['environment']})."]
    if used:
        out.append("The pretrainings behind them, held-out loss under the unigram entropy at their last step: " +
                   ", ".join(f"{p} {pre[p]['under']:.2f} nats ({pre[p]['held_out_loss']:.3f} against "
                             f"{pre[p]['unigram_entropy']:.3f})" for p in used if p in pre) + ".")
    return "\n".join(out) + "\n"


def mask_sweep(path):
    """reproduce's results.json: MLAE Figure 3's sweep, one row per initial mask ratio m0."""
    out = ["| m0 | run | ROUGE-2, 95% interval | ROUGE-L | pretraining, under the unigram entropy |", "|---|---|---|---|---|"]
    for m, name, r in figures.mask_sweep_rows(path):
        if not r:
            out.append(f"| {m:g} | {name} | not run | - | - |")
            continue
        low, high = r.get("intervals", {}).get("rouge2", (None, None))
        spread = f" [{low:.2f}, {high:.2f}]" if low is not None else ""
        out.append(f"| {m:g} | {name} | {r['metrics']['rouge2']:.2f}{spread} | {r['metrics']['rougeL']:.2f} | "
                   f"{r['pretraining']} step {r['pretraining_step']}, {_value(r['under'])} nats |")
    return "\n".join(out) + "\n"


def _kind_of(name, run):
    """What a fine-tuned run of the plan is, for the time it takes: its task and its decoder."""
    m = run["metrics"]
    if m.get("task") == "classify" or "accuracy" in m:
        return "classification fine-tuning"
    if m.get("arch") == "elmer":
        return "ELMER fine-tuning"
    return "NAR fine-tuning" if str(m.get("decoding", "")).startswith("mask-predict") else "summarization fine-tuning (AR)"


def _minutes(secs):
    return f"{secs:.0f} s" if secs < 90 else f"{secs / 60:.0f} min" if secs < 5400 else f"{secs / 3600:.1f} h"


def run_times(path):
    """reproduce's results.json: how long each kind of run took at the budget, from the runner's clock."""
    d = _load(path)
    kinds = {k: [] for k in ("pretraining", "LPLM pretraining (ELMER)", "summarization fine-tuning (AR)",
                             "NAR fine-tuning", "classification fine-tuning", "ELMER fine-tuning", "evaluation")}
    for name, p in d["pretraining"].items():
        kinds.setdefault("LPLM pretraining (ELMER)" if name == "pre-elmer" else "pretraining", []).append(p.get("seconds"))
    for name, r in d["runs"].items():
        kinds.setdefault(_kind_of(name, r), []).append(r.get("seconds"))
        kinds.setdefault("evaluation", []).append(r.get("eval_seconds"))
    out = ["| run | runs timed | median | fastest | slowest |", "|---|---|---|---|---|"]
    for kind, secs in kinds.items():
        secs = sorted(s for s in secs if s is not None)
        if secs:
            out.append(f"| {kind} | {len(secs)} | {_minutes(statistics.median(secs))} | {_minutes(secs[0])} | "
                       f"{_minutes(secs[-1])} |")
    return "\n".join(out + ["", f"`{d['budget']}` budget, written {d['written']}; {d['environment']}."]) + "\n"


def study(path):
    """A study's or benchmark's --json (tools/records.py): its table and the command that made it."""
    return records.table(_load(path))


RENDERERS = {"study": study, "run-times": run_times, "default-pretraining": default_pretraining, "default-finetuning": default_finetuning, "loops": loops,
             "attention": attention, "targets": targets, "sweep": sweep, "exit": exit_rows, "table": table,
             "decoders": decoders, "loss-profile": loss_profile, "fused-backward": fused_backward, "plot-pretraining": figures.plot_pretraining, "plot-attention": figures.plot_attention,
             "plot-decoders": figures.plot_decoders, "plot-exits": figures.plot_exits, "scorecard": scorecard,
             "plot-scorecard": figures.plot_scorecard, "mask-sweep": mask_sweep, "plot-mask-ratio": figures.plot_mask_ratio}
NEEDS_WHERE = {k for k in RENDERERS if k.startswith("plot-")}


def files():
    return [p for p in [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "bench", "RESULTS.md")]
            + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) if os.path.exists(p)]


def render_text(text, where):
    def one(m):
        kind, path = m.group(2), m.group(3)
        if kind not in RENDERERS:
            raise SystemExit(f"error: {where}: unknown block kind {kind!r} (known: {', '.join(RENDERERS)})")
        if not os.path.exists(os.path.join(ROOT, path.split("::")[0])):
            raise SystemExit(f"error: {where}: the block's result file {path} does not exist")
        body = RENDERERS[kind](path, where) if kind in NEEDS_WHERE else RENDERERS[kind](path)
        return m.group(1) + body + m.group(5)
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
        print(f"error: generated blocks out of date in {', '.join(stale)}: run python -m tools.render_docs", file=sys.stderr)
        return 1
    print(("checked " if a.check else "rendered ") + f"{len(files())} files" + (f"; rewrote {', '.join(stale)}" if stale and not a.check else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
