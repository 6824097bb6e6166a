"""The pseudo-mask attention kernel against the obvious alternatives, on one GPU, in one run.

    python -m bench.bench_attention                       # every layout, D 64 and 128 (a few minutes)
    python -m bench.bench_attention --sweep --json out.json
    python -m bench.bench_attention --smoke               # tiny shapes on the CPU (interpreter): the plumbing only

Layouts (bf16, 12 heads, the model's relative position bias, M = 128):
  pmlm     UniLMv2 pretraining: 512 tokens of CONTEXT + ~30% appended (blockwise-masked spans, each
           span a factorization step, its ORIGINAL tokens then as many PSEUDO [P]), batch 32, D 64;
  s2s-1k   seq2seq fine-tuning: source CONTEXT, target ORIGINAL at step t, one PSEUDO per target
           token; 1024 tokens, batch 16, D 64 and 128;
  s2s-2k   the same at 2048 tokens, batch 8, D 64 and 128.
Rows are padded to the longest with invalid keys, as a training step pads its micro-batch, the same for all.

Every method is timed by one function (bench/attention_harness.py: do_bench, the L2 cache flushed
and the gradients reset before each run), on the same q, k, v made as the model makes them (views
of (B, L, H, D) projections), and asked the same gradients: q, k, v and the relative bias table
wherever the method has one. Each is split where a training step splits it, its setup built once
a step for all its layers and shown apart: a layer is charged its call plus its share
(1/--layers) of the step's setup and of the bias gradient's one way back to the table.

  ours            kernels/pseudo_attention.py: codes, tile map and bias row once a step;
                  "bias table frozen": a table that requires no gradient (the kernel skips it);
                  "dQ fused" / "dQ kernel apart": the backward the plan does not pick
                  (kernels/attention_plan.Tuning.fused_dq); "16-bit bias table": the other table
                  dtype (Tuning.table_16bit); "table's gradient by atomics": every pair's share
                  of the table's gradient added by an atomic, no windows (Tuning.grad_windows);
  sdpa-mask       kernels/baselines.py's sdpa (train.py --attention sdpa): SDPA with the dense
                  (B, H, L, L) bias + -inf mask built once a step, its gradient summed over the
                  layers and gathered back into the table once;
  flex            kernels/baselines.py's flex: FlexAttention, compiled, over int32 metadata, its
                  block mask once a step, the bias read by a score_mod from the (H, 2M+1) row
                  (its gradient through the captured row); fused or not is read off the kernel
                  names, and a causal run at the same shape against SDPA's causal kernel;
                  "flex, bias table frozen": the same with a table that requires no gradient
                  (what the captured table's gradient costs Flex);
  sdpa-nomask     SDPA with no mask at all: what a plain kernel costs over every pair (the dense
                  upper bound; wrong for these layouts).
The kernels each method ran are recorded by name (the profiler, one forward+backward): which
SDPA backend ran, and whether Flex ran fused. Two diagnostic rows, other work than the above and
in no target (--json "diagnostics"): ours with the same mask and no bias (what the bias costs),
and with every pair visible and no bias (every tile FULL: the work of sdpa-nomask).

FLOPs are counted on the visible pairs, the same count for every method: forward 4 H D visible,
forward+backward 3.5 times that (five matmuls to two). The work ratio beside each speed-up is the
pairs the other method computes (every pair for SDPA; Flex's non-empty blocks) over the pairs in
ours' computed tiles: ours ahead of sdpa-nomask by more than it is a measurement to doubt, and is
flagged. Before anything is timed, ours is checked against kernels/reference.py in bf16 on two rows
(output and the gradients of q, k, v and the bias table); the run stops on a mismatch.
Targets of the attention issue are printed last, met or not, and --json writes every figure (after
each layout, so that a run cut short keeps what it finished: `complete` false until the end).
"""

import argparse
import json
import os
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_attention (--help)")

import torch

from bench.attention_cases import (
    ALT_BACKWARD,
    BUCKETS,
    LAYOUTS,
    MAX_DIST,
    backward_name,
    baseline_method,
    candidates,
    flex_blocks,
    flex_sanity,
    layout,
    ours_method,
    read_configs,
    save_configs,
)
from bench.attention_harness import charge, fused_flex, kernel_names, timer
from bench.common import attention_backend, write_json
from kernels.attention_plan import FUSED_DQ_MAX_D, GRAD_WINDOWS_MAX_D

# the row that times the bias table's other dtype (attention_plan.Tuning.table_16bit -> its label)
ALT_TABLE = {False: "ours, 16-bit bias table", True: "ours, float32 bias table"}
# the row that times the table's gradient summed the other way (attention_plan.Tuning.grad_windows -> its label)
ALT_WINDOWS = {True: "ours, table's gradient by atomics", False: "ours, table's gradient by windows"}


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma-separated, of {', '.join(LAYOUTS)}")
    p.add_argument("--dims", default="64,128", help="head dims to run (a layout runs those it lists)")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="time the candidate block configurations on the first layout "
        "of each head dim and run every comparison with the fastest "
        "(forward+backward)",
    )
    p.add_argument(
        "--sweep-only",
        action="store_true",
        help="--sweep, then nothing else: the candidates' times and the fastest (--save-configs), no "
        "comparison rows (what gpu_check --part tune needs before its steps)",
    )
    p.add_argument("--no-flex", action="store_true", help="leave FlexAttention out (its compile takes minutes)")
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds: layouts not started by then are skipped, and Flex is left out of a layout that "
        "starts within 60 s of it (a lease's budget)",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=12,
        help="layers a training step runs, each charged 1/LAYERS of the step's setup (12: base)",
    )
    p.add_argument("--json", default=None, help="write every figure to this file")
    p.add_argument("--save-configs", default=None, help="--sweep: write the fastest configuration per head dim here")
    p.add_argument("--configs", default=None, help="run with the configurations a --save-configs file holds")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny shapes on the CPU under TRITON_INTERPRET=1: checks the script, measures nothing",
    )
    a = p.parse_args(argv)
    bad = [x for x in a.layouts.split(",") if x not in LAYOUTS]
    if bad:
        p.error(f"unknown layout {bad[0]!r}; pick from {', '.join(LAYOUTS)}")
    try:
        a.dims = tuple(int(d) for d in a.dims.split(","))
    except ValueError:
        p.error(f"--dims must be comma-separated integers, got {a.dims!r}")
    if not set(a.dims) <= {64, 128}:
        p.error("--dims takes 64 and/or 128")
    a.sweep = a.sweep or a.sweep_only
    if a.layers < 1:
        p.error(f"--layers {a.layers}: a step has at least one layer")
    if a.deadline is not None and not a.deadline > 0:
        p.error(f"--deadline {a.deadline:g}: seconds, above 0 (without it, no deadline)")
    from bench.common import check_flags

    check_flags(p, a, outputs=("json", "save_configs"), inputs=("configs",))
    return a


# -----------------------------------------------------------------------------
# one layout


def operands(name, D, dev, dtype, smoke):
    """(metadata, q k v leaves as the model makes them (B, L, H, D), bias table, output gradient)."""
    meta = layout(name, dev, smoke)
    B, L = meta[0].shape
    H = 2 if smoke else 12
    torch.manual_seed(0)
    leaves = [torch.randn(B, L, H, D, device=dev, dtype=dtype, requires_grad=True) for _ in range(3)]
    table = torch.randn(H, BUCKETS, device=dev, requires_grad=True)
    return meta, leaves, table, torch.randn(B, H, L, D, device=dev, dtype=dtype)


def views(leaves):
    return [x.transpose(1, 2) for x in leaves]


def alternatives(tuning, D):
    """{label: Tuning} of the rows that time what `tuning` does not pick: the other backward (at D 64;
    at D 128 there is one), the other bias table dtype, and the table's gradient summed the other
    way (where windows apply, up to GRAD_WINDOWS_MAX_D)."""
    out = {}
    if D <= FUSED_DQ_MAX_D:
        out[ALT_BACKWARD[tuning.fused_dq]] = tuning._replace(fused_dq=not tuning.fused_dq)
    out[ALT_TABLE[tuning.table_16bit]] = tuning._replace(table_16bit=not tuning.table_16bit)
    if D <= GRAD_WINDOWS_MAX_D:
        out[ALT_WINDOWS[tuning.grad_windows]] = tuning._replace(grad_windows=not tuning.grad_windows)
    return out


def checks(meta, table, q, k, v, tuning):
    """Ours against the reference as `tuning` launches it, then as each alternative does (a mismatch
    of the bias table's dtype drops its row; of a backward, fatal): {label: Tuning} of the alternatives
    whose check passed."""
    check(meta, table, q, k, v, tuning=tuning)
    ok = {}
    for label, alt in alternatives(tuning, q.shape[-1]).items():
        backward = label in ALT_BACKWARD.values() or label in ALT_WINDOWS.values()
        if check(meta, table, q, k, v, ", " + backward_name(label), fatal=backward, tuning=alt):
            ok[label] = alt
    return ok


def sweep(meta, leaves, table, dout, D, time_fn, n_layers, rec, tuning, deadline=None):
    """Time ours under each candidate configuration (attention_cases.candidates), each checked
    against the reference first (a mismatch drops it): `tuning` with the fastest forward+backward's
    blocks at head dim D and its backward structure, for the rest of the run. Past `deadline`
    (time.time()) no further candidate starts; the plan's own, the first, always runs."""
    q, k, v = (x.detach().transpose(1, 2).contiguous() for x in leaves)
    rows = []
    for i, (cfg, fused) in enumerate(candidates(D)):
        trial = tuning.with_config(D, cfg)
        trial = trial if fused is None else trial._replace(fused_dq=fused)
        name = f"{tuple(cfg)}" + ("" if fused is None else f", dQ {'fused' if fused else 'apart'}")
        if i and deadline is not None and time.time() > deadline:
            print(f"  {name}: not timed, the deadline has passed", flush=True)
            continue
        try:
            if not check(meta, table, q, k, v, f", {name}", fatal=False, tuning=trial):
                continue
            t = charge(ours_method("ours", meta, tuning=trial), leaves, table, dout, time_fn, n_layers)
        except Exception as e:  # noqa: BLE001  (a configuration that does not launch is reported)
            print(f"  {name}: failed ({type(e).__name__}: {str(e)[:100]})")
            continue
        rows.append((t["fwdbwd_ms"], t["fwd_ms"], cfg, fused))
        print(f"  sweep {name}: fwd {t['fwd_ms']:.3f} ms, fwd+bwd {t['fwdbwd_ms']:.3f} ms", flush=True)
    if not rows:
        sys.exit(f"--sweep: no candidate configuration at D {D} matched the reference")
    _, _, best, fused = min(rows, key=lambda r: r[0])
    rec["sweep"] = [dict(config=list(c), fused_dq=fz, fwd_ms=f, fwdbwd_ms=b) for b, f, c, fz in rows]
    rec["config"], rec["fused_dq"] = list(best), fused
    print(f"  fastest: {tuple(best)}" + ("" if fused is None else f", dQ {'fused' if fused else 'apart'}"), flush=True)
    tuning = tuning.with_config(D, best)
    return tuning if fused is None else tuning._replace(fused_dq=fused)


def tiles(meta, table, q, k, v, rec, tuning):
    """What ours computes: its tiles by class and the pairs in them, against the visible pairs."""
    from kernels import MaskMeta, attention_plan, reference, rel_pos_bias

    kind, step, pos, valid = meta
    cfg = tuning.config(q.device, q.shape[-1])
    rec.setdefault("config", list(cfg))
    pm, _, _ = attention_plan.prepare(
        q, k, v, MaskMeta(kind, step, kind, step, valid), bias=rel_pos_bias(table, pos, pos, MAX_DIST), tuning=tuning
    )
    counts = pm.tiles.q_count.sum((0, 1)).tolist()  # PARTIAL, FULL, FAR, GATHER
    B, L = kind.shape
    rec.update(
        visible=reference.visible(kind, step, kind, step, valid).sum().item(),
        computed=sum(counts) * cfg.BM * cfg.BN,
        tiles=dict(zip(("partial", "full", "far", "gather"), counts)),
    )
    print(
        f"  visible pairs {100 * rec['visible'] / (B * L * L):.1f}% of L*L; computed tiles "
        f"{100 * rec['computed'] / (B * L * L):.1f}% ({cfg.BM}x{cfg.BN}: PARTIAL {counts[0]}, FULL {counts[1]}, "
        f"FAR {counts[2]}, GATHER {counts[3]})",
        flush=True,
    )


def methods(meta, D, alternatives, with_flex, tuning=None):
    """The method of every row, ours first (launched as `tuning` says, each alternative as its own
    Tuning: {label: Tuning})."""
    rows = [
        ours_method("ours", meta, tuning=tuning),
        ours_method("ours, bias table frozen", meta, frozen=True, tuning=tuning),
    ]
    rows += [ours_method(label, meta, tuning=alt) for label, alt in alternatives.items()]
    rows += [baseline_method("sdpa-mask", "sdpa", meta)]
    if with_flex:  # frozen: whether the gradient of the table its score_mod reads is what costs Flex
        rows += [
            baseline_method("flex", "flex", meta),
            baseline_method("flex, bias table frozen", "flex", meta, frozen=True),
        ]
    rows += [baseline_method("sdpa-nomask", "sdpa-nomask", meta)]
    return rows


def time_methods(rows, leaves, table, dout, time_fn, n_layers, rec):
    """Every method charged by one function, and the kernels one forward+backward of it ran."""
    for m in rows:
        try:
            t = charge(m, leaves, table, dout, time_fn, n_layers)
            st = m.setup(table, *views(leaves))
            t["kernels"] = kernel_names(lambda: m.call(st, *views(leaves)).backward(dout))
        except Exception as e:  # noqa: BLE001  (a baseline that cannot run is reported, not fatal)
            print(f"  {m.label}: failed ({type(e).__name__}: {str(e)[:160]})", flush=True)
            continue
        if m.label == "flex":
            t["fused"], t["blocks"] = fused_flex(t["kernels"]), flex_blocks(st)
        rec["methods"][m.label] = t


def bench(name, D, args, dev, dtype, time_fn, tuning, swept):
    """A layout's record at head dim D, and the Tuning the rest of the run keeps (the sweep's choice
    where it sweeps: once per head dim, on the first layout that has it, its dims added to `swept`)."""
    meta, leaves, table, dout = operands(name, D, dev, dtype, args.smoke)
    q, k, v = (x.detach().transpose(1, 2).contiguous() for x in leaves)
    B, L, H = q.shape[0], q.shape[2], q.shape[1]
    print(f"\n## {name}, D {D}: B={B} H={H} L={L} (mean {meta[3].sum().item() / B:.0f} real tokens a row)", flush=True)
    rec = dict(layout=name, D=D, B=B, H=H, L=L, layers=args.layers, methods={})
    if args.sweep and D not in swept:
        tuning = sweep(meta, leaves, table, dout, D, time_fn, args.layers, rec, tuning, getattr(args, "until", None))
        swept.add(D)
        if args.save_configs:  # at once: a run cut short after its sweep keeps the choice
            save_configs(args.save_configs, tuning, sorted(swept))
    if args.sweep_only:
        return rec, tuning
    alts = checks(meta, table, q, k, v, tuning)  # with the configuration the sweep chose
    rec["alt_backward"] = ALT_BACKWARD[tuning.fused_dq]
    tiles(meta, table, q, k, v, rec, tuning)
    with_flex = not args.no_flex and not getattr(args, "skip_flex", False)
    time_methods(methods(meta, D, alts, with_flex, tuning), leaves, table, dout, time_fn, args.layers, rec)
    rec["diagnostics"] = diagnostics(meta, leaves, table, dout, time_fn, args.layers)
    if with_flex and not args.smoke:
        try:
            fc, sc = flex_sanity(q, k, v, time_fn)
            rec["flex_causal_vs_sdpa"] = dict(flex_ms=fc, sdpa_ms=sc)
        except Exception as e:  # noqa: BLE001
            print(f"  flex sanity: failed ({type(e).__name__}: {str(e)[:160]})", flush=True)
    report(rec)
    return rec, tuning


def diagnostics(meta, leaves, table, dout, time_fn, n_layers):
    """Where ours spends its time (not baselines: other work than the rows of the table): the same
    mask without the relative bias (what the bias costs), and every pair visible without a bias
    (every tile FULL: ours as a plain FlashAttention over all pairs, beside sdpa-nomask, which does
    the same work: what the tile lists and the loops cost)."""
    from kernels import CONTEXT

    kind, step, pos, valid = meta
    every = (torch.full_like(kind, CONTEXT), torch.zeros_like(step), pos, torch.ones_like(valid))
    out = {}
    for label, m in (("ours, no bias", meta), ("ours, every pair visible, no bias", every)):
        try:
            out[label] = charge(ours_method(label, m, bias=False), leaves, table, dout, time_fn, n_layers)
        except Exception as e:  # noqa: BLE001  (a diagnostic that cannot run is reported, not fatal)
            print(f"  {label}: failed ({type(e).__name__}: {str(e)[:160]})", flush=True)
            return {}
    return out


# -----------------------------------------------------------------------------
# what a layout's record says


def work(rec, label):
    """The pairs a method computes: ours its tiles, Flex its non-empty blocks, SDPA every pair."""
    dense = rec["B"] * rec["L"] ** 2
    if label.startswith("ours"):
        return rec["computed"]
    m = rec["methods"][label]
    return dense * m["blocks"] if m.get("blocks") is not None else dense


def report(rec):
    """The table of a layout: each method's kernel and setup times, its charge a layer, TFLOP/s on
    the visible pairs, ours' speed-up against it beside the work ratio, and the kernels it ran."""
    H, D, n = rec["H"], rec["D"], rec["layers"]
    fwd_flops = 4 * H * D * rec["visible"]
    ours = rec["methods"].get("ours")
    print(
        f"  a layer is charged its call + 1/{n} of the step's setup and reduce; FLOPs on visible pairs: forward "
        f"{fwd_flops:.3g}, forward+backward 3.5x"
    )
    print(
        "  | method | fwd ms | fwd+bwd ms | setup ms | reduce ms | layer fwd+bwd ms | fwd+bwd TFLOP/s (visible) "
        "| ours' speed / this one's (layer fwd+bwd) | work ratio | attention ran | kernels |"
    )
    print("  | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, m in rec["methods"].items():
        m["fwd_tflops"] = fwd_flops / m["fwd_ms"] * 1e-9
        m["fwdbwd_tflops"] = 3.5 * fwd_flops / m["fwdbwd_ms"] * 1e-9
        up = f"{m['layer_fwdbwd_ms'] / ours['layer_fwdbwd_ms']:.2f}x" if ours else "-"
        print(
            f"  | {label}{'' if m['bias_grad'] else ' (no bias gradient)'} | {m['fwd_ms']:.3f} | "
            f"{m['fwdbwd_ms']:.3f} | {m['setup_ms']:.3f} | {m['reduce_ms']:.3f} | {m['layer_fwdbwd_ms']:.3f} | "
            f"{m['fwdbwd_tflops']:.1f} | {up} | {work(rec, label) / rec['computed']:.2f} | "
            f"{attention_backend(label, m['kernels'])} | {', '.join(n[:60] for n in m['kernels'])} |",
            flush=True,
        )
    plain = rec["methods"].get("sdpa-nomask")
    if ours and plain:
        rec["density_bound"] = work(rec, "sdpa-nomask") / rec["computed"]
        rec["over_dense_fwd"] = plain["fwd_ms"] / ours["fwd_ms"]
        if rec["over_dense_fwd"] > rec["density_bound"]:
            print(
                f"  ours' forward is {rec['over_dense_fwd']:.2f}x sdpa-nomask's, above the "
                f"{rec['density_bound']:.2f}x its tiles' share of the pairs allows: a measurement to doubt",
                flush=True,
            )
        for key, flops in (("fwd", fwd_flops), ("bwd", 2.5 * fwd_flops)):
            ms = (lambda m: m["fwd_ms"]) if key == "fwd" else (lambda m: m["fwdbwd_ms"] - m["fwd_ms"])
            tiles_tf = flops * rec["computed"] / rec["visible"] / ms(ours) * 1e-9
            dense_tf = flops * work(rec, "sdpa-nomask") / rec["visible"] / ms(plain) * 1e-9
            rec[f"{key}_tiles_over_dense"] = tiles_tf / dense_tf
        print(
            f"  TFLOP/s on computed tiles against sdpa-nomask's on every pair: forward "
            f"{rec['fwd_tiles_over_dense']:.2f}x, backward {rec['bwd_tiles_over_dense']:.2f}x",
            flush=True,
        )
    if rec.get("flex_causal_vs_sdpa"):
        f = rec["flex_causal_vs_sdpa"]
        print(
            f"  flex sanity, causal at this shape: flex {f['flex_ms']:.3f} ms, SDPA {f['sdpa_ms']:.3f} ms "
            f"({f['sdpa_ms'] / f['flex_ms']:.2f}x SDPA's speed)",
            flush=True,
        )


# -----------------------------------------------------------------------------
# the targets of the attention issue


def targets(records):
    rows = []

    def ratio(rec, other):
        m = rec["methods"]
        return m[other]["layer_fwdbwd_ms"] / m["ours"]["layer_fwdbwd_ms"] if "ours" in m and other in m else None

    for rec in records:
        tag = f"{rec['layout']} D{rec['D']}"
        rows.append((f"{tag}: a layer's fwd+bwd, setup once a step, vs SDPA-mask", ratio(rec, "sdpa-mask"), 1.5))
        fused = rec["methods"].get("flex", {}).get("fused")
        rows.append(
            (
                f"{tag}: a layer's fwd+bwd, setup once a step, vs Flex shown fused",
                ratio(rec, "flex") if fused else None,
                1.0,
            )
        )
        for key in ("fwd", "bwd"):
            rows.append(
                (
                    f"{tag}: {key} TFLOP/s on computed tiles / SDPA without a mask's",
                    rec.get(f"{key}_tiles_over_dense"),
                    0.65,
                )
            )
    print("\n## targets")
    print("| target | measured | wanted | met |")
    print("| --- | --- | --- | --- |")
    out = []
    for what, got, want in rows:
        met = "not measured" if got is None else "yes" if got >= want else "no"
        print(f"| {what} | {'-' if got is None else f'{got:.2f}'} | >= {want:g} | {met} |")
        out.append(dict(target=what, measured=got, wanted=want, met=met))
    return out


def check(meta, table, q, k, v, label="", fatal=True, tuning=None):
    """bf16 forward and backward of ours (launched as `tuning` says; None: the default) against the
    reference on two rows; exits on a mismatch (fatal), else prints it and returns False."""
    from kernels import pseudo_attention as pa
    from kernels import MaskMeta, reference, rel_pos_bias

    kind, step, pos, valid = meta
    sl = slice(0, 2)
    dout = torch.randn_like(q[sl])
    results = []
    ours = lambda *a, **kw: pa.pseudo_attention(*a, **kw, tuning=tuning or pa.TUNING)  # noqa: E731
    for fn in (ours, reference.attention):
        leaves = [x[sl].detach().requires_grad_() for x in (q, k, v)] + [table.detach().requires_grad_()]
        out = fn(
            *leaves[:3],
            MaskMeta(kind[sl], step[sl], kind[sl], step[sl], valid[sl]),
            bias=rel_pos_bias(leaves[3], pos[sl], pos[sl], MAX_DIST),
        )
        results.append([out] + list(torch.autograd.grad(out, leaves, dout)))
    worst = []
    for name, got, want in zip(("out", "dq", "dk", "dv", "dtable"), *results):
        err = ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-12)).item()
        worst.append(f"{name} {err:.2e}")
        if not err < 2e-2:
            why = f"check vs reference{label} failed: ||ours - ref|| / ||ref|| of {name} = {err:.3g}; " + ", ".join(
                worst
            )
            if fatal:
                sys.exit(why)
            print(f"  {why}: its row is not timed", flush=True)
            return False
    print(f"  check vs reference{label} (bf16, 2 rows, ||ours - ref|| / ||ref||): " + ", ".join(worst), flush=True)
    return True


def main(argv=None):
    args = get_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        dev, dtype = "cpu", torch.float32
    else:
        if not torch.cuda.is_available():
            sys.exit(
                "bench_attention.py needs a CUDA GPU (none found); --smoke runs its plumbing on the CPU, and "
                "the kernel tests run there: python -m pytest -q tests/test_attention_layouts.py "
                "tests/test_attention_launch.py"
            )
        dev, dtype = "cuda", torch.bfloat16
    import triton

    time_fn = timer(args.smoke)
    from kernels.attention_plan import TUNING

    tuning, swept = TUNING, set()
    if args.configs:
        tuning = read_configs(args.configs)
        with open(args.configs) as f:  # a head dim the file holds is not swept again
            swept = {int(k) for k in json.load(f) if k != "fused_dq"}
        print(f"configurations from {args.configs}: {tuning}")
    device = torch.cuda.get_device_name() if dev == "cuda" else "cpu (smoke)"
    print(f"# {device}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    records = []
    t0 = time.time()
    for name in args.layouts.split(","):
        for D in LAYOUTS[name][2]:
            if D not in args.dims:
                continue
            left = None if args.deadline is None else args.deadline - (time.time() - t0)
            if left is not None and left <= 0:
                print(f"\n## {name}, D {D}: skipped, the deadline has passed", flush=True)
                continue
            args.skip_flex = left is not None and left < 60
            args.until = None if args.deadline is None else t0 + args.deadline
            rec, tuning = bench(name, D, args, dev, dtype, time_fn, tuning, swept)
            records.append(rec)
            write_result(args.json, device, triton.__version__, records, complete=False)
    if args.save_configs:
        save_configs(args.save_configs, tuning, sorted(swept))
    write_result(args.json, device, triton.__version__, records, complete=True)
    if args.json:
        print(f"figures: {args.json}")
    return 0


def write_result(path, device, triton_version, records, complete):
    """Every figure so far to `path` (nothing without --json), after each layout and at the end:
    a run cut short by its lease keeps the layouts it finished (`complete` false)."""
    if not path:
        return
    write_json(
        path,
        dict(
            device=device,
            torch=torch.__version__,
            triton=triton_version,
            date=time.strftime("%Y-%m-%d"),
            records=records,
            targets=targets(records),
            complete=complete,
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
