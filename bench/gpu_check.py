"""The first step of validating a GPU: one command, in parts that each fit a 10-minute call.

    python -m bench.gpu_check --wheels                       # any machine: the wheels a GPU image lacks
    python -m bench.gpu_check --part tests-kernels --out gpu # the Triton kernel tests on CUDA (bf16 included)
    python -m bench.gpu_check --part tests-rest --out gpu    # the rest of the suite on CUDA
    python -m bench.gpu_check --part bench --out gpu         # every bench/bench_*.py, with its target (latency:
                                                             # after python -m reproduce --budget gpu made its
                                                             checkpoints)
    python -m bench.gpu_check --part profile --out gpu       # a profiled `base` PMLM and ELMER training step
    python -m bench.gpu_check --part pmlm --out gpu          # `small` PMLM, Triton vs reference, 200 steps
    python -m bench.gpu_check --part speed --out gpu         # the attention issue's check: kernel tests on CUDA,
                                                             # then every layout against SDPA with a block sweep
    python -m bench.gpu_check --part step --out gpu          # the GPU-step issue's one call: the baselines' and the
                                                             # step's tests on CUDA, then a base PMLM and a seq2seq
                                                             # step with each attention (bench/bench_step.py)
    python -m bench.gpu_check --part tune --out gpu          # the backward's blocks: a sweep on the PMLM layout,
                                                             # then the steps with ours as planned and as swept
    python -m bench.gpu_check --part all                     # the one prepared call (at most 8 minutes):
                                                             # correctness tests on CUDA, the PMLM and seq2seq steps
                                                             # with each attention eager, compiled and as CUDA graphs,
                                                             # the per-layer harness, a profiled step with its total
                                                             # kernel time; all under results/<device>-<date>/
    python -m bench.gpu_check --part all --tiny --out DIR    # the same at tiny shapes on a CPU: the plumbing
                                                             # (TEXTGEN_REHEARSAL=1 runs its test in the suite)
    python -m bench.gpu_check --part decode --out gpu        # the next call on the warm machine: Flex beside ours
                                                             # (the sweep's blocks), early exit (and a carried
                                                             # --elmer-ckpt's learnt exit), off-ramp, gather,
                                                             # the bf16 training-step profile

Each part appends markdown rows for bench/RESULTS.md to OUT/results.md and everything it ran,
with the output, to OUT/gpu_check.log. The GPU image (Python 3.12, torch 2.11, triton 3.6, no
network) lacks rouge-score and its dependency nltk, which the test suite needs (ROUGE is computed
in fine-tuning and eval tests): --wheels prints the command that builds them on a machine with
network, to carry in wheels/ and install there with the command it also prints. On a machine
without CUDA every part is refused in one line.

Compilation caches: a fresh machine compiles our kernels (and Flex) in the first steps of each
benchmark, which can take most of a call. Every part keeps Triton's and Inductor's caches in
--cache (an ignored folder) and packs them into OUT/gpu-cache.tgz at its end: unpack that into
checkpoints/ on this side and name the folder in the device call's `carry`, and the next machine
starts with them.
"""

import argparse
import importlib.util
import json
import os
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.gpu_check (--help)")

from bench.common import write_json
from bench.gpu_profile import H100_BF16_TFLOPS, part_profile
from bench.gpu_lease import (
    Report,
    environment,
    missing_here,
    pack_cache,
    print_wheels,
    timed_steps,
    use_cache,
    wheel_commands,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PARTS = ("tests-kernels", "tests-rest", "bench", "profile", "pmlm", "speed", "decode", "step", "tune")
# where --part speed leaves the fastest blocks of its sweep for --part decode (an ignored folder: it
# stays on a machine kept warm between the two calls)
SWEPT = "checkpoints/gpu-swept-configs.json"
KERNEL_TESTS = [
    "tests/test_attention_layouts.py",
    "tests/test_attention_launch.py",
    "tests/test_attention_in_model.py",
    "tests/test_attention_rule.py",
    "tests/test_early_exit.py",
    "tests/test_compile.py",
]
# every benchmark, its arguments, and the target its header (or bench/RESULTS.md) sets
BENCHES = [
    (
        "bench.bench_attention",
        [],
        "a layer's fwd+bwd with setup once a step >= 1.5x SDPA with a dense mask and >= "
        "1.0x a Flex shown fused; TFLOP/s on computed tiles >= 0.65x SDPA without a mask",
    ),
    ("bench.bench_gather", [], "gather / scatter >= 2.5 TB/s at 4k+ tokens x 768, bf16"),
    ("bench.bench_offramp", [], "fused off-ramp >= 2x the PyTorch chain"),
    (
        "bench.bench_early_exit",
        ["--model", "base", "--forced", "--ar"],
        "forced exits: every time ratio between its FLOP ratio and 1.1x it (below it: a measurement bug); "
        "NAR one pass >= 10x lower latency than AR beam 4",
    ),
    (
        "bench.bench_decoders",
        ["--model", "base"],
        "Mask-Predict at batch 1 under CUDA graphs >= 2x its eager decoding, the same tokens",
    ),
    # at --budget gpu's micro-batch (64 x 128 tokens), the step whose dtype `auto` picks there: the
    # default 32 x 128 step is too short on a GPU for bf16 to show (bench/RESULTS.md)
    (
        "bench.bench_dtype",
        ["--repeats", "6", "--micro-batch", "64"],
        "bf16 autocast >= 1.5x the tokens/s of float32, losses equal to 2 digits",
    ),
    ("bench.bench_mlae_encoder", ["--model", "base"], "encoder on unmasked tokens faster than on all (no set ratio)"),
    (
        "bench.bench_step",
        [],
        "base PMLM step at >= 64k tokens: ours >= 1.10x the tokens/s of SDPA with a dense mask, "
        "MFU >= 30% of the bf16 peak, no host sync",
    ),
    # trained summarizers: the runner's (python -m reproduce --budget gpu) checkpoints, AR first
    (
        "bench.bench_latency",
        [f"checkpoints/reproduce-gpu/{r}/best.pt" for r in ("sum-t5", "elmer-hard", "nar-mlae-b")],
        "ELMER one pass and Mask-Predict faster than AR beam 5 at batch 1, one pass faster than Mask-Predict",
    ),
]
BUDGET, ALL_BUDGET = 540.0, 480.0  # seconds: a part of a 10-minute call; --part all, 8 minutes


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--part", choices=PARTS + ("all",), help="what to check (all: the one prepared call, at most 8 minutes)"
    )
    p.add_argument(
        "--out",
        default=None,
        help="directory for results.md, gpu_check.log and the parts' files (default gpu_check; --part "
        "all: results/<device>-<date>)",
    )
    p.add_argument(
        "--tiny", action="store_true", help="--part all at tiny shapes, on a CPU too: the plumbing only, no measurement"
    )
    p.add_argument(
        "--wheels", action="store_true", help="print the wheels a GPU image needs and the commands; runs anywhere"
    )
    p.add_argument("--steps", type=int, default=200, help="pmlm: training steps per backend")
    p.add_argument(
        "--data",
        default=None,
        help="pmlm: pretraining text (default: the embedded corpus; carry data/cache "
        "to skip training its tokenizer there)",
    )
    p.add_argument(
        "--loss-tolerance",
        type=float,
        default=0.05,
        help="pmlm: largest |loss difference| between the backends at any step (bf16 autocast)",
    )
    p.add_argument(
        "--elmer-ckpt",
        default="checkpoints/reproduce-cpu/elmer-hard-scratch/best.pt",
        help="decode: a fine-tuned ELMER to time its learnt exit (carry it: it is ignored by git)",
    )
    p.add_argument(
        "--cache",
        default="checkpoints/gpu-cache",
        help="Triton's and Inductor's compilation caches, kept here and packed into OUT/gpu-cache.tgz",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"speed, decode, all: seconds the part may take in all (all: {ALL_BUDGET:.0f} unless given); a "
        "step that would start too late is skipped, one that runs too long is stopped",
    )
    args = p.parse_args(argv)
    if not args.wheels and args.part is None:
        p.error("give --part (or --wheels)")
    if args.steps < 1 or not args.loss_tolerance > 0:
        p.error("--steps must be at least 1 and --loss-tolerance above 0")
    if args.budget is None:
        args.budget = ALL_BUDGET if args.part == "all" else BUDGET
    if not args.budget > 0:
        p.error("--budget must be above 0 seconds")
    if args.tiny and args.part != "all":
        p.error("--tiny goes with --part all")
    return args


# -----------------------------------------------------------------------------
# the parts


def part_tests(rep, files):
    """The suite on CUDA: the Triton backend is what 'auto' picks on a GPU (TRITON_INTERPRET unset)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider"] + files
    status, out, secs = rep.run(cmd, env={"TRITON_INTERPRET": "0"})
    summary = [l for l in out.strip().splitlines() if " passed" in l or " failed" in l or " error" in l][-1:]
    failed = [l for l in out.splitlines() if l.startswith(("FAILED", "ERROR"))]
    rep.rows(
        f"tests on CUDA: {' '.join(os.path.basename(f) for f in files) if len(files) < 5 else 'the rest'}",
        ["status", "summary", "seconds"],
        [[status, summary[0] if summary else "-", f"{secs:.0f}"]] + [["", f, ""] for f in failed[:20]],
    )


def part_bench(rep):
    rows = []
    for script, extra, target in BENCHES:
        absent = [a for a in extra if a.endswith(".pt") and not os.path.exists(os.path.join(ROOT, a))]
        if absent:  # a benchmark of trained models, before the runner made them
            rows.append(
                [
                    script,
                    target,
                    "not run",
                    "0",
                    f"{absent[0]} missing: run python -m reproduce --budget gpu first, then this part again",
                ]
            )
            continue
        status, out, secs = rep.run([sys.executable, "-m", script] + extra)
        tail = [l for l in out.strip().splitlines() if l.strip()][-1:] or ["-"]
        rows.append([script + " " + " ".join(extra), target, status, f"{secs:.0f}", tail[0].replace("|", "/")[:120]])
    rep.rows(
        "benchmarks (full tables in gpu_check.log)", ["benchmark", "target", "status", "seconds", "last line"], rows
    )


def part_pmlm(rep, args):
    """`small` PMLM for --steps steps through each backend, same seed and data: loss curves, tokens/s, MFU."""
    from core.config import preset
    from core.model import UnifiedLM, count_parameters

    n_params = count_parameters(UnifiedLM(preset("small", vocab_size=8000)))
    if args.data is None:  # train.py's tokenizer, trained once into data/cache outside the runs' time limits
        from core.data import pretraining_texts
        from core.tokenizer import cached_tokenizer
        from core.training import TOKENIZER_CACHE

        t0 = time.time()
        cached_tokenizer(pretraining_texts()[0], 8000, TOKENIZER_CACHE)
        print(f"tokenizer ready ({time.time() - t0:.0f}s; a call that ran out of time finds it cached)", flush=True)
    curves, rows = {}, []
    for backend in ("triton", "reference"):
        out = os.path.join(args.out, f"pmlm-{backend}")
        cmd = [
            sys.executable,
            "train.py",
            "--model",
            "small",
            "--steps",
            str(args.steps),
            "--out",
            out,
            "--overwrite",
            "--log-every",
            "10",
            "--eval-every",
            str(args.steps),
            "--device",
            "cuda",
        ]
        status, _, secs = rep.run(
            cmd + (["--data", args.data] if args.data else []), env={"ATTENTION_BACKEND": backend}, timeout=280
        )
        log = (
            [json.loads(l) for l in open(os.path.join(out, "log.jsonl"))]
            if os.path.exists(os.path.join(out, "log.jsonl"))
            else []
        )
        steps = [r for r in log if "tokens_per_s" in r]
        curves[backend] = {r["step"]: r["loss"] for r in steps}
        rate = sum(r["tokens_per_s"] for r in steps[1:]) / max(1, len(steps) - 1)  # the first report holds the warm-up
        mfu = 6 * n_params * rate / (H100_BF16_TFLOPS * 1e12)
        rows.append(
            [
                backend,
                status,
                f"{secs:.0f}",
                f"{steps[-1]['loss']:.4f}" if steps else "-",
                f"{rate / 1e3:.1f}k",
                f"{mfu:.1%}",
            ]
        )
    common = sorted(set(curves["triton"]) & set(curves["reference"]))
    gap = max((abs(curves["triton"][s] - curves["reference"][s]) for s in common), default=float("nan"))
    verdict = "ok" if gap <= args.loss_tolerance else "DIFFERS"
    rep.rows(
        f"small PMLM, {args.steps} steps, Triton vs reference (largest loss gap {gap:.4f} over {len(common)} "
        f"logged steps, tolerance {args.loss_tolerance}: {verdict}); MFU = 6 N tokens/s / {H100_BF16_TFLOPS:.0f} "
        "TFLOP/s, "
        f"N = {n_params / 1e6:.1f}M, attention FLOPs not counted",
        ["backend", "status", "seconds", "final loss", "tokens/s", "MFU"],
        rows,
    )


def part_speed(rep, args):
    """The attention issue's one command: the kernel tests on CUDA, then bench_attention.py over every
    layout with its block sweep (the winners saved for --part decode)."""
    py = sys.executable
    out = os.path.abspath(args.out)
    # the tests compile dozens of kernel variants: in parallel where pytest-xdist is installed
    parallel = ["-n", "8"] if importlib.util.find_spec("xdist") else []
    steps = [
        (
            "attention and tile-map tests on CUDA",
            [py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
            + parallel
            + ["tests/test_attention_layouts.py", "tests/test_attention_launch.py", "tests/test_tilemap.py"],
            150,
        ),
        (
            "bench_attention.py --sweep (no Flex: next call)",
            [
                py,
                "-m",
                "bench.bench_attention",
                "--sweep",
                "--no-flex",
                "--json",
                os.path.join(out, "attention.json"),
                "--save-configs",
                SWEPT,
            ],
            240,
        ),
    ]
    rep.rows("speed: steps", ["step", "status", "seconds", "last line"], timed_steps(rep, steps, args.budget))
    if os.path.exists(os.path.join(ROOT, SWEPT)):
        import shutil

        shutil.copy(os.path.join(ROOT, SWEPT), os.path.join(out, "swept-configs.json"))


def part_step(rep, args):
    """A training step with each attention, the number a user feels: the tests that hold the
    baselines to the reference on CUDA (Flex's backward included; every test runs, a failure's
    message kept, the compilers' debug log not) and the step's host syncs, then bench_step.py at
    base size, pretraining and then fine-tuning, ours against SDPA with and without the mask (the
    first fair step needs those three; Flex, whose compilation is slow, runs last in its own
    step), each writing its JSON to OUT."""
    py = sys.executable
    out = os.path.abspath(args.out)
    three = ["--methods", "ours,sdpa-mask,sdpa-nomask"]
    steps = [
        (
            "baselines and step-sync tests on CUDA",
            [
                py,
                "-m",
                "pytest",
                "-q",
                "-rf",
                "--tb=short",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:logging",
                "tests/test_baselines.py",
                "tests/test_step_syncs.py",
            ],
            80,
        ),
        (
            "bench_step.py: base PMLM, 64k tokens a step",
            [py, "-m", "bench.bench_step", "--steps", "21"] + three + ["--json", os.path.join(out, "step.json")],
            240,
        ),
        (
            "bench_step.py: base seq2seq fine-tuning",
            [py, "-m", "bench.bench_step", "--objective", "s2s", "--steps", "9"]
            + three
            + ["--json", os.path.join(out, "step-s2s.json")],
            120,
        ),
        (
            "bench_step.py: base PMLM, Flex beside ours",
            [
                py,
                "-m",
                "bench.bench_step",
                "--methods",
                "ours,flex",
                "--steps",
                "12",
                "--json",
                os.path.join(out, "step-flex.json"),
            ],
            150,
        ),
    ]
    rep.rows("step: steps", ["step", "status", "seconds", "last line"], timed_steps(rep, steps, args.budget))


def part_tune(rep, args):
    """The backward's blocks tried where the step runs them: bench_attention.py's sweep on the PMLM
    layout at D 64 (each candidate checked against the reference, then timed; the fastest saved),
    then the base PMLM and seq2seq steps with ours as the plan has it, ours with the sweep's
    fastest (ours-swept) and SDPA with the dense mask, interleaved in one run."""
    py = sys.executable
    out = os.path.abspath(args.out)
    swept = os.path.join(ROOT, SWEPT)
    if os.path.exists(swept):
        os.remove(swept)  # a file left by an older sweep would stand in for this one's
    methods = ["--methods", "ours,ours-swept,sdpa-mask", "--configs", swept]
    steps = [
        (
            "bench_attention.py --sweep, PMLM at D 64 (no Flex)",
            [
                py,
                "-m",
                "bench.bench_attention",
                "--sweep-only",
                "--layouts",
                "pmlm",
                "--dims",
                "64",
                "--no-flex",
                "--deadline",
                "150",
                "--json",
                os.path.join(out, "sweep.json"),
                "--save-configs",
                swept,
            ],
            200,
        )
    ]
    rows = timed_steps(rep, steps, args.budget)
    if not os.path.exists(swept):
        rows.append(["the steps", "skipped (the sweep saved no configuration)", "0", "-"])
    else:
        import shutil

        shutil.copy(swept, os.path.join(out, "swept-configs.json"))
        steps = [
            (
                "bench_step.py: base PMLM, ours as planned and as swept",
                [py, "-m", "bench.bench_step", "--steps", "15"]
                + methods
                + ["--json", os.path.join(out, "step-swept.json")],
                200,
            ),
            (
                "bench_step.py: base seq2seq, ours as planned and as swept",
                [py, "-m", "bench.bench_step", "--objective", "s2s", "--steps", "9"]
                + methods
                + ["--json", os.path.join(out, "step-s2s-swept.json")],
                120,
            ),
        ]
        rows += timed_steps(rep, steps, args.budget - sum(float(r[2]) for r in rows))
    rep.rows("tune: steps", ["step", "status", "seconds", "last line"], rows)


def part_decode(rep, args):
    """The warm machine's second call: ours and FlexAttention in one run with the sweep's blocks, ELMER's
    static-shape pass and its graphs, Mask-Predict's graphs beside ELMER and AR beam search, forced exits at large
    batch, the fused off-ramp loss, gather and
    scatter, and the bf16 training-step profile; each within the budget."""
    py = sys.executable
    out = os.path.abspath(args.out)
    configs = ["--configs", SWEPT] if os.path.exists(os.path.join(ROOT, SWEPT)) else []
    steps = [
        (
            "bench_early_exit.py --graphs (base)",
            [
                py,
                "-m",
                "bench.bench_early_exit",
                "--graphs",
                "--model",
                "base",
                "--json",
                os.path.join(out, "exit.json"),
                "--repeats",
                "10",
            ],
            70,
        ),
        (
            "bench_decoders.py (base): Mask-Predict and AR beam (T5, PMLM) eager / static / graphs, ELMER",
            [py, "-m", "bench.bench_decoders", "--model", "base", "--json", os.path.join(out, "decoders.json")],
            90,
        ),
        (
            "bench_early_exit.py --ckpt (a trained ELMER's exit)",
            [
                py,
                "-m",
                "bench.bench_early_exit",
                "--ckpt",
                args.elmer_ckpt,
                "--n",
                "16",
                "--repeats",
                "5",
                "--measures",
                "classifier",
                "state",
                "--thresholds",
                "classifier=0.6,0.9;state=0.99",
                "--json",
                os.path.join(out, "ckpt.json"),
            ],
            50,
        )
        if os.path.exists(args.elmer_ckpt)
        else ("bench_early_exit.py --ckpt (no checkpoint carried)", [py, "-c", f"print('no {args.elmer_ckpt}')"], 5),
        (
            "bench_early_exit.py --forced at batch 64 and 256 (base): time ratio against FLOP ratio",
            [
                py,
                "-m",
                "bench.bench_early_exit",
                "--forced",
                "--model",
                "base",
                "--forced-batches",
                "64",
                "256",
                "--repeats",
                "5",
                "--json",
                os.path.join(out, "forced.json"),
            ],
            60,
        ),
        (
            "bench_offramp.py (V 8000, 50000)",
            [py, "-m", "bench.bench_offramp", "--vocab", "8000", "50000", "--tokens", "4096", "16384"],
            45,
        ),
        ("bench_gather.py (16k x 768)", [py, "-m", "bench.bench_gather", "--tokens", "16384"], 25),
        (
            "bench_attention.py with FlexAttention",
            [
                py,
                "-m",
                "bench.bench_attention",
                "--json",
                os.path.join(out, "attention-flex.json"),
                "--deadline",
                str(max(30, args.budget - 220)),
            ]
            + configs,
            args.budget - 180,
        ),
    ]
    rep.rows("decode: steps", ["step", "status", "seconds", "last line"], timed_steps(rep, steps, args.budget - 40))
    if args.budget - 40 > 0:
        try:
            part_profile(rep, ("pmlm",))
        except Exception as e:  # noqa: BLE001  (the profile is the last step: report, do not lose the rest)
            rep.rows("profile", ["error"], [[f"{type(e).__name__}: {str(e)[:200]}"]])


# the prepared call's correctness tests on CUDA: the custom operators torch.compile traces, the baselines
# (the mask's alignment, Flex's backward), the compiled step's graphs and syncs, then the kernels themselves
ALL_TESTS = [
    "tests/test_attention_op.py",
    "tests/test_baselines.py",
    "tests/test_step_syncs.py",
    "tests/test_attention_layouts.py",
    "tests/test_attention_launch.py",
]
# (objective, methods, seconds at most) of the prepared call's steps: eager first, then compiled, then graphs, Flex
# (the slowest to compile) last, so that what a short lease cuts is what matters least; the seq2seq step, whose
# tiles mostly add the bias table's gradient by atomics already, also without the windows (ours-atomics)
ALL_STEPS = [
    ("pmlm", "ours,sdpa-mask,sdpa-nomask,ours:compiled,sdpa-mask:compiled,ours:graph,flex", 150),
    ("s2s", "ours,sdpa-mask,sdpa-nomask,ours:compiled,sdpa-mask:compiled,ours-atomics", 90),
]


def part_all(rep, args):
    """The one prepared call, within --budget (480 s): the correctness tests on CUDA,
    bench_step.py's PMLM and seq2seq steps with each attention eager, compiled and as CUDA graphs
    (ALL_STEPS; each run stops its rounds before its cap and keeps what it measured), the per-layer
    harness at the PMLM step's row count (bench_attention.py, no Flex), then a profiled PMLM step with
    its total kernel time. Every file lands in OUT with environment.json (device, versions, commit,
    command, date). --tiny: the same at tiny shapes, on a CPU too (the smoke sizes, the CPU's methods,
    the interpreter), to test the plumbing."""
    import torch

    py, out, t0 = sys.executable, os.path.abspath(args.out), time.time()
    cpu = not torch.cuda.is_available()
    if args.tiny:
        tests = [
            (
                "correctness tests (tiny: the mask built once and aligned)",
                [
                    py,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "tests/test_baselines.py",
                    "-k",
                    "one_mask_per_forward or padded_once",
                ],
                120,
            )
        ]
    else:
        tests = [
            (
                "correctness tests on CUDA",
                [py, "-m", "pytest", "-q", "-rf", "--tb=short", "-p", "no:cacheprovider", "-p", "no:logging"]
                + ALL_TESTS,
                120,
            )
        ]
    steps = []
    for objective, methods, cap in ALL_STEPS:
        if args.tiny:  # the CPU's methods, the compiled modes for the PMLM step only
            methods = "reference,reference:compiled,reference:graph" if objective == "pmlm" else "reference,sdpa-mask"
            size = ["--smoke"]
        else:
            size = ["--steps", "6", "--rounds", "3", "--warmup-steps", "3", "--deadline", str(cap - 60)]
        steps.append(
            (
                f"bench_step.py: {objective} step, {methods}",
                [py, "-m", "bench.bench_step", "--objective", objective, "--methods", methods]
                + size
                + ["--json", os.path.join(out, f"step-{objective}.json")],
                cap,
            )
        )
    harness = ["--smoke"] if args.tiny else ["--deadline", "40"]
    steps.append(
        (
            "bench_attention.py: the PMLM layout at D 64, the step's rows, no Flex",
            [py, "-m", "bench.bench_attention", "--layouts", "pmlm", "--dims", "64", "--no-flex"]
            + harness
            + ["--json", os.path.join(out, "attention.json")],
            60,
        )
    )
    env = {"TRITON_INTERPRET": "1"} if cpu else None
    if args.tiny:  # the plumbing: no step's cap but the budget (a loaded CPU is slow)
        steps = [(title, cmd, args.budget) for title, cmd, _ in steps]
    rows = timed_steps(rep, tests + steps, args.budget - 40, env)
    rep.rows("all: steps", ["step", "status", "seconds", "last line"], rows)
    if args.budget - (time.time() - t0) >= 30:
        try:
            part_profile(rep, ("pmlm",), tiny=args.tiny)
        except Exception as e:  # noqa: BLE001  (the profile is the last step: report, do not lose the rest)
            rep.rows("profile", ["error"], [[f"{type(e).__name__}: {str(e)[:200]}"]])
    else:
        rep.rows("profile", ["status"], [["skipped (budget spent)"]])
    print(f"all: {time.time() - t0:.0f} s", flush=True)


def default_out(args, device_name):
    """--out, or for --part all results/<device>-<date> (an H200: results/h200-2026-12-01)."""
    import re

    if args.out:
        return args.out
    if args.part != "all":
        return "gpu_check"
    found = re.search(r"\b([A-Z]+\d+)\b", device_name)
    return os.path.join(ROOT, "results", f"{found.group(1).lower() if found else 'gpu'}-{time.strftime('%Y-%m-%d')}")


RUNS = {
    "tests-kernels": lambda rep, args: part_tests(rep, KERNEL_TESTS),
    "tests-rest": lambda rep, args: part_tests(rep, other_tests()),
    "bench": lambda rep, args: part_bench(rep),
    "profile": lambda rep, args: part_profile(rep),
    "pmlm": part_pmlm,
    "speed": part_speed,
    "decode": part_decode,
    "step": part_step,
    "tune": part_tune,
}


def other_tests():
    return sorted(
        os.path.join("tests", f)
        for f in os.listdir(os.path.join(ROOT, "tests"))
        if f.startswith("test_") and f.endswith(".py") and f"tests/{f}" not in KERNEL_TESTS
    )


def main(argv=None):
    args = get_args(argv)
    if args.wheels:
        print_wheels()
        if args.part is None:
            return 0
    import torch

    if not torch.cuda.is_available() and not args.tiny:
        print(
            "error: bench/gpu_check.py checks a CUDA GPU, and this machine has none (its CPU-side parts run in "
            "tests/test_gpu_check.py; --part all --tiny runs the prepared call's plumbing here)",
            file=sys.stderr,
        )
        return 2
    missing = missing_here()
    if missing and args.part == "tests-rest":
        build, install = wheel_commands(missing)
        print(
            f"error: the test suite needs {', '.join(missing)}: build the wheels with `{build}` on a machine "
            f"with network, then `{install}` here",
            file=sys.stderr,
        )
        return 2
    env = environment_of(" ".join(["python", "-m", "bench.gpu_check"] + list(sys.argv[1:] if argv is None else argv)))
    args.out = default_out(args, env["device"])
    cache = use_cache(args.cache)
    rep = Report(args.out)
    write_json(os.path.join(args.out, "environment.json"), env)
    rep.rows("environment", ["device, versions, commit, date", "command"], [[environment(), env["command"]]])
    if args.part == "all":
        part_all(rep, args)
    else:
        RUNS[args.part](rep, args)
    print(f"rows: {rep.rows_path}; log: {rep.log_path}; caches: {pack_cache(cache, args.out)}")
    return 0


def environment_of(command):
    """Device, versions, commit, date and command of the call (OUT/environment.json)."""
    from bench.bench_step import environment as step_environment
    import torch

    return dict(step_environment(torch.device("cuda" if torch.cuda.is_available() else "cpu")), command=command)


if __name__ == "__main__":
    sys.exit(main())
