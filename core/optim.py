"""AdamW with linear warmup and linear decay (UniLMv2 section 4.1: betas 0.9/0.98, eps 1e-6,
weight decay 0.01 on weight matrices only)."""
import torch


def make_optimizer(model, lr, weight_decay=0.01, betas=(0.9, 0.98), eps=1e-6):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and "rel_table" not in name else no_decay).append(p)
    groups = [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def lr_at(step, peak, warmup, total, final_fraction=0.0):
    """Learning rate for optimizer step `step` (0-based): linear up over `warmup` steps, then
    linear down to final_fraction * peak at `total`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (1.0 - (1.0 - final_fraction) * frac)


def set_lr(optimizer, lr):
    for g in optimizer.param_groups:
        g["lr"] = lr
