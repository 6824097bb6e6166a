"""The optimizer step that train.py and finetune.py write out in their loops, as one call: for the
benchmarks that time a step (bench_step.py, profile_step.py) and the tests that hold a step to its
properties (no host sync between logging points, each weight cast to bf16 once, a non-finite step
not applied). Its statements from set_lr to zero_grad are the scripts' (tests/test_step_syncs.py)."""

import sys

if __name__ == "__main__" and not __package__:  # a module the benchmarks import, not a script
    sys.exit(
        "error: bench/step.py is the training step the benchmarks time, not a script; to time a training "
        "step with each attention, run python -m bench.bench_step (--help)"
    )

import torch

from core.optim import set_lr
from core.training import StepSums, accumulating, autocast, dropout_seed, loss_norm


def train_step(step_model, model, optimizer, micro, loss_sums, d, *, step, lr, seed=0, clip=1.0):
    """Step `step` over this process's micro-batches `micro` at learning rate `lr`: forward and backward
    through `step_model` (the model, its DDP wrapper or its compiled graph), the gradient of `model`
    clipped to `clip`, AdamW's step (skipped on the device where the loss or the gradient is not
    finite). Returns the step's statistics, on the device (core/training.StepSums.total)."""
    set_lr(optimizer, lr)
    torch.manual_seed(dropout_seed(seed, step, d))
    norm, sums = loss_norm(micro, d), StepSums()
    with autocast(d.device, d.dtype):
        for j, batch in enumerate(micro):
            with accumulating(step_model, d, last=j == len(micro) - 1):
                out = loss_sums(step_model, batch.to(d.device))
                with torch.autocast(d.device.type, enabled=False):
                    (out["loss"] * (d.world / norm)).backward()
            sums.add(out, batch.n_tokens)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    stats = sums.total(norm, grad_norm, lr, d)
    optimizer.found_inf = stats["skipped"]
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return stats
