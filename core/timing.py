"""Wall-clock timing that is fair on both kinds of device: eval.py's latency and throughput, and
the benchmarks that time whole decode paths."""

import time

import torch


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device, fn):
    """Seconds that fn() takes, with the device synchronised before both clock reads (a CUDA
    launch returns before the work is done)."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def speed(device, run_batch, sources, batch_size, latency_samples):
    """(ms per sample at batch size 1, samples/s at batch_size), warm-up excluded: each timed
    sample runs once before the clock (a fixed-shape decoder captures a graph per source length)."""
    one = sources[: max(1, latency_samples)]
    for s in one:  # warm-up
        run_batch([s])
    latency = sum(clock(device, lambda s=s: run_batch([s])) for s in one) / len(one)
    big = (sources * (1 + batch_size // max(1, len(sources))))[:batch_size]
    run_batch(big)  # warm-up
    throughput = len(big) / clock(device, lambda: run_batch(big))
    return 1000 * latency, throughput
