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
Rows are padded to a multiple of 128 with invalid keys (FlexAttention's block), the same for all.

Methods, forward and forward+backward, every one on the same q, k, v:
  ours            kernels/pseudo_attention.py end to end: codes and tile map built in the call;
  ours kernel     with the codes and map prebuilt (as the model runs: once per step), timed by CUDA
                  graph replay where the call can be captured; "bias table frozen": the same
                  with a table that requires no gradient (the kernel then skips it: the work the
                  baselines do); "dQ fused": the backward as one kernel, dQ added by atomics
                  from the dK/dV kernel (kernels/attention_plan.FUSED_DQ); "16-bit bias table":
                  the relative bias table in q's dtype (kernels/attention_plan.TABLE_16BIT);
  sdpa-mask       F.scaled_dot_product_attention with the dense (B, H, L, L) bias + -inf mask built
                  from the metadata in the call; "kernel": prebuilt;
  flex            FlexAttention, torch.compile'd, with a mask_mod and a score_mod reading the
                  metadata; create_block_mask in the call; "kernel": the block mask prebuilt;
  sdpa-nomask     SDPA with no mask at all: what a plain kernel costs over every pair (upper bound).
Two diagnostic rows, other work than the above and in no target (printed after the table, in --json
under "diagnostics"): ours kernel-only with the same mask and no bias (what the bias costs), and
with every pair visible and no bias (every tile FULL: the work of sdpa-nomask, so the two set the
cost of the tile lists and loops against a plain kernel's).
The baselines get no gradient for the bias (a constant to them): less work than ours, which also
returns the bias table's gradient. Flex is checked against its usual speed first: causal at the
same shape against SDPA's causal kernel (a Flex far off that is misconfigured, not slow).

The codes + map + table build (once per step for every layer) is timed eager, the host's launches
a host-bound step pays, and replayed as a CUDA graph, the GPU's time, which the map target uses.
FLOPs are counted on the visible pairs, the same count for every method: forward 4 H D visible,
forward+backward 3.5 times that (five matmuls to two); "tiles" TFLOP/s counts ours on the tiles it
computes. Before anything is timed, ours is checked against kernels/reference.py in bf16 on two rows
(output and the gradients of q, k, v and the bias table); the run stops on a mismatch.
Targets of the attention issue are printed last, met or not, and --json writes every figure.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from bench.attention_cases import (ALT_BACKWARD, BUCKETS, LAYOUTS, MAX_DIST, backward_name, fused_dq,  # noqa: E402
                                    layout, make_flex, make_ours, make_sdpa_mask, flex_sanity, table_16bit)

# the row that times the bias table's other dtype (attention_plan.TABLE_16BIT -> its label)
ALT_TABLE = {False: "ours kernel, 16-bit bias table", True: "ours kernel, float32 bias table"}

H = 12


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma-separated, of {', '.join(LAYOUTS)}")
    p.add_argument("--dims", default="64,128", help="head dims to run (a layout runs those it lists)")
    p.add_argument("--sweep", action="store_true", help="time the candidate block configurations on the first layout "
                                                        "of each head dim and run every comparison with the fastest "
                                                        "(forward+backward)")
    p.add_argument("--no-flex", action="store_true", help="leave FlexAttention out (its compile takes minutes)")
    p.add_argument("--deadline", type=float, default=None,
                   help="seconds: layouts not started by then are skipped, and Flex is left out of a layout that "
                        "starts within 60 s of it (a lease's budget)")
    p.add_argument("--json", default=None, help="write every figure to this file")
    p.add_argument("--save-configs", default=None, help="--sweep: write the fastest configuration per head dim here")
    p.add_argument("--configs", default=None, help="run with the configurations a --save-configs file holds")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under TRITON_INTERPRET=1: checks "
                                                        "the script, measures nothing")
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
    if a.deadline is not None and not a.deadline > 0:
        p.error(f"--deadline {a.deadline:g}: seconds, above 0 (without it, no deadline)")
    from bench.common import check_flags
    check_flags(p, a, outputs=("json", "save_configs"), inputs=("configs",))
    return a


# -----------------------------------------------------------------------------
# timing

def timer(smoke):
    """(time(fn) -> ms, how): triton's do_bench (CUDA events, median) on a GPU; one wall-clock run on the CPU."""
    if smoke:
        def once(fn, grad_to_none=None):
            fn()
            t0 = time.perf_counter()
            fn()
            return 1e3 * (time.perf_counter() - t0)
        return once, once
    from triton.testing import do_bench, do_bench_cudagraph

    def events(fn, grad_to_none=None):
        return do_bench(fn, grad_to_none=grad_to_none, return_mode="median")

    def graphed(fn, grad_to_none=None):
        try:
            return do_bench_cudagraph(fn, return_mode="median")
        except Exception as e:  # noqa: BLE001  (a call that cannot be captured is timed with events instead)
            print(f"  (CUDA graph capture failed: {type(e).__name__}; timed with events)")
            torch.cuda.synchronize()
            return events(fn, grad_to_none)
    return events, graphed


# -----------------------------------------------------------------------------
# one layout

def check(meta, table, q, k, v, label="", fatal=True):
    """bf16 forward and backward of ours against the reference on two rows; exits on a mismatch
    (fatal), else prints it and returns False."""
    from kernels import pseudo_attention as pa
    from kernels import reference, rel_pos_bias
    kind, step, pos, valid = meta
    sl = slice(0, 2)
    dout = torch.randn_like(q[sl])
    results = []
    for fn in (pa.pseudo_attention, reference.attention):
        leaves = [x[sl].detach().requires_grad_() for x in (q, k, v)] + [table.detach().requires_grad_()]
        out = fn(*leaves[:3], kind[sl], step[sl], kind[sl], step[sl], valid[sl],
                 bias=rel_pos_bias(leaves[3], pos[sl], pos[sl], MAX_DIST))
        results.append([out] + list(torch.autograd.grad(out, leaves, dout)))
    worst = []
    for name, got, want in zip(("out", "dq", "dk", "dv", "dtable"), *results):
        err = ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-12)).item()
        worst.append(f"{name} {err:.2e}")
        if not err < 2e-2:
            why = (f"check vs reference{label} failed: ||ours - ref|| / ||ref|| of {name} = {err:.3g}; "
                   + ", ".join(worst))
            if fatal:
                sys.exit(why)
            print(f"  {why}: its row is not timed", flush=True)
            return False
    print(f"  check vs reference{label} (bf16, 2 rows, ||ours - ref|| / ||ref||): " + ", ".join(worst), flush=True)
    return True


def candidates(D):
    from kernels.attention_plan import CUDA_CONFIGS, Config
    base = CUDA_CONFIGS[D]
    if D == 64:
        more = [Config(64, 64, 4, 4, 64, 64, 8, 3, 4, 3), Config(128, 128, 8, 3, 64, 64, 8, 3, 8, 3)]
    else:
        more = [Config(64, 64, 4, 3, 32, 64, 8, 2, 4, 3)]  # the forward with K and V two tiles ahead (147 KB)
    return [base] + [c for c in more if c != base]


def bench(name, D, args, dev, dtype, time_fn, graph_fn):
    from kernels import attention_plan, reference, rel_pos_bias
    global H
    H = 2 if args.smoke else 12
    meta = layout(name, dev, args.smoke)
    kind, step, pos, valid = meta
    B, L = kind.shape
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, L, D, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
    table = torch.randn(H, BUCKETS, device=dev, requires_grad=True)
    print(f"\n## {name}, D {D}: B={B} H={H} L={L} (mean {valid.sum().item() / B:.0f} real tokens a row)", flush=True)
    check(meta, table, q, k, v)
    if D <= 64:  # the other backward (at D 128 there is one)
        alt_label = ", " + backward_name(ALT_BACKWARD[attention_plan.FUSED_DQ])
        with fused_dq(not attention_plan.FUSED_DQ):
            check(meta, table, q, k, v, alt_label)
    alt_label = ", " + backward_name(ALT_TABLE[attention_plan.TABLE_16BIT])
    with table_16bit(not attention_plan.TABLE_16BIT):  # the other bias table: a mismatch skips its row
        alt_table_ok = check(meta, table, q, k, v, alt_label, fatal=False)
    rec = dict(layout=name, D=D, B=B, H=H, L=L, methods={}, alt_backward=ALT_BACKWARD[attention_plan.FUSED_DQ])
    dout = torch.randn_like(q)

    def timed(fn, graph=False):
        t = graph_fn if graph else time_fn
        f = t(lambda: fn(q, k, v))

        def both():
            fn(q, k, v).backward(dout)
        return f, t(both, grad_to_none=[q, k, v, table])

    if args.sweep and D not in attention_plan.OVERRIDE:  # once per head dim: the first layout that has it
        rows = []
        for cfg in candidates(D):
            attention_plan.OVERRIDE[D] = cfg
            try:
                f, b = timed(make_ours(meta, table, True), graph=True)
            except Exception as e:  # noqa: BLE001  (a configuration that does not launch is reported)
                print(f"  {tuple(cfg)}: failed ({type(e).__name__}: {str(e)[:100]})")
                continue
            rows.append((b, f, cfg))
            print(f"  sweep {tuple(cfg)}: fwd {f:.3f} ms, fwd+bwd {b:.3f} ms", flush=True)
        best = min(rows, key=lambda r: r[0])[2]
        attention_plan.OVERRIDE[D] = best
        rec["sweep"] = [dict(config=list(c), fwd_ms=f, fwdbwd_ms=b) for b, f, c in rows]
        rec["config"] = list(best)
        print(f"  fastest: {tuple(best)}", flush=True)
    cfg = attention_plan.config(torch.device(dev), D)
    rec.setdefault("config", list(cfg))

    # what ours computes, and the cost of building its codes and map
    pm, _, _ = attention_plan.prepare(q, k, v, kind, step, kind, step, valid,
                                      bias=rel_pos_bias(table, pos, pos, MAX_DIST))
    counts = pm["tiles"].q_count.sum((0, 1)).tolist()  # PARTIAL, FULL, FAR, GATHER
    computed = sum(counts) * cfg.BM * cfg.BN
    visible = reference.visible(kind, step, kind, step, valid).sum().item()
    def build():
        return attention_plan.prepare(q, k, v, kind, step, kind, step, valid,
                                      bias=rel_pos_bias(table, pos, pos, MAX_DIST))
    # eager: the host's launches, which a host-bound step pays; replayed as a graph: the GPU's time,
    # which a step pays when its GPU is the bottleneck (the launches then overlap earlier work)
    map_ms, map_graph_ms = time_fn(build), graph_fn(build)
    rec.update(visible=visible, computed=computed, tiles=dict(zip(("partial", "full", "far", "gather"), counts)),
               map_ms=map_ms, map_graph_ms=map_graph_ms)
    print(f"  visible pairs {100 * visible / (B * L * L):.1f}% of L*L; computed tiles "
          f"{100 * computed / (B * L * L):.1f}% "
          f"({cfg.BM}x{cfg.BN}: PARTIAL {counts[0]}, FULL {counts[1]}, FAR {counts[2]}, GATHER {counts[3]})",
          flush=True)

    methods = [("ours", lambda: make_ours(meta, table, False), False),
               ("ours kernel", lambda: make_ours(meta, table, True), True),
               ("ours kernel, bias table frozen", lambda: make_ours(meta, table.detach(), True), True),
               (ALT_BACKWARD[attention_plan.FUSED_DQ], lambda: make_ours(meta, table, True), True),
               (ALT_TABLE[attention_plan.TABLE_16BIT], lambda: make_ours(meta, table, True), True),
               ("sdpa-mask", lambda: make_sdpa_mask(meta, table, False, dtype), False),
               ("sdpa-mask kernel", lambda: make_sdpa_mask(meta, table, True, dtype), False),
               ("sdpa-nomask", lambda: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), False)]
    for label, make, graph in methods:
        if label == "ours kernel, dQ fused" and D > 64:
            continue  # the plan keeps two backward kernels at D 128 (kernels/attention_plan.FUSED_DQ)
        if label == ALT_TABLE[attention_plan.TABLE_16BIT] and not alt_table_ok:
            continue
        try:
            with fused_dq(not attention_plan.FUSED_DQ if label == ALT_BACKWARD[attention_plan.FUSED_DQ] else None), \
                    table_16bit(not attention_plan.TABLE_16BIT if label == ALT_TABLE[attention_plan.TABLE_16BIT]
                                else None):
                f, b = timed(make(), graph)
            rec["methods"][label] = dict(fwd_ms=f, fwdbwd_ms=b)
        except Exception as e:  # noqa: BLE001  (a baseline that cannot run is reported, not fatal)
            print(f"  {label}: failed ({type(e).__name__}: {str(e)[:160]})", flush=True)
    rec["diagnostics"] = diagnostics(meta, timed)
    if not args.smoke and not args.no_flex and not getattr(args, "skip_flex", False):
        try:
            with_build, kernel_only, build = make_flex(meta, table)
            for label, fn in (("flex", with_build), ("flex kernel", kernel_only)):
                f, b = timed(fn)
                rec["methods"][label] = dict(fwd_ms=f, fwdbwd_ms=b)
            rec["flex_block_mask_ms"] = time_fn(build)
            fc, sc = flex_sanity(q.detach(), k.detach(), v.detach(), time_fn)
            rec["flex_causal_vs_sdpa"] = dict(flex_ms=fc, sdpa_ms=sc)
            print(f"  flex sanity, causal at this shape: flex {fc:.3f} ms, SDPA {sc:.3f} ms ({sc / fc:.2f}x SDPA's "
                  "speed)")
        except Exception as e:  # noqa: BLE001
            print(f"  flex: failed ({type(e).__name__}: {str(e)[:160]})", flush=True)

    fwd_flops = 4 * H * D * visible
    print(f"  codes + tile map: {map_ms:.3f} ms eager, {map_graph_ms:.3f} ms replayed as a graph; FLOPs on visible "
          f"pairs: forward {fwd_flops:.3g}, forward+backward 3.5x")
    print("  | method | fwd ms | fwd+bwd ms | fwd TFLOP/s (visible) | fwd+bwd TFLOP/s | ours fwd speed-up | ours "
          "fwd+bwd speed-up |")
    print("  | --- | --- | --- | --- | --- | --- | --- |")
    for label, m in rec["methods"].items():
        mine = rec["methods"].get("ours kernel" if "kernel" in label else "ours")
        m["fwd_tflops"] = fwd_flops / m["fwd_ms"] * 1e-9
        m["fwdbwd_tflops"] = 3.5 * fwd_flops / m["fwdbwd_ms"] * 1e-9
        up = (f"{m['fwd_ms'] / mine['fwd_ms']:.2f}x | {m['fwdbwd_ms'] / mine['fwdbwd_ms']:.2f}x" if mine else "- | -")
        print(f"  | {label} | {m['fwd_ms']:.3f} | {m['fwdbwd_ms']:.3f} | {m['fwd_tflops']:.1f} | "
              f"{m['fwdbwd_tflops']:.1f} | "
              f"{up} |")
    ok = rec["methods"].get("ours kernel")
    diag, plain = rec["diagnostics"], rec["methods"].get("sdpa-nomask")
    if ok and diag:
        nb, ev = diag["ours kernel, no bias"], diag["ours kernel, every pair visible, no bias"]
        all_flops = 4 * H * D * B * L * L
        print(f"  diagnostics (other work than the rows above): without the bias ours kernel's forward takes "
              f"{nb['fwd_ms']:.3f} ms, {nb['fwd_ms'] / ok['fwd_ms']:.2f}x its time with it; every pair visible, no "
              "bias "
              f"(every tile FULL): {ev['fwd_ms']:.3f} ms, {all_flops / ev['fwd_ms'] * 1e-9:.1f} TFLOP/s over all pairs"
              + (f", sdpa-nomask {all_flops / plain['fwd_ms'] * 1e-9:.1f}" if plain else ""), flush=True)
    if ok:
        ok["fwd_tflops_tiles"] = 4 * H * D * computed / ok["fwd_ms"] * 1e-9
        bwd = ok["fwdbwd_ms"] - ok["fwd_ms"]
        rec["bwd_over_fwd"] = bwd / ok["fwd_ms"]
        alt = rec["methods"].get(ALT_BACKWARD[attention_plan.FUSED_DQ])
        if alt:
            rec["bwd_over_fwd_alt"] = (alt["fwdbwd_ms"] - alt["fwd_ms"]) / ok["fwd_ms"]
        print(f"  ours kernel: forward {ok['fwd_tflops_tiles']:.1f} TFLOP/s on computed tiles; backward / forward "
              f"{rec['bwd_over_fwd']:.2f}"
              + (f" ({backward_name(ALT_BACKWARD[attention_plan.FUSED_DQ])}: {rec['bwd_over_fwd_alt']:.2f})" if alt
                 else "")
              + f"; map (graph) / forward {map_graph_ms / ok['fwd_ms']:.1%}", flush=True)
    return rec


def diagnostics(meta, timed):
    """Where ours spends its time, kernel-only, on the layout's q, k, v (not baselines: other work
    than the rows of the table): the same mask without the relative bias (what the bias costs), and
    every pair visible without a bias (every tile FULL: ours as a plain FlashAttention over all pairs,
    beside sdpa-nomask, which does the same work: what the tile lists and the loops cost)."""
    from kernels import CONTEXT
    from kernels.pseudo_attention import pseudo_attention
    kind, step, _, valid = meta
    every = torch.full_like(kind, CONTEXT)
    out = {}
    for label, (kk, ss, vv) in (("ours kernel, no bias", (kind, step, valid)),
                                ("ours kernel, every pair visible, no bias", (every, torch.zeros_like(step),
                                                                             torch.ones_like(valid)))):
        cache = {}
        try:
            f, b = timed(lambda q, k, v, kk=kk, ss=ss, vv=vv, cache=cache:
                         pseudo_attention(q, k, v, kk, ss, kk, ss, vv, cache=cache), graph=True)
        except Exception as e:  # noqa: BLE001  (a diagnostic that cannot run is reported, not fatal)
            print(f"  {label}: failed ({type(e).__name__}: {str(e)[:160]})", flush=True)
            return {}
        out[label] = dict(fwd_ms=f, fwdbwd_ms=b)
    return out


# -----------------------------------------------------------------------------
# the targets of the attention issue

def targets(records):
    rows = []

    def ratio(rec, a, b, key):
        m = rec["methods"]
        return m[a][key] / m[b][key] if a in m and b in m else None

    for rec in records:
        tag = f"{rec['layout']} D{rec['D']}"
        rows.append((f"{tag}: forward kernel-only vs SDPA-mask kernel",
                     ratio(rec, "sdpa-mask kernel", "ours kernel", "fwd_ms"), 2.0))
        rows.append((f"{tag}: fwd+bwd end to end vs SDPA-mask", ratio(rec, "sdpa-mask", "ours", "fwdbwd_ms"), 2.0))
        rows.append((f"{tag}: fwd+bwd end to end vs Flex", ratio(rec, "flex", "ours", "fwdbwd_ms"), 1.0))
        ok = rec["methods"].get("ours kernel")
        if ok:
            rows.append((f"{tag}: map / forward kernel (at most)",
                         rec.get("map_graph_ms", rec["map_ms"]) / ok["fwd_ms"], -0.05))
            rows.append((f"{tag}: backward / forward (at most)", rec.get("bwd_over_fwd"), -2.5))
            if "bwd_over_fwd_alt" in rec:
                rows.append((f"{tag}: backward / forward, {backward_name(rec['alt_backward'])} (at most)",
                             rec["bwd_over_fwd_alt"], -2.5))
            if rec["D"] == 128 and rec["layout"] == "s2s-2k":
                rows.append((f"{tag}: forward TFLOP/s on computed tiles", ok.get("fwd_tflops_tiles"), 200.0))
    print("\n## targets")
    print("| target | measured | wanted | met |")
    print("| --- | --- | --- | --- |")
    out = []
    for what, got, want in rows:
        if got is None:
            met = "not measured"
        else:
            met = "yes" if (got >= want if want > 0 else got <= -want) else "no"
        shown = "-" if got is None else (f"{got:.1%}" if "map" in what else f"{got:.2f}")
        print(f"| {what} | {shown} | {'>=' if want > 0 else '<='} {abs(want):g} | {met} |")
        out.append(dict(target=what, measured=got, wanted=want, met=met))
    return out


def main(argv=None):
    args = get_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        dev, dtype = "cpu", torch.float32
    else:
        if not torch.cuda.is_available():
            sys.exit("bench_attention.py needs a CUDA GPU (none found); --smoke runs its plumbing on the CPU, and "
                     "the kernel tests run there: python -m pytest -q tests/test_pseudo_attention.py")
        dev, dtype = "cuda", torch.bfloat16
    import triton
    time_fn, graph_fn = timer(args.smoke)
    if args.configs:
        from kernels import attention_plan
        with open(args.configs) as f:
            for D, cfg in json.load(f).items():
                attention_plan.OVERRIDE[int(D)] = attention_plan.Config(*cfg)
        print(f"configurations from {args.configs}: {attention_plan.OVERRIDE}")
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
            records.append(bench(name, D, args, dev, dtype, time_fn, graph_fn))
    result = dict(device=device, torch=torch.__version__, triton=triton.__version__, date=time.strftime("%Y-%m-%d"),
                  records=records, targets=targets(records))
    if args.save_configs:
        from kernels import attention_plan
        os.makedirs(os.path.dirname(os.path.abspath(args.save_configs)), exist_ok=True)
        with open(args.save_configs, "w") as f:
            json.dump({str(D): list(c) for D, c in attention_plan.OVERRIDE.items()}, f)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
