"""What the benchmarks share: the device, and a timer that is fair on both kinds of device."""
import statistics
import time

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
