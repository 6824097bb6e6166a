"""The pseudo-mask attention kernel against the obvious alternatives, on one GPU, in one run.

    python bench/bench_attention.py                       # every layout, D 64 and 128 (a few minutes)
    python bench/bench_attention.py --sweep --json out.json
    python bench/bench_attention.py --smoke               # tiny shapes on the CPU (interpreter): the plumbing only

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
                  from the dK/dV kernel (kernels/attention_plan.FUSED_DQ);
  sdpa-mask       F.scaled_dot_product_attention with the dense (B, H, L, L) bias + -inf mask built
                  from the metadata in the call; "kernel": prebuilt;
  flex            FlexAttention, torch.compile'd, with a mask_mod and a score_mod reading the
                  metadata; create_block_mask in the call; "kernel": the block mask prebuilt;
  sdpa-nomask     SDPA with no mask at all: what a plain kernel costs over every pair (upper bound).
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
import contextlib
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

H, BUCKETS, MAX_DIST = 12, 32, 128
LAYOUTS = {"pmlm": (32, 512, (64,)), "s2s-1k": (16, 1024, (64, 128)), "s2s-2k": (8, 2048, (64, 128))}


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
    return a


# -----------------------------------------------------------------------------
# layouts: (kind, step, pos, valid), each (B, L), L a multiple of 128

def pad_rows(rows, dev):
    L = -(-max(len(r[0]) for r in rows) // 128) * 128
    out = []
    for j in range(4):
        fill = False if j == 3 else 0
        out.append(torch.tensor(np.stack([np.pad(r[j], (0, L - len(r[j])), constant_values=fill) for r in rows])))
    return [t.to(dev) for t in out]


def pmlm_layout(B, n, dev, seed=0):
    from core.masking import blockwise_mask
    from kernels import CONTEXT, ORIGINAL, PSEUDO
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(B):
        maskable = np.ones(n, dtype=bool)
        maskable[[0, n // 2, n - 1]] = False  # [SOS], [EOS], [EOS]
        steps = blockwise_mask(maskable, rng)
        kind, step, pos = [CONTEXT] * n, [0] * n, list(range(n))
        for s, block in enumerate(steps, start=1):
            kind += [ORIGINAL] * len(block) + [PSEUDO] * len(block)
            step += [s] * (2 * len(block))
            pos += list(block) * 2
        rows.append((np.array(kind), np.array(step), np.array(pos), np.ones(len(kind), dtype=bool)))
    return pad_rows(rows, dev)


def seq2seq_layout(B, total, dev):
    from kernels import CONTEXT, ORIGINAL, PSEUDO
    n_tgt = total // 8
    n_src = total - 2 * n_tgt
    kind = np.array([CONTEXT] * n_src + [ORIGINAL] * n_tgt + [PSEUDO] * n_tgt)
    step = np.array([0] * n_src + list(range(n_tgt)) * 2)
    pos = np.concatenate([np.arange(n_src + n_tgt), np.arange(n_src, n_src + n_tgt)])
    return pad_rows([(kind, step, pos, np.ones(total, dtype=bool))] * B, dev)


def layout(name, dev, smoke):
    B, n, _ = LAYOUTS[name]
    if smoke:
        B, n = 2, 96 if name == "pmlm" else 128
    return pmlm_layout(B, n, dev) if name == "pmlm" else seq2seq_layout(B, n, dev)


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
# the methods: each returns fn(q, k, v) -> out

# the row that times the backward this kernel does not use by default (attention_plan.FUSED_DQ -> its label)
ALT_BACKWARD = {False: "ours kernel, dQ fused", True: "ours kernel, dQ kernel apart"}


def backward_name(label):
    """"dQ fused" of "ours kernel, dQ fused": the backward a row names."""
    return label.split(", ", 1)[1]


@contextlib.contextmanager
def fused_dq(on):
    """kernels.pseudo_attention's backward with dQ fused into the dK/dV kernel (True), as a kernel
    apart (False), or as it is set (None)."""
    from kernels import attention_plan
    before = attention_plan.FUSED_DQ
    attention_plan.FUSED_DQ = before if on is None else on
    try:
        yield
    finally:
        attention_plan.FUSED_DQ = before


def make_ours(meta, table, prebuilt):
    from kernels import pseudo_attention as pa
    from kernels import rel_pos_bias
    kind, step, pos, valid = meta
    cache = {} if prebuilt else None

    def fn(q, k, v):
        return pa.pseudo_attention(q, k, v, kind, step, kind, step, valid, bias=rel_pos_bias(table, pos, pos, MAX_DIST),
                                   cache=cache)
    return fn


def dense_mask(meta, table, dtype):
    from kernels import reference, rel_pos_bias
    kind, step, pos, valid = meta
    see = reference.visible(kind, step, kind, step, valid)[:, None]  # (B, 1, L, L)
    bias = reference.dense_bias(rel_pos_bias(table.detach(), pos, pos, MAX_DIST))
    return bias.masked_fill(~see, float("-inf")).to(dtype)  # (B, H, L, L)


def make_sdpa_mask(meta, table, prebuilt, dtype):
    fixed = dense_mask(meta, table, dtype) if prebuilt else None
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=fixed if prebuilt else
                                                          dense_mask(meta, table, dtype))


def make_flex(meta, table):
    """(end to end, kernel only, block-mask build): compiled flex_attention whose score_mod adds the
    bias from a detached (H, 2M+1) table, so that nothing keeps it off its fused kernel."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from kernels import CONTEXT, ORIGINAL, PSEUDO, rel_pos_bias
    kind, step, pos, valid = meta
    flex = torch.compile(flex_attention, dynamic=False)
    by_distance = rel_pos_bias(table, pos, pos, MAX_DIST).by_distance.detach().contiguous()  # (H, 2M+1)

    def mask_mod(b, h, qi, ki):
        qk, qs, kk, ks = kind[b, qi], step[b, qi], kind[b, ki], step[b, ki]
        see = (kk == CONTEXT) | ((qk == ORIGINAL) & (kk == ORIGINAL) & (ks <= qs))
        see = see | ((qk == PSEUDO) & (((kk == ORIGINAL) & (ks < qs)) | ((kk == PSEUDO) & (ks == qs))))
        return see & valid[b, ki]

    def score_mod(score, b, h, qi, ki):
        d = (pos[b, ki] - pos[b, qi]).clamp(-MAX_DIST, MAX_DIST) + MAX_DIST
        return score + by_distance[h, d]

    B, L = kind.shape

    def build():
        return create_block_mask(mask_mod, B, None, L, L, device=kind.device, _compile=True)
    block_mask = build()
    return (lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=build()),
            lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=block_mask), build)


def flex_sanity(q, k, v, time_fn):
    """Flex on a causal mask against SDPA's causal kernel at the same shape: its usual share, or a
    sign that it is not running fused."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, _, L, _ = q.shape
    flex = torch.compile(flex_attention, dynamic=False)
    bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, L, L, device=q.device)
    f = time_fn(lambda: flex(q, k, v, block_mask=bm))
    s = time_fn(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    return f, s


# -----------------------------------------------------------------------------
# one layout

def check(meta, table, q, k, v, label=""):
    """bf16 forward and backward of ours against the reference on two rows; exits on a mismatch."""
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
            sys.exit(f"check vs reference failed: ||ours - ref|| / ||ref|| of {name} = {err:.3g}; " + ", ".join(worst))
    print(f"  check vs reference{label} (bf16, 2 rows, ||ours - ref|| / ||ref||): " + ", ".join(worst), flush=True)


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
    pm, _, _ = attention_plan.prepare(q, k, v, kind, step, kind, step, valid, bias=rel_pos_bias(table, pos, pos, MAX_DIST))
    counts = pm["tiles"].q_count.sum((0, 1)).tolist()  # PARTIAL, FULL, FAR, GATHER
    computed = sum(counts) * cfg.BM * cfg.BN
    visible = reference.visible(kind, step, kind, step, valid).sum().item()
    def build():
        return attention_plan.prepare(q, k, v, kind, step, kind, step, valid, bias=rel_pos_bias(table, pos, pos, MAX_DIST))
    # eager: the host's launches, which a host-bound step pays; replayed as a graph: the GPU's time,
    # which a step pays when its GPU is the bottleneck (the launches then overlap earlier work)
    map_ms, map_graph_ms = time_fn(build), graph_fn(build)
    rec.update(visible=visible, computed=computed, tiles=dict(zip(("partial", "full", "far", "gather"), counts)),
               map_ms=map_ms, map_graph_ms=map_graph_ms)
    print(f"  visible pairs {100 * visible / (B * L * L):.1f}% of L*L; computed tiles {100 * computed / (B * L * L):.1f}% "
          f"({cfg.BM}x{cfg.BN}: PARTIAL {counts[0]}, FULL {counts[1]}, FAR {counts[2]}, GATHER {counts[3]})", flush=True)

    methods = [("ours", lambda: make_ours(meta, table, False), False),
               ("ours kernel", lambda: make_ours(meta, table, True), True),
               ("ours kernel, bias table frozen", lambda: make_ours(meta, table.detach(), True), True),
               (ALT_BACKWARD[attention_plan.FUSED_DQ], lambda: make_ours(meta, table, True), True),
               ("sdpa-mask", lambda: make_sdpa_mask(meta, table, False, dtype), False),
               ("sdpa-mask kernel", lambda: make_sdpa_mask(meta, table, True, dtype), False),
               ("sdpa-nomask", lambda: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), False)]
    for label, make, graph in methods:
        if label == "ours kernel, dQ fused" and D > 64:
            continue  # the plan keeps two backward kernels at D 128 (kernels/attention_plan.FUSED_DQ)
        try:
            with fused_dq(not attention_plan.FUSED_DQ if label == ALT_BACKWARD[attention_plan.FUSED_DQ] else None):
                f, b = timed(make(), graph)
            rec["methods"][label] = dict(fwd_ms=f, fwdbwd_ms=b)
        except Exception as e:  # noqa: BLE001  (a baseline that cannot run is reported, not fatal)
            print(f"  {label}: failed ({type(e).__name__}: {str(e)[:160]})", flush=True)
    if not args.smoke and not args.no_flex and not getattr(args, "skip_flex", False):
        try:
            with_build, kernel_only, build = make_flex(meta, table)
            for label, fn in (("flex", with_build), ("flex kernel", kernel_only)):
                f, b = timed(fn)
                rec["methods"][label] = dict(fwd_ms=f, fwdbwd_ms=b)
            rec["flex_block_mask_ms"] = time_fn(build)
            fc, sc = flex_sanity(q.detach(), k.detach(), v.detach(), time_fn)
            rec["flex_causal_vs_sdpa"] = dict(flex_ms=fc, sdpa_ms=sc)
            print(f"  flex sanity, causal at this shape: flex {fc:.3f} ms, SDPA {sc:.3f} ms ({sc / fc:.2f}x SDPA's speed)")
        except Exception as e:  # noqa: BLE001
            print(f"  flex: failed ({type(e).__name__}: {str(e)[:160]})", flush=True)

    fwd_flops = 4 * H * D * visible
    print(f"  codes + tile map: {map_ms:.3f} ms eager, {map_graph_ms:.3f} ms replayed as a graph; FLOPs on visible "
          f"pairs: forward {fwd_flops:.3g}, forward+backward 3.5x")
    print("  | method | fwd ms | fwd+bwd ms | fwd TFLOP/s (visible) | fwd+bwd TFLOP/s | ours fwd speed-up | ours fwd+bwd speed-up |")
    print("  | --- | --- | --- | --- | --- | --- | --- |")
    for label, m in rec["methods"].items():
        mine = rec["methods"].get("ours kernel" if "kernel" in label else "ours")
        m["fwd_tflops"] = fwd_flops / m["fwd_ms"] * 1e-9
        m["fwdbwd_tflops"] = 3.5 * fwd_flops / m["fwdbwd_ms"] * 1e-9
        up = (f"{m['fwd_ms'] / mine['fwd_ms']:.2f}x | {m['fwdbwd_ms'] / mine['fwdbwd_ms']:.2f}x" if mine else "- | -")
        print(f"  | {label} | {m['fwd_ms']:.3f} | {m['fwdbwd_ms']:.3f} | {m['fwd_tflops']:.1f} | {m['fwdbwd_tflops']:.1f} | "
              f"{up} |")
    ok = rec["methods"].get("ours kernel")
    if ok:
        ok["fwd_tflops_tiles"] = 4 * H * D * computed / ok["fwd_ms"] * 1e-9
        bwd = ok["fwdbwd_ms"] - ok["fwd_ms"]
        rec["bwd_over_fwd"] = bwd / ok["fwd_ms"]
        alt = rec["methods"].get(ALT_BACKWARD[attention_plan.FUSED_DQ])
        if alt:
            rec["bwd_over_fwd_alt"] = (alt["fwdbwd_ms"] - alt["fwd_ms"]) / ok["fwd_ms"]
        print(f"  ours kernel: forward {ok['fwd_tflops_tiles']:.1f} TFLOP/s on computed tiles; backward / forward "
              f"{rec['bwd_over_fwd']:.2f}" + (f" ({backward_name(ALT_BACKWARD[attention_plan.FUSED_DQ])}: {rec['bwd_over_fwd_alt']:.2f})" if alt else "")
              + f"; map (graph) / forward {map_graph_ms / ok['fwd_ms']:.1%}", flush=True)
    return rec


# -----------------------------------------------------------------------------
# the targets of the attention issue

def targets(records):
    rows = []

    def ratio(rec, a, b, key):
        m = rec["methods"]
        return m[a][key] / m[b][key] if a in m and b in m else None

    for rec in records:
        tag = f"{rec['layout']} D{rec['D']}"
        rows.append((f"{tag}: forward kernel-only vs SDPA-mask kernel", ratio(rec, "sdpa-mask kernel", "ours kernel", "fwd_ms"), 2.0))
        rows.append((f"{tag}: fwd+bwd end to end vs SDPA-mask", ratio(rec, "sdpa-mask", "ours", "fwdbwd_ms"), 2.0))
        rows.append((f"{tag}: fwd+bwd end to end vs Flex", ratio(rec, "flex", "ours", "fwdbwd_ms"), 1.0))
        ok = rec["methods"].get("ours kernel")
        if ok:
            rows.append((f"{tag}: map / forward kernel (at most)", rec.get("map_graph_ms", rec["map_ms"]) / ok["fwd_ms"], -0.05))
            rows.append((f"{tag}: backward / forward (at most)", rec.get("bwd_over_fwd"), -2.5))
            if "bwd_over_fwd_alt" in rec:
                rows.append((f"{tag}: backward / forward, {backward_name(rec['alt_backward'])} (at most)", rec["bwd_over_fwd_alt"], -2.5))
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
