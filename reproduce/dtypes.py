"""The dtype a run computes in on this machine, and what a time measured in one dtype becomes in
another: a pair's two sides are the same recipe only where they ran in one dtype, and a float32-only
CPU is slower than a bf16 one by the rates the dtype study measured."""

import json
import os

DTYPE_SPEED = "results/studies/dtype.json"  # tokens/s of one CPU training step in each compute dtype


def dtype_slowdown(measured, here):
    """How many times longer a run takes computing in dtype HERE than it took in MEASURED, by the
    training step's rates in DTYPE_SPEED (1 where either is not there: a GPU's, or unknown)."""
    if not measured or not here or measured == here:
        return 1.0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, DTYPE_SPEED)) as f:
        rate = {row["dtype"]: row["rate"] for row in json.load(f)["rows"]}
    return rate[measured] / rate[here] if measured in rate and here in rate else 1.0


def compute_dtype(flag):
    """The dtype the scripts' forward passes ran in on this machine under --dtype FLAG (their default
    auto: bf16 where the CPU has it in hardware, float32 elsewhere): a pair's two sides are the same
    recipe only where they ran in one."""
    import torch
    from core.distributed import resolve_dtype

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return str(resolve_dtype(flag or "auto", device)).replace("torch.", "")
