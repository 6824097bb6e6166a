"""The equal-work rules of bench/bench_attention.py: one timing function for every method, each
method's setup charged once per training step, the same gradients asked of each, and the backend
that ran named by its kernels.

A Method is what a model would run in one attention layer, split where a training step splits it:

  setup(table, q, k, v)  built once per step for all the step's layers (our codes, tile map and
                         bias row; SDPA's dense bias + mask; Flex's block mask and bias row);
  call(state, q, k, v)   one layer's attention, run n_layers times a step;
  reduce(state)          the part of the bias gradient's way back that a step runs once, after its
                         layers: the layers' summed gradient of the dense mask (SDPA) or of the
                         (H, 2M+1) bias row (ours, Flex) gathered back into the table; None where
                         there is no bias (SDPA without a mask).

charge() times the call (forward; forward+backward), the setup and the reduce with one function,
and gives each layer its share of the step's setup: layer = call + (setup + reduce) / n_layers.
The gradients asked are those of q, k, v, and of the relative bias table wherever the method has
it as a trainable input (`bias_grad`), so no method skips work another does.
"""

import sys
from typing import Callable, NamedTuple, Optional

if __name__ == "__main__" and not __package__:  # a module the benchmarks import
    sys.exit(
        "error: bench/attention_harness.py is a module the benchmarks import, with nothing to run: "
        "run one of them, as python -m bench.bench_step (--help)"
    )

import torch


class Method(NamedTuple):
    label: str
    setup: Callable  # (table, q, k, v) -> state
    call: Callable  # (state, q, k, v) -> out
    reduce: Optional[Callable] = None  # state -> None: the once-a-step part of the bias backward
    bias_grad: bool = True  # the table's gradient is computed (False: a constant bias, or none)


def timer(smoke):
    """time(fn, reset) -> ms for every method: triton's do_bench on a GPU (CUDA events, the L2 cache
    flushed before each run, the median; `reset` tensors' gradients set to None before each run), or
    one wall-clock run after a warm-up on the CPU (--smoke: the plumbing, not a measurement)."""
    if smoke:
        import time

        def once(fn, reset=()):
            for _ in range(2):
                for x in reset:
                    x.grad = None
                t0 = time.perf_counter()
                fn()
            return 1e3 * (time.perf_counter() - t0)

        return once
    from triton.testing import do_bench

    def events(fn, reset=()):
        return do_bench(fn, grad_to_none=list(reset), return_mode="median")

    return events


def charge(method, leaves, table, dout, time_fn, n_layers):
    """A method's times (ms) and its per-layer charge. leaves: q, k, v as the model makes them (the
    tensors that get gradients); the call gets their (B, H, L, D) views."""
    q, k, v = (x.transpose(1, 2) for x in leaves)
    reset = list(leaves) + [table]
    state = method.setup(table, q, k, v)
    fwd = time_fn(lambda: method.call(state, q, k, v), reset)

    def both():
        method.call(state, q, k, v).backward(dout)

    fwdbwd = time_fn(both, reset)
    setup = time_fn(lambda: method.setup(table, q, k, v), reset)
    reduce = 0.0
    if method.reduce is not None:
        both()  # the state's dense gradient, as after a step's layers
        reduce = time_fn(lambda: method.reduce(state), [table])
    out = dict(
        fwd_ms=fwd,
        fwdbwd_ms=fwdbwd,
        setup_ms=setup,
        reduce_ms=reduce,
        bias_grad=method.bias_grad,
        layer_fwd_ms=fwd + setup / n_layers,
        layer_fwdbwd_ms=fwdbwd + (setup + reduce) / n_layers,
    )
    return out


def kernel_names(fn, top=4):
    """The kernels one run of fn launched, by device time, most first (the backend that ran, by
    name): CUDA kernels on a GPU; on the CPU, the aten operators whose name says attention."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        if cuda:
            t = getattr(e, "self_device_time_total", None)
            t = getattr(e, "self_cuda_time_total", 0) if t is None else t
            if t > 0 and str(getattr(e, "device_type", "")).endswith("CUDA"):
                rows.append((t, e.key))
        elif "attention" in e.key or "flex" in e.key:
            rows.append((e.self_cpu_time_total, e.key))
    return [name for _, name in sorted(rows, reverse=True)[:top]]


def fused_flex(names):
    """Whether FlexAttention ran as its fused Triton kernel (inductor names it flex_attention in the
    kernel's name) rather than as the unfused eager fallback (a matmul, a softmax, a matmul)."""
    return any("flex" in n and ("triton" in n or "tem" in n) for n in names)
