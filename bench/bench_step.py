"""A training step, the number a user feels: the same model and batches with each attention, timed
the same way.

    python -m bench.bench_step --json results/DEVICE-DATE/step.json            # base PMLM, >= 64k tokens
    python -m bench.bench_step --objective s2s --json ...                       # a seq2seq fine-tuning step
    python -m bench.bench_step --smoke                                          # tiny, on a CPU: it runs

Methods (train.py --attention, kernels/baselines.py): ours (the Triton kernel), ours-atomics (the
same with the bias table's gradient added pair by pair by atomics, no windows:
kernels/attention_plan.Tuning.grad_windows off; ours-swept runs a sweep's blocks), sdpa-mask (SDPA with
the dense mask and bias built once per step, shared by every layer, its rows padded once to SDPA's
alignment; with a mask that needs a gradient PyTorch runs its memory-efficient (CUTLASS) kernels,
cuDNN and flash refusing it), sdpa-nomask (SDPA with no mask: every pair visible; wrong for these
layouts, the dense upper bound), flex (FlexAttention, block mask built once per step). A method
may name a mode, METHOD:MODE: eager (the default), compiled (the model under torch.compile, as
train.py --compile runs it) or graph (compiled with mode "reduce-overhead": CUDA graphs, the
batches padded to a few shapes by core/pmlm.static_shapes). Each method gets a fresh model from
one seed, the same batches, the same optimizer (fused AdamW) and `--warmup-steps` untimed steps
(their seconds, compilation included, reported apart). Then `--steps` timed steps each, in
`--rounds` interleaved rounds with the methods' order rotated each round, every round between two
synchronizations, no profiler: tokens/s is input tokens over the rounds' wall time, and each
round's step time shows the drift. On a CPU each round is also timed in processor seconds (this
process's and its compiler's children's): on a shared machine, where a niced run gets what the
others leave, they count the work a step costs where the wall clock counts the wait. One more
step under the profiler names the kernels that ran
(which backend did the work, in words: bench/common.attention_backend) with each one's
milliseconds and the total of every kernel's time in that step beside the unprofiled wall time
(what the host leaves uncovered), and one under torch.cuda.set_sync_debug_mode("error") says
whether the step made a host sync. With --json, the file is written after each round (`complete`
false until the end).

One ratio in every table: ours' tokens/s over each method's (above 1: ours is faster), with ours
the first method when no "ours" runs (the CPU's reference).

FLOPs of a step (for MFU): 6 x the non-embedding parameters x the input tokens (the vocabulary
projection counted only at the predicted positions: 6 x V x C x predicted), plus attention
3 x 4 x D x H x the visible (query, key) pairs per layer (forward QK^T and PV, backward twice
that). MFU divides by the device's dense bf16 peak (PEAK_TFLOPS). The same count over every
(query, key) pair of the padded micro-batches is what a dense kernel computes (SDPA, with or
without its mask). Their ratio is what skipping the invisible pairs saves in arithmetic; it bounds
no speed-up: SDPA with its mask also reads the (B, H, L, L) mask and reduces its gradient, and two
kernels differ in speed per pair, so a step may run faster or slower than the FLOP ratio says.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_step (--help)")

import torch

from bench.common import write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

METHODS = {
    "ours": "triton",
    "ours-swept": "triton",
    "ours-atomics": "triton",
    "sdpa-mask": "sdpa",
    "sdpa-nomask": "sdpa-nomask",
    "flex": "flex",
    "reference": "reference",
}
MODES = ("eager", "compiled", "graph")


def method_of(name):
    """ "ours" of "ours:compiled"."""
    return name.split(":")[0]


def mode_of(name):
    """ "compiled" of "ours:compiled"; eager where the name has no mode."""
    return name.split(":")[1] if ":" in name else "eager"


PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense bf16, SXM


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="base", help="preset (core/config.py)")
    p.add_argument(
        "--objective",
        default="pmlm",
        choices=["pmlm", "s2s"],
        help="pmlm: a pretraining step; s2s: a UniLMv2 seq2seq fine-tuning step on the embedded corpus",
    )
    p.add_argument(
        "--tokens", type=int, default=65536, help="pretraining: window tokens a step (train.py --batch-tokens)"
    )
    p.add_argument("--examples", type=int, default=512, help="s2s: examples a step")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument(
        "--micro-batch",
        type=int,
        default=None,
        help="examples per forward pass (default: 16 windows of --seq-len for pmlm, 128 examples for "
        "s2s, whose examples are short: micro-batches of a GPU's size)",
    )
    p.add_argument("--steps", type=int, default=30, help="timed steps per method")
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=3,
        help="untimed steps per method first (compilation, autotuning); their seconds are reported",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="the timed steps in this many interleaved rounds, the methods' order rotated each round",
    )
    p.add_argument(
        "--methods",
        default="ours,sdpa-mask,sdpa-nomask,flex",
        help="comma-separated METHOD or METHOD:MODE (modes: eager, compiled, graph; eager if none)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds: a method whose warm-up would start past it is left out, and no round starts "
        "past it (a lease's budget; the rows so far are written)",
    )
    p.add_argument(
        "--configs",
        default=None,
        help="ours-swept: the kernel configurations a bench_attention.py --save-configs file holds "
        "(ours keeps the plan's own, so the two run side by side)",
    )
    p.add_argument("--json", default=None, help="write the rows here (results/<device>-<date>/step.json)")
    p.add_argument("--smoke", action="store_true", help="tiny model, few tokens, the CPU's methods: the script runs")
    args = p.parse_args(argv)
    args.methods = [m[: -len(":eager")] if m.endswith(":eager") else m for m in args.methods.split(",") if m]
    unknown = [m for m in args.methods if method_of(m) not in METHODS or mode_of(m) not in MODES]
    if unknown:
        p.error(
            f"--methods: unknown {', '.join(unknown)} (known: {', '.join(METHODS)}, each with :{', :'.join(MODES)})"
        )
    if ("ours-swept" in map(method_of, args.methods)) != (args.configs is not None):
        p.error("--methods ours-swept and --configs FILE go together: the method runs the file's configurations")
    if args.configs is not None and not os.path.isfile(args.configs):
        p.error(f"--configs {args.configs}: no such file")
    if args.micro_batch is None:
        args.micro_batch = 16 if args.objective == "pmlm" else 128
    for flag in ("tokens", "examples", "seq_len", "micro_batch", "steps", "rounds"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.steps < args.rounds:
        p.error(f"--steps {args.steps} is fewer than --rounds {args.rounds}: each round times at least one step")
    if args.warmup_steps < 0:
        p.error("--warmup-steps must be 0 or more")
    if args.deadline is not None and not args.deadline > 0:
        p.error(f"--deadline {args.deadline:g}: seconds, above 0 (without it, no deadline)")
    if len(set(args.methods)) < len(args.methods):
        p.error("--methods: a method named twice")
    args.compile_backend = "aot_eager" if args.smoke else "inductor"  # smoke: the compiler's tracing, no code
    if args.smoke:
        args.model, args.tokens, args.examples, args.seq_len, args.micro_batch = "tiny", 256, 16, 64, 4
        args.steps, args.warmup_steps, args.rounds = 2, 1, 2
        args.methods = [m for m in args.methods if method_of(m) in ("sdpa-mask", "sdpa-nomask", "reference")]
        args.methods += [] if "reference" in args.methods else ["reference"]
    if not torch.cuda.is_available() and any(METHODS[method_of(m)] in ("triton", "flex") for m in args.methods):
        p.error(
            "ours and flex train on CUDA only (flex has no CPU backward): on a CPU use --smoke, or "
            "--methods reference,sdpa-mask,sdpa-nomask"
        )
    from core.guards import unwritable

    if args.json and unwritable(args.json, "--json"):
        p.error(unwritable(args.json, "--json"))
    return args


# -----------------------------------------------------------------------------
# the batches and the model


def batches_and_model(args, device):
    """(micro-batches of one step, a function making a fresh model, the tokenizer)."""
    from core.config import preset
    from core.data import TokenStream, pretraining_texts
    from core.model import UnifiedLM
    from core.unilm.pmlm import pmlm_batch
    from core.tokenizer import cached_tokenizer
    from core.training import TOKENIZER_CACHE

    texts = pretraining_texts()[0]
    tok, _ = cached_tokenizer(texts, 8000, TOKENIZER_CACHE)
    if args.objective == "pmlm":
        stream = TokenStream(tok.encode(texts[:20000]), args.seq_len - 3, 0, sep=tok.eos_id)
        n = max(1, args.tokens // args.seq_len)
        make = lambda ix: pmlm_batch(stream, ix, tok)
    else:
        from core.unilm.seq2seq import seq2seq_batch
        from core.tasks import load_split

        train = load_split("summarize", "train", None, None, None)
        src, tgt = tok.encode(train.sources[: args.examples]), tok.encode(train.targets[: args.examples])
        n = min(args.examples, len(src))
        make = lambda ix: seq2seq_batch([(src[i], tgt[i]) for i in ix], tok, 78, 24)
    micro = [make(list(range(i, min(n, i + args.micro_batch)))) for i in range(0, n, args.micro_batch)]
    cfg = preset(args.model, vocab_size=tok.vocab_size, pad_id=tok.pad_id, dropout=0.0)

    def fresh():
        torch.manual_seed(0)
        return UnifiedLM(cfg).to(device)

    return micro, fresh, cfg


def step_flops(micro, cfg, n_params_nonemb):
    """(the FLOPs of one step (module docstring), its input tokens, its visible pairs, the FLOPs with
    every pair of the padded micro-batches computed)."""
    from kernels import reference

    tokens = sum(b.n_tokens for b in micro)
    predicted = sum(int((b.target != -100).sum()) for b in micro)
    pairs = sum(int(reference.visible(b.kind, b.step, b.kind, b.step, b.valid).sum()) for b in micro)
    dense = sum(b.tokens.shape[0] * b.tokens.shape[1] ** 2 for b in micro)  # what a dense kernel computes
    flops = 6 * n_params_nonemb * tokens + 6 * cfg.vocab_size * cfg.d_model * predicted
    per_pair = 3 * 4 * cfg.d_model * cfg.n_layers
    return flops + per_pair * pairs, tokens, pairs, flops + per_pair * dense


def loss_fn(args):
    from core.unilm.pmlm import pmlm_loss_sums
    from core.unilm.seq2seq import seq2seq_loss_sums

    return pmlm_loss_sums if args.objective == "pmlm" else seq2seq_loss_sums


# -----------------------------------------------------------------------------
# one method


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


class Method:
    """One method's model, optimizer and step counter, kept between rounds: `one()` is a training
    step with its attention, in its mode (module docstring)."""

    def __init__(self, method, args, micro, fresh, device, dtype, pad_id=0):
        import kernels
        from core.distributed import Dist
        from core.model import tune_attention
        from core.optim import make_optimizer
        from core.unilm.pmlm import static_shapes
        from core.optim import lr_at
        from core.training import StepStats, compile_model
        from bench.step import train_step
        from bench.attention_cases import read_configs
        from kernels.attention_plan import TUNING

        self.name, self.mode, self.device = method, mode_of(method), device
        # the Triton attention's launch tuning: ours-swept the file's, ours-atomics the default's without the
        # windows, every other method the default
        self.tuning = read_configs(args.configs) if method_of(method) == "ours-swept" else None
        if method_of(method) == "ours-atomics":
            self.tuning = TUNING._replace(grad_windows=False)
        self.backend = lambda: kernels.use_backend(METHODS[method_of(method)])  # noqa: E731
        self.model = tune_attention(fresh(), self.tuning)
        self.call = self.model  # what the step calls: the model, or its compiled graph
        if self.mode != "eager":
            backend = getattr(args, "compile_backend", "inductor")
            graphs = dict(mode="reduce-overhead") if backend == "inductor" else dict(backend=backend)
            self.call = compile_model(self.model, **(graphs if self.mode == "graph" else dict(backend=backend)))
        if self.mode == "graph":  # a CUDA graph per shape: a few shapes
            micro = [static_shapes(b, pad_id) for b in micro]
        self.optimizer = make_optimizer(self.model, 1e-4)
        self.d = Dist(0, 1, 0, device, dtype)
        self.lr = lambda step: lr_at(step, 1e-4, 10, 10_000)  # noqa: E731
        self.loss_sums, self.window, self.micro, self.step = loss_fn(args), StepStats(), micro, 0
        self.train_step, self.seconds, self.warmup_s, self.cpu_seconds = train_step, [], 0.0, []

    def one(self):
        self.window.add(
            self.train_step(
                self.call,
                self.model,
                self.optimizer,
                self.micro,
                self.loss_sums,
                self.d,
                step=self.step,
                lr=self.lr(self.step),
            ),
            self.step,
        )
        self.step += 1

    def run(self, steps):
        """`steps` steps under this method's attention, between two synchronizations: their seconds, and
        the processor seconds this process and its children (a compiler's) spent in them."""
        with self.backend():
            sync(self.device)
            t0, c0 = time.perf_counter(), processor_seconds()
            for _ in range(steps):
                self.one()
            sync(self.device)
        self.cpu_seconds.append(processor_seconds() - c0)
        return time.perf_counter() - t0

    def timing(self, per_round):
        """The method's time so far: its mean step time over the rounds run, and each round's; on a CPU
        also in processor time (module docstring)."""
        out = dict(
            method=self.name,
            backend=METHODS[method_of(self.name)],
            mode=self.mode,
            warmup_s=self.warmup_s,
            step_ms=1e3 * sum(self.seconds) / (per_round * len(self.seconds)),
            round_ms=[1e3 * s / per_round for s in self.seconds],
        )
        if self.device.type == "cpu":
            timed = self.cpu_seconds[1:]  # the first is the warm-up's
            out.update(
                warmup_cpu_s=self.cpu_seconds[0],
                step_cpu_ms=1e3 * sum(timed) / (per_round * len(timed)),
                round_cpu_ms=[1e3 * s / per_round for s in timed],
            )
        return out

    def row(self, per_round):
        """The method's row after every round: its timing, loss, and the kernels and sync checks."""
        from bench.common import attention_backend

        stats, skipped, _ = self.window.read()
        row = dict(self.timing(per_round), loss=stats["loss"] / stats["norm"], skipped=skipped)
        with self.backend():
            row["kernels"], row["kernel_ms"], row["kernel_total_ms"] = kernels_of(self.one, self.device)
            row["host_syncs"] = sync_check(self.one, self.device)
        row["attention"] = attention_backend(self.name, row["kernels"])
        return row


def rounds(args, names=None):
    """The methods' order in each round: rotated by one each round, so that no method always runs
    first (on a fresh allocator) or last (after the others warmed the clocks)."""
    names = names or args.methods
    n = len(names)
    return [[names[(r + i) % n] for i in range(n)] for r in range(args.rounds)]


FAILED = {}  # method -> the error that stopped its warm-up (written to the JSON)


def measure_all(args, micro, fresh, device, dtype, report, pad_id=0):
    """Every method's model made and warmed (compilation included, its seconds kept apart), then
    `--rounds` rounds of `--steps / --rounds` timed steps each, interleaved, then each method's
    kernels and sync check. `report(rows, final)` after each round with the timings so far, so
    that a run cut short keeps what it measured, and once more with the final rows. Past
    --deadline no further method warms up and no further round starts (the first always runs)."""
    methods, per_round, t0 = {}, args.steps // args.rounds, time.time()
    late = lambda: args.deadline is not None and time.time() - t0 > args.deadline  # noqa: E731
    for name in args.methods:
        if methods and late():
            print(f"  {name:<12} left out: the deadline has passed", flush=True)
            continue
        try:
            m = Method(name, args, micro, fresh, device, dtype, pad_id)
            m.warmup_s = m.run(args.warmup_steps)
        except Exception as e:  # noqa: BLE001  (a mode that does not run here, CUDA graphs say, is reported)
            FAILED[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            print(f"  {name:<12} failed: {FAILED[name]}", flush=True)
            continue
        methods[name] = m
        print(f"  {name:<12} warmed up in {m.warmup_s:.0f} s ({args.warmup_steps} steps)", flush=True)
    names = list(methods)
    if not names:
        raise SystemExit("bench_step: no method ran (" + "; ".join(f"{k}: {v}" for k, v in FAILED.items()) + ")")
    for r, order in enumerate(rounds(args, names)):
        if r and late():
            print(f"  rounds {r + 1}-{args.rounds}: not run, the deadline has passed", flush=True)
            break
        for name in order:
            methods[name].seconds.append(methods[name].run(per_round))
        report([methods[name].timing(per_round) for name in names], False)
    rows = [methods[name].row(per_round) for name in names]
    report(rows, True)
    return rows


def processor_seconds():
    """User and system seconds of this process and of its children waited for (a compiler's)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def kernels_of(one, device, top=16):
    """The kernels one step ran, by device time: their names (which backend did the work), the
    milliseconds each took in the step (where the step's time went), and the total of every
    kernel's time in the step (on a CPU, of every operator's own time)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        one()
        sync(device)
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0), reverse=True)
    total = sum(getattr(e, key, 0) for e in events) / 1e3
    return [e.key[:120] for e in events[:top]], [getattr(e, key, 0) / 1e3 for e in events[:top]], total


def sync_check(one, device):
    """'none' if a step runs under set_sync_debug_mode('error'), else the error's first line (CUDA only)."""
    if device.type != "cuda":
        return "not checked (CPU)"
    torch.cuda.set_sync_debug_mode("error")
    try:
        one()
        return "none"
    except RuntimeError as e:
        return str(e).splitlines()[0][:200]
    finally:
        torch.cuda.set_sync_debug_mode(0)
        sync(device)


def ratio_base(rows):
    """The row every ratio is taken against: ours (eager) where it ran, else the first row."""
    return next((r for r in rows if r["method"] == "ours"), rows[0])


# -----------------------------------------------------------------------------


def environment(device):
    import triton

    name = torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "CPU"
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return dict(
        device=name,
        torch=torch.__version__,
        triton=triton.__version__,
        python=platform.python_version(),
        commit=commit,
        date=datetime.date.today().isoformat(),
    )


def main(argv=None):
    args = get_args(argv)
    from core.distributed import resolve_dtype

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = resolve_dtype("auto", device)
    micro, fresh, cfg = batches_and_model(args, device)
    probe = fresh()
    n_emb = sum(p.numel() for n, p in probe.named_parameters() if n.startswith("emb."))
    n_params = sum(p.numel() for p in probe.parameters())
    del probe
    flops, tokens, pairs, dense_flops = step_flops(micro, cfg, n_params - n_emb)
    env = environment(device)
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in env["device"]), None)
    print(
        f"{args.model} {args.objective} step: {tokens:,} input tokens in {len(micro)} micro-batches, "
        f"{n_params / 1e6:.1f}M parameters, {flops / 1e12:.2f} TFLOP a step ({dense_flops / 1e12:.2f} with every "
        f"pair computed: FLOP ratio {dense_flops / flops:.2f}); {env['device']}, {str(dtype)[6:]}"
    )
    out = dict(
        env,
        command=shlex.join(["python", "-m", "bench.bench_step"] + (sys.argv[1:] if argv is None else list(argv))),
        model=args.model,
        objective=args.objective,
        tokens_per_step=tokens,
        visible_pairs=pairs,
        flops_per_step=flops,
        dense_flops_per_step=dense_flops,
        flop_count="6 x non-embedding parameters x input tokens + 6 x V x C x predicted tokens + "
        "12 x C x visible pairs x layers",
        peak_tflops=peak,
        dtype=str(dtype)[6:],
        rounds=args.rounds,
        timed_steps=args.steps // args.rounds * args.rounds,
        rows=[],
    )
    if args.configs:  # what ours-swept ran, beside what ours ran (the plan's own)
        from kernels.attention_plan import CUDA_CONFIGS, TUNING

        with open(args.configs) as f:
            out.update(
                swept_configs=json.load(f),
                plan_configs=dict({str(D): list(c) for D, c in CUDA_CONFIGS.items()}, fused_dq=TUNING.fused_dq),
            )

    def report(rows, final):
        for row in rows:
            row.update(tokens_per_s=tokens / (row["step_ms"] / 1e3), tflops=flops / (row["step_ms"] / 1e3) / 1e12)
            row["mfu"] = row["tflops"] / peak if peak else None
        base = ratio_base(rows)
        out["ratio_base"] = base["method"]
        for row in rows:
            row["base_over"] = base["tokens_per_s"] / row["tokens_per_s"]
        if not final:
            print(
                f"  round {len(rows[0]['round_ms'])}: "
                + ", ".join(f"{r['method']} {r['round_ms'][-1]:.1f} ms" for r in rows),
                flush=True,
            )
        for row in rows if final else []:
            spread = ", ".join(f"{ms:.1f}" for ms in row["round_ms"])
            print(
                f"  {row['method']:<12} {row['step_ms']:9.1f} ms a step (rounds {spread}), "
                f"{row['tokens_per_s']:>10,.0f} tokens/s, {row['tflops']:.1f} TFLOP/s"
                + (f", MFU {100 * row['mfu']:.1f}%" if row["mfu"] else "")
                + f"; kernels {row['kernel_total_ms']:.1f} ms of a step; {row['attention']}; "
                f"host syncs: {row['host_syncs']}",
                flush=True,
            )
        out.update(rows=rows, complete=final, failed=dict(FAILED))
        if args.json:  # after every round: a run cut short keeps its timings
            write_json(args.json, out)

    rows = measure_all(args, micro, fresh, device, dtype, report, cfg.pad_id)
    print(
        f"{out['ratio_base']}'s tokens/s over each method's (above 1: {out['ratio_base']} is faster): "
        + ", ".join(f"{r['method']} {r['base_over']:.2f}x" for r in rows)
    )
    if args.json:
        print(f"wrote {args.json}")
    return out


if __name__ == "__main__":
    main()
