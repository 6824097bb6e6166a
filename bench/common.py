"""What the benchmarks share: the device, and a timer that is fair on both kinds of device."""

import os
import statistics
import sys
import time

if __name__ == "__main__" and not __package__:  # a module the benchmarks import
    sys.exit(
        "error: bench/common.py is a module the benchmarks import, with nothing to run: "
        "run one of them, as python -m bench.bench_step (--help)"
    )

import torch

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"


def bench(fn, reps):
    """Median milliseconds of fn(): on CUDA triton's do_bench (it synchronises and flushes L2),
    on a CPU the median of `reps` runs after one warm-up."""
    if CUDA:
        from triton.testing import do_bench

        return do_bench(fn, warmup=25, rep=100)
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def check_flags(p, args, positive=(), at_least=None, outputs=("json",), inputs=(), device="device"):
    """Every bench script's flags checked before it measures anything, each refused in one line
    (p.error: exit 2): the integer flags `positive` at least 1 (a list flag every value of it), or
    at least `at_least[name]`; the files `outputs` writable (core.guards.unwritable), the files
    `inputs` present; `--device cuda` only where torch has CUDA."""
    from core.guards import unwritable

    flag = lambda n: "--" + n.replace("_", "-")  # noqa: E731
    lows = dict({name: 1 for name in positive}, **(at_least or {}))
    for name, low in lows.items():
        for v in getattr(args, name) if isinstance(getattr(args, name), list) else [getattr(args, name)]:
            if v is not None and v < low:
                p.error(f"{flag(name)} {v}: must be at least {low}")
    for name in outputs:
        path = getattr(args, name, None)
        if path and unwritable(path, flag(name)):
            p.error(unwritable(path, flag(name)))
    for name in inputs:
        path = getattr(args, name, None)
        if path and not os.path.isfile(path):
            p.error(f"{flag(name)} {path}: no such file")
    if getattr(args, device, None) == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch has no CUDA device (a CPU build, or no GPU here)")


def precision(args, device):
    """bf16 autocast on CUDA (what eval.py's --dtype auto runs there) unless --dtype float32."""
    import contextlib

    if device.type == "cuda" and args.dtype == "bfloat16":
        return torch.autocast("cuda", torch.bfloat16)
    return contextlib.nullcontext()


def write_json(path, out):
    """`out` to `path` as JSON, whole or not at all: a benchmark writes it after each part, so that a
    run cut short keeps what it finished."""
    import json

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
    os.replace(path + ".tmp", path)


def attention_backend(method, kernels):
    """What ran a method's attention, in words, read off the names of the kernels (or, on a CPU,
    operators) a step ran. SDPA picks its kernel itself: with a mask that needs a gradient, cuDNN
    and flash refuse it and PyTorch's memory-efficient (CUTLASS, sm80) kernels run."""
    names = " ".join(kernels).lower()
    if method.startswith("ours"):
        return "ours (Triton)"
    if method.startswith("reference"):
        return "reference (PyTorch operators)"
    if method.startswith("flex"):
        return (
            "FlexAttention, fused (Triton)"
            if "flex" in names and ("triton" in names or "tem" in names)
            else "FlexAttention, unfused or not found"
        )
    found = [
        label
        for key, label in (
            ("cutlass", "memory-efficient (CUTLASS)"),
            ("efficient_attention", "memory-efficient"),
            ("cudnn", "cuDNN"),
            ("flash_attention_for_cpu", "CPU flash"),
            ("flash", "flash"),
            ("math", "math"),
        )
        if key in names
    ]
    return "SDPA, " + (found[0] if found else "kernel not among the top ones")
