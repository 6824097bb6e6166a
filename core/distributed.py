"""One code path for 1 and N processes: `python train.py` and `torchrun ... train.py` alike.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK (and handles multi-node rendezvous); without them
this is a single process. NCCL on CUDA, gloo on CPU. Only rank 0 prints and writes.
"""

import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .errors import UserError


@dataclass
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    dtype: torch.dtype = torch.float32  # of the autocast region around forward passes (core.training.autocast)

    @property
    def master(self):
        return self.rank == 0


def compute_init(device_flag="auto", dtype_flag="float32"):
    """Initialise the process group when launched by torchrun; pick the device and the compute
    dtype (`--dtype`, resolved by resolve_dtype)."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device_flag == "auto":
        device_flag = "cuda" if torch.cuda.is_available() else "cpu"
    if device_flag == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise UserError(
                f"process {rank} has local rank {local_rank}, but this machine has "
                f"{torch.cuda.device_count()} GPU(s): start at most that many processes per "
                f"machine (--nproc_per_node), or use --device cpu"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device(device_flag)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        if device.type == "cpu":  # share the cores between the processes instead of oversubscribing
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", world))))
    return Dist(rank, world, local_rank, device, resolve_dtype(dtype_flag, device))


DTYPES = ("auto", "float32", "bfloat16")


def native_bf16_cpu():
    """Whether this CPU has bf16 arithmetic in hardware (AVX512-BF16 or AMX): without it, bf16
    matrix products are emulated and slower than float32 (bench/bench_dtype.py measures both)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_device(flag):
    """`--device auto`: CUDA where there is one, else the CPU; any other value as torch names it."""
    if flag == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(flag)


def resolve_dtype(flag, device):
    """`--dtype auto`: bf16 autocast on CUDA and on CPUs with native bf16 (measured 1.75x the
    tokens/s of float32 there), float32 elsewhere."""
    if flag == "auto":
        return torch.bfloat16 if device.type == "cuda" or native_bf16_cpu() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[flag]


def compute_cleanup():
    """Tear the process group down. After a normal finish the ranks first meet at a barrier: with
    gloo, a rank that destroys the group while another still works (rank 0 writing the last
    checkpoint) can abort with "terminate called without an active exception". While an exception
    propagates there is no barrier, since the other ranks may never reach it. A rank other than 0
    that stops on an error of its own (a data file only it cannot read) keeps the group open: rank
    0, waiting for it in a collective, stays there until this rank has printed its `error:` line
    (errors.main_guard) and exited, instead of failing first with a bare "Connection closed by
    peer" that torchrun would report while this rank's line was still unprinted."""
    if dist.is_initialized():
        if sys.exc_info()[0] is None:
            dist.barrier()
        elif dist.get_rank() > 0:
            return
        dist.destroy_process_group()


def all_reduce_sum(t, d: Dist):
    """Sum a tensor over processes (in place, returned)."""
    if d.world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(d: Dist):
    if d.world > 1:
        dist.barrier()


def print0(d: Dist, *args, **kwargs):
    if d.master:
        print(*args, **kwargs, flush=True)
