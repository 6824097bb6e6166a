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
