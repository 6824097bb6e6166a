"""The benchmark blocks of tools/render_docs.py: bench/bench_attention.py's and
bench/bench_early_exit.py's --json, tools/aot.py's SASS loops and bench/bench_offramp.py's
profile log, each rendered as a markdown table (what bench/RESULTS.md and docs/kernels.md show)."""

import os
import re

from tools.figures import ROOT, _load


def attention(path):
    """bench/bench_attention.py --json: per layout, every method's times, TFLOP/s on visible pairs
    and ours' speed-up (kernel-only rows against ours kernel-only, end-to-end against ours); a file
    of the equal-work harness (each layer charged its share of the step's setup) by charged_attention."""
    d = _load(path)
    if any("layer_fwdbwd_ms" in m for r in d["records"] for m in r["methods"].values()):
        return charged_attention(d)
    out = [
        f"{d['device']}, torch {d['torch']}, triton {d['triton']}, {d['date']}. Times in ms (median, CUDA events; "
        "ours kernel-only by CUDA-graph replay); TFLOP/s count the visible pairs only (forward 4 H D visible, "
        "forward+backward 3.5x that).",
        "",
    ]
    for r in d["records"]:
        t = r["tiles"]
        out += [
            f"**{r['layout']}, D {r['D']}** (B {r['B']}, L {r['L']}; blocks {r['config'][:2]}; visible "
            f"{100 * r['visible'] / (r['B'] * r['L'] ** 2):.1f}% of L*L, computed "
            f"{100 * r['computed'] / (r['B'] * r['L'] ** 2):.1f}%: "
            f"PARTIAL {t['partial']}, FULL {t['full']}, FAR {t['far']}, GATHER {t['gather']} tiles; codes + map + "
            f"table {r['map_ms']:.3f} ms"
            + (f" eager, {r['map_graph_ms']:.3f} ms as a graph" if "map_graph_ms" in r else "")
            + ")",
            "",
            "| method | fwd ms | fwd+bwd ms | fwd TFLOP/s | fwd+bwd TFLOP/s | ours' fwd speed / this one's "
            "| ours' fwd+bwd speed / this one's |",
            "|---|---|---|---|---|---|---|",
        ]
        ms = r["methods"]
        for label, m in ms.items():
            mine = ms.get("ours kernel" if "kernel" in label else "ours")
            out.append(
                f"| {label} | {m['fwd_ms']:.3f} | {m['fwdbwd_ms']:.3f} | {m['fwd_tflops']:.1f} | "
                f"{m['fwdbwd_tflops']:.1f} | "
                f"{m['fwd_ms'] / mine['fwd_ms']:.2f}x | {m['fwdbwd_ms'] / mine['fwdbwd_ms']:.2f}x |"
            )
        if r.get("flex_causal_vs_sdpa"):
            f = r["flex_causal_vs_sdpa"]
            out.append(
                f"\nFlex checked: causal at this shape {f['flex_ms']:.3f} ms against SDPA's causal kernel "
                f"{f['sdpa_ms']:.3f} ms ({f['sdpa_ms'] / f['flex_ms']:.2f}x its speed): fused."
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def charged_attention(d):
    """The equal-work harness's file: per layout, each method's call, setup and reduce times, a
    layer's charge, ours' speed over its own beside the work ratio, and what ran its attention."""
    from bench.common import attention_backend

    out = [
        f"{d['device']}, torch {d['torch']}, triton {d['triton']}, {d['date']}. Times in ms (median, CUDA events, "
        "L2 flushed, gradients reset, one function for every method); a layer is charged its call and its share "
        "of the step's setup and reduce; TFLOP/s count the visible pairs only."
        + (" The run was cut short: these are the layouts it finished." if d.get("complete") is False else ""),
        "",
    ]
    for r in d["records"]:
        dense, ours = r["B"] * r["L"] ** 2, r["methods"].get("ours")
        out += [
            f"**{r['layout']}, D {r['D']}** (B {r['B']}, L {r['L']}, {r['layers']} layers a step; visible "
            f"{100 * r['visible'] / dense:.1f}% of L*L, ours computes {100 * r['computed'] / dense:.1f}%)",
            "",
            "| method | bias gradient | fwd ms | fwd+bwd ms | setup ms | reduce ms | layer fwd+bwd ms | "
            "fwd+bwd TFLOP/s | ours' speed / this one's | work ratio | attention ran | kernels |",
            "|---" * 12 + "|",
        ]
        for label, m in r["methods"].items():
            work = (r["computed"] if label.startswith("ours") else dense * (m.get("blocks") or 1)) / r["computed"]
            up = f"{m['layer_fwdbwd_ms'] / ours['layer_fwdbwd_ms']:.2f}x" if ours else "-"
            out.append(
                f"| {label} | {'yes' if m['bias_grad'] else 'no'} | {m['fwd_ms']:.3f} | {m['fwdbwd_ms']:.3f} | "
                f"{m['setup_ms']:.3f} | {m['reduce_ms']:.3f} | {m['layer_fwdbwd_ms']:.3f} | "
                f"{m['fwdbwd_tflops']:.1f} | {up} | {work:.2f} "
                f"| {attention_backend(label, m.get('kernels', []))} | {', '.join(m.get('kernels', []))} |"
            )
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
    """The block configurations bench_attention.py --sweep timed, per head dim, and the backward's
    structure each ran with where the file says (dQ fused into the dK/dV kernel or apart)."""
    d = _load(path)
    out = [
        "| head dim | BM, BN, fwd warps, stages, BMK, BNK, kv warps, stages, dq warps, stages | dQ | fwd ms "
        "| fwd+bwd ms | chosen |",
        "|---|---|---|---|---|---|",
    ]
    dq = {None: "-", True: "fused", False: "apart"}
    for r in d["records"]:
        for s in r.get("sweep", []):
            chosen = s["config"] == r["config"] and s.get("fused_dq") == r.get("fused_dq")
            out.append(
                f"| {r['D']} ({r['layout']}) | {', '.join(map(str, s['config']))} | {dq[s.get('fused_dq')]} "
                f"| {s['fwd_ms']:.3f} | {s['fwdbwd_ms']:.3f} | {'yes' if chosen else ''} |"
            )
    return "\n".join(out) + "\n"


def exit_rows(path):
    """bench/bench_early_exit.py --graphs --json: decoder time per pass and its ratio."""
    d = _load(path)
    out = [
        f"{d['device']}, torch {d['torch']}, {d['date']}.",
        "",
        "| batch | what | ms | / reference |",
        "|---|---|---|---|",
    ]
    for r in d["rows"]:
        out.append(f"| {r['batch']} | {r['what']} | {r['ms']:.2f} | {r['ratio']:.3f} |")
    return "\n".join(out) + "\n"


def loops(path):
    """tools/aot.py --loops --json: the SASS per loop iteration of each tile class of the attention
    kernels, against the plain FlashAttention loop compiled with the forward's blocks."""
    from tools.aot_tables import ALL_LOOP_NAMES, loop_names

    rows = _load(path)
    version = os.path.basename(path)[:-5].split("triton-")[-1]
    plain = {
        c.rsplit("-", 1)[1]: r["loops"][0]
        for r in rows
        if r["kernel"] == "_plain_flash_fwd" and r.get("loops")
        for c in r["cases"]
    }
    kernels = [
        r
        for r in rows
        if r["module"] == "pseudo_attention" and r["compiles"] and r["kernel"] != "_delta_kernel" and loop_names(r)
    ]
    names = [n for n in ALL_LOOP_NAMES if any(n in loop_names(r) for r in kernels)]  # the columns some row fills
    out = [
        f"Triton {version}, sm_90a. SASS instructions per thread per iteration of each loop; the forward's "
        f"against the plain loop (x plain); after the slash, the fewest cp.async groups its waits leave in flight "
        f"(0: each iteration waits for every copy, the next tiles' too). Plain loop: "
        + ", ".join(f"{d} {n}" for d, n in sorted(plain.items()))
        + "."
        + (
            " Where the dK/dV kernel compiles PARTIAL and EDGE twice, PARTIAL and EDGE are the loops of "
            "the programs whose keys run (the table's gradient by windows), PARTIAL atomic and EDGE atomic "
            "those of the others (by atomics)."
            if "PARTIAL atomic" in names
            else ""
        ),
        "",
        "| kernel | case | registers | spills | shared KB | " + " | ".join(names) + " |",
        "|" + "---|" * (5 + len(names)),
    ]
    for r in kernels:
        case = r["cases"][0]
        cells = dict(zip(loop_names(r), r["loops"]))
        waits = dict(zip(loop_names(r), r.get("loop_waits") or [None] * len(r["loops"])))
        base = plain.get(case.rsplit("-", 1)[1]) if r["kernel"] == "_fwd_kernel" else None
        show = lambda n: (
            "-"
            if n not in cells
            else (
                f"{cells[n]}"
                + (f" ({cells[n] / base:.2f})" if base else "")  # noqa: E731
                + ("" if waits[n] is None else f" / {waits[n]}")
            )
        )
        out.append(
            f"| {r['kernel']} | {case} | {r['registers']} | {r['spill_stores']}/{r['spill_loads']} | "
            f"{r['shared'] / 1024:.0f} | " + " | ".join(show(n) for n in names) + " |"
        )
    return "\n".join(out) + "\n"


def backward(path):
    """tools/aot.py --loops --json FILE --side before|after: the dK/dV kernel's compile-time proxies
    before and after a change, beside the plain FlashAttention-2 dK/dV kernel (tools/aot_cases.py)
    compiled with the same blocks, warps and stages."""
    from tools.aot_tables import backward_table, wgmma_macs

    rec = _load(path)
    out = [
        "Triton " + ", ".join(sorted({rec[s]["triton"] for s in rec})) + ", sm_90a, read off the SASS of one "
        "iteration of each tile-class loop. Tile: query rows x keys. Products a pair: the wgmma's "
        "multiply-adds over pairs x D (S^T, dP^T, dV, dK and a fused dQ: 5; the table's gradient grouped "
        "by windows adds 2 NB / D). Atomic adds: elements added to global memory per 4,096 pairs (both "
        "branches of an if counted). Instructions: SASS a thread x threads, per pair. Loops FAR / FULL / "
        "PARTIAL (the plain kernel: its one loop).",
        "",
        "| side | kernel | case | tile, warps | registers | spill B | shared KB | programs / SM | "
        "wgmma / iteration | products a pair | atomic adds / 4096 pairs | instructions a pair |",
        "|" + "---|" * 12,
    ]
    for side in ("before", "after"):
        if side not in rec:
            continue
        for r in backward_table(rec[side]["rows"])[1]:
            (bm, bn), D = r["blocks"], int(r["case"].rsplit("-d", 1)[1])
            pairs, threads = bm * bn, 32 * r["num_warps"]
            loops = [r["loops"].get(n) for n in (("plain",) if "plain" in r["loops"] else ("FAR", "FULL", "PARTIAL"))]
            main = r["loops"].get("FULL") or r["loops"]["plain"]
            cell = lambda f: " / ".join("-" if l is None else f(l) for l in loops)  # noqa: E731
            out.append(
                f"| {side} ({rec[side]['commit']}) | {r['kernel']} | {r['case']} | {bm} x {bn}, "
                f"{r['num_warps']} | {r['registers']} | {r['spill']} | {r['shared'] / 1024:.0f} | "
                f"{r['programs_per_sm']} | "
                f"{main['wgmma']} | {wgmma_macs(main['wgmma_shapes'], r['num_warps']) / (pairs * D):.2f} | "
                + cell(lambda l: f"{l['atomics'] * 4096 // pairs}")
                + " | "
                + cell(lambda l: f"{l['instructions'] * threads / pairs:.0f}")
                + " |"
            )
    return "\n".join(out) + "\n"


def backward_loops(path):
    """tools/aot.py --loops --json FILE --side before|after: the dK/dV kernel's compile-time proxies
    before and after a change, a row per case and loop (tools/aot_tables.py loop_names), each cell
    before / after: registers, spills and programs an SM of the kernel, and the wgmma, SASS
    instructions and atomic adds to global memory of one iteration (one tile) of the loop."""
    from tools.aot_tables import ALL_LOOP_NAMES, backward_table

    rec = _load(path)
    sides = {s: {r["case"]: r for r in backward_table(rec[s]["rows"])[1]} for s in ("before", "after")}
    out = [
        "Triton " + ", ".join(sorted({rec[s]["triton"] for s in rec})) + ", sm_90a, read off the SASS of one "
        f"iteration of each loop; each cell before ({rec['before']['commit']}) / after ({rec['after']['commit']}), "
        "- where that side has no such loop. Tile: query rows x keys. SASS: instructions a thread. Atomic "
        "adds: elements added to global memory a tile (elements a thread x threads; both branches of an if "
        "counted).",
        "",
        "| case | tile, warps | registers | spill B | programs / SM | loop | wgmma / iteration | SASS / iteration "
        "| atomic adds / tile |",
        "|" + "---|" * 9,
    ]
    for case, after in sides["after"].items():
        before = sides["before"].get(case)
        if before is None:
            continue
        both = (before, after)
        pair = lambda f: " / ".join(str(f(r)) for r in both)  # noqa: E731
        for name in ALL_LOOP_NAMES:
            loops = [r["loops"].get(name) for r in both]
            if loops == [None, None]:
                continue
            cell = lambda k: " / ".join("-" if l is None else str(l[k]) for l in loops)  # noqa: E731
            tile = pair(lambda r: f"{r['blocks'][0]} x {r['blocks'][1]}, {r['num_warps']}")
            out.append(
                f"| {case} | {tile if len(set(tile.split(' / '))) > 1 else tile.split(' / ')[0]} | "
                f"{pair(lambda r: r['registers'])} | {pair(lambda r: r['spill'])} | "
                f"{pair(lambda r: r['programs_per_sm'])} | {name} | {cell('wgmma')} | {cell('instructions')} | "
                f"{cell('atomics')} |"
            )
    return "\n".join(out) + "\n"


def fused_backward(path):
    """bench/bench_attention.py --json: per layout, ours kernel-only with the backward's two
    structures (dQ fused by atomics into the dK/dV kernel, or a dQ kernel apart), fwd+bwd and
    backward / forward; beside them SDPA's own backward / forward in the same run (flash without a
    mask, and the kernel with the dense mask), what a plain kernel's backward costs at this shape."""
    d = _load(path)

    def ratio(m):
        return f"{(m['fwdbwd_ms'] - m['fwd_ms']) / m['fwd_ms']:.2f}" if m else "-"

    out = [
        f"{d['device']}, torch {d['torch']}, triton {d['triton']}, {d['date']}; kernel-only, ms (CUDA-graph replay).",
        "",
        "| layout | dQ kernel apart: fwd+bwd | backward / forward | dQ fused: fwd+bwd | backward / forward | "
        "fused / apart | SDPA flash, no mask: backward / forward | SDPA kernel, dense mask: backward / forward |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in d["records"]:
        m = r["methods"]
        alt = r.get("alt_backward")
        if not alt or alt not in m:
            continue
        fused, apart = (m["ours kernel"], m[alt]) if alt.endswith("apart") else (m[alt], m["ours kernel"])
        fwd = m["ours kernel"]["fwd_ms"]
        out.append(
            f"| {r['layout']} D{r['D']} | {apart['fwdbwd_ms']:.3f} | "
            f"{(apart['fwdbwd_ms'] - apart['fwd_ms']) / fwd:.2f} | "
            f"{fused['fwdbwd_ms']:.3f} | {(fused['fwdbwd_ms'] - fused['fwd_ms']) / fwd:.2f} | "
            f"{fused['fwdbwd_ms'] / apart['fwdbwd_ms']:.3f} | {ratio(m.get('sdpa-nomask'))} | "
            f"{ratio(m.get('sdpa-mask kernel'))} |"
        )
    return "\n".join(out) + "\n"


_PROFILE = re.compile(
    r"profile, V (\d+) N (\d+), chunk (\d+), (\w+): wall ([\d.]+) ms per call, "
    r"its kernels ([\d.]+) ms of GPU time, (\d+) launches"
)


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
    out = [
        "| V | N | chunk | chain GPU ms | ours GPU ms | chain / ours, GPU | chain timed ms | ours timed ms | "
        "chain / ours, timed | launches, chain / ours |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (v, n), (t_ref, t) in timed.items():
        (g_ref, l_ref, _), (g, l, chunk) = prof[(v, n, "torch")], prof[(v, n, "ours")]
        out.append(
            f"| {v} | {n} | {chunk} | {g_ref:.3f} | {g:.3f} | {g_ref / g:.2f} | {t_ref:.3f} | {t:.3f} | "
            f"{t_ref / t:.2f} | {l_ref} / {l} |"
        )
    return "\n".join(out) + "\n"


def _attention_kernels(kernels, ms=None):
    """The attention kernels among a step's top kernels by device time: the backend that ran, with
    the milliseconds each took in the profiled step where the file has them."""
    keys = ("fmha", "flash", "sdpa", "attention", "_fwd_kernel", "_bwd_", "flex", "triton_tem")
    ms = ms or [None] * len(kernels)
    picked = [
        (k.split("(")[0].split("<")[0].replace("void ", ""), t)
        for k, t in zip(kernels, ms)
        if any(s in k for s in keys)
    ]
    return ", ".join(f"`{n[:60]}`" + (f" {t:.1f} ms" if t is not None else "") for n, t in picked[:2]) or "-"


def _configs(saved):
    """A save_configs file's content in a line: each head dim's blocks and the backward's structure."""
    dims = ", ".join(f"D {k}: ({', '.join(map(str, v))})" for k, v in saved.items() if k != "fused_dq")
    fused = saved.get("fused_dq")
    return dims + ("" if fused is None else f", dQ {'fused' if fused else 'apart'} at D 64")


def step(path):
    """bench/bench_step.py --json: each method's training step, its tokens/s and MFU, ours' speed over
    it (its time over ours', the one direction of every table: above 1, ours is faster; with the lowest
    and highest of the rounds' ratios where the file has rounds), the total of its kernels' time in a step beside the
    wall time where the file has it, its host syncs, and what ran its attention, in words
    (bench/common.attention_backend) and by kernel."""
    from bench.common import attention_backend

    d = _load(path)
    rounds = f", {d['timed_steps']} timed steps in {d['rounds']} rounds" if "rounds" in d else ""
    if "dense_flops_per_step" in d:
        rounds += (
            f"; with every pair computed, as a dense kernel does, {d['dense_flops_per_step'] / 1e12:.2f} "
            f"TFLOP (FLOP ratio {d['dense_flops_per_step'] / d['flops_per_step']:.2f})"
        )
    if d.get("complete") is False:
        rounds += f" (cut short after {len(d['rows'][0]['round_ms'])} of them)"
    if "swept_configs" in d:
        rounds += (
            f"; ours-swept ran the sweep's configurations {_configs(d['swept_configs'])}, ours the plan's "
            f"{_configs(d['plan_configs'])}"
        )
    base = next((r for r in d["rows"] if r["method"] == "ours"), d["rows"][0] if d["rows"] else None)
    name = base["method"] if base else "ours"
    possessive = name + ("'" if name.endswith("s") else "'s")
    out = [
        f"{d['device']}, torch {d['torch']}, triton {d['triton']}, commit {d['commit']}, {d['date']}: "
        f"`{d['model']}` {d['objective']} step, {d['tokens_per_step']:,} input tokens, "
        f"{d['flops_per_step'] / 1e12:.2f} TFLOP a step ({d['flop_count']}){rounds}; `{d['command']}`.",
        "",
        "| method | ms a step | each round, ms | kernel ms a step | tokens/s | TFLOP/s | MFU "
        f"| {possessive} speed over it | host syncs | attention ran | its kernels |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
        vs = f"{r['step_ms'] / base['step_ms']:.2f}x"
        if r.get("round_ms") and base.get("round_ms") and r is not base:
            # the rounds interleave the methods, so each round's ratio pairs steps run side by side
            each_ratio = [t / b for b, t in zip(base["round_ms"], r["round_ms"])]
            vs += f" (rounds {min(each_ratio):.2f}-{max(each_ratio):.2f})"
        each = ", ".join(f"{t:.1f}" for t in r.get("round_ms", [])) or "-"
        total = f"{r['kernel_total_ms']:.1f}" if r.get("kernel_total_ms") is not None else "-"
        out.append(
            f"| {r['method']} | {r['step_ms']:.1f} | {each} | {total} | {r['tokens_per_s']:,.0f} "
            f"| {r['tflops']:.1f} | {mfu} "
            f"| {vs} | {r.get('host_syncs', 'not checked (cut short)')[:50]} "
            f"| {r.get('attention') or attention_backend(r['method'], r.get('kernels', []))} "
            f"| {_attention_kernels(r.get('kernels', []), r.get('kernel_ms'))} |"
        )
    return "\n".join(out) + "\n"


def compile_cost(path):
    """bench/bench_step.py --json of one method eager and compiled (METHOD and METHOD:compiled, in one
    interleaved run): each one's step in processor time where the file has it (a CPU's), else wall
    time, the compile's cost (the compiled row's warm-up over the eager one's, the same steps), and
    the steps after which compiling pays back, against train.py's default run (its --steps)."""
    import train

    d = _load(path)
    eager = next(r for r in d["rows"] if r.get("mode", "eager") == "eager")
    comp = next(r for r in d["rows"] if r.get("mode") == "compiled")
    cpu = "step_cpu_ms" in eager
    step, warm, rounds = ("step_cpu_ms", "warmup_cpu_s", "round_cpu_ms") if cpu else ("step_ms", "warmup_s", "round_ms")
    clock = "processor" if cpu else "wall"
    out = [
        f"| mode | step, {clock} ms | each round | warm-up ({clock} s, compile included) "
        "| eager's step / this one's | step, wall ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in (eager, comp):
        out.append(
            f"| {r['mode']} | {r[step]:.0f} | {', '.join(f'{t:.0f}' for t in r[rounds])} | {r[warm]:.1f} "
            f"| {eager[step] / r[step]:.3f}x | {r['step_ms']:.0f} |"
        )
    saved_s, cost_s = (eager[step] - comp[step]) / 1e3, comp[warm] - eager[warm]
    steps = train.get_args([]).steps
    eager_s, comp_s = steps * eager[step] / 1e3, cost_s + steps * comp[step] / 1e3
    pays = f"pays back after {cost_s / saved_s:.0f} steps" if saved_s > 0 else "never pays back"
    out += [
        "",
        f"{d['device']}, {d['dtype']}, torch {d['torch']}, commit {d['commit']}, {d['date']}; "
        f"`{d['command']}`. Compiling costs {cost_s:.0f} {clock} s once per process and saves "
        f"{1e3 * saved_s:.0f} ms a step: it {pays}. Over train.py's default run of {steps} steps: eager "
        f"{eager_s / 60:.1f} min, compiled {comp_s / 60:.1f} min of steps, so "
        f"{'compiled' if comp_s < eager_s else 'eager'} is the faster.",
    ]
    return "\n".join(out) + "\n"
