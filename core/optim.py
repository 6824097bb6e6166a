"""AdamW (UniLMv2 section 4.1: betas 0.9/0.98, eps 1e-6, weight decay 0.01 on weight matrices
only) and the learning-rate schedules: linear warmup, then linear decay (UniLMv2's pretraining and
fine-tuning) or inverse square root decay (MLAE's fine-tuning, its Tables 11 and 12)."""

import torch


def make_optimizer(model, lr, weight_decay=0.01, betas=(0.9, 0.98), eps=1e-6):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and "rel_table" not in name else no_decay).append(p)
    groups = [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]
    # fused: one kernel for the whole update, and a step whose `found_inf` is set is skipped on the
    # device (training.train_step), with no host read of the loss
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)


LR_SCHEDULES = ("linear", "inverse-sqrt")


def lr_at(step, peak, warmup, total, schedule="linear"):
    """Learning rate for optimizer step `step` (0-based): linear up over `warmup` steps, then
    linear down to 0 at `total`, or (inverse-sqrt) peak * sqrt(warmup / (step + 1)), which does not
    depend on `total`: a run stopped early on validation has followed the same curve as a longer
    one up to there."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "inverse-sqrt":
        return peak * (max(1, warmup) / (step + 1)) ** 0.5
    if schedule != "linear":
        raise ValueError(f"unknown schedule {schedule!r}; pick one of {LR_SCHEDULES}")
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (1.0 - frac)


def set_lr(optimizer, lr):
    for g in optimizer.param_groups:
        g["lr"] = lr
