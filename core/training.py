"""The pieces of a training loop that train.py and finetune.py share: one optimizer step over a
list of micro-batches, a held-out evaluation, and checkpoint state in and out.

Loss normalisation: every objective returns *sums* over its predicted tokens plus the count to
normalise by. The count is summed over all micro-batches and all processes before the backward
pass, so a step computes the same gradient whatever the number of processes and of
micro-batches: 2 processes x 2 micro-batches == 1 process x 4 micro-batches.
"""
import argparse
import contextlib
import math
import os
import time

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from . import checkpoint
from .distributed import DTYPES, all_reduce_sum, barrier, print0
from .errors import UserError
from .guards import check_out, resume_conflicts
from .optim import lr_at, set_lr
from .tokenizer import cached_tokenizer

TOKENIZER_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "cache")


def add_run_flags(p, out, lr, save_every):
    """The flags train.py and finetune.py share: optimizer, dropout, cadence, output, resume, device."""
    p.add_argument("--micro-batch", type=int, default=32, help="examples per forward pass per process")
    p.add_argument("--lr", type=float, default=lr, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipping")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="0 for runs that see the data once or twice (measured for pretraining, README); the papers use 0.1 over many epochs")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--save-every", type=int, default=save_every, help="write OUT/last.pt every this many steps")
    p.add_argument("--stop-after", type=int, default=None,
                   help="save and stop after this step, keeping the schedule (continue with --resume)")
    p.add_argument("--out", default=out, help="directory for last.pt, config.json, log.jsonl")
    p.add_argument("--resume", action="store_true", help="continue exactly from OUT/last.pt")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in OUT (without it, refused)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    add_dtype_flag(p)


def add_dtype_flag(p):
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="compute dtype of forward passes: auto = bf16 autocast on CUDA and on CPUs with native bf16 "
                        "(AVX512-BF16 or AMX), float32 elsewhere")


def corpus_tokenizer(texts, vocab_size, d):
    """The SentencePiece model of `texts`, trained once by rank 0 and cached under data/cache;
    the other processes load the cached file after a barrier."""
    if d.master:
        t0 = time.time()
        tok, path = cached_tokenizer(texts, vocab_size, TOKENIZER_CACHE, say=lambda msg: print0(d, msg))
        print0(d, f"tokenizer: {path} ({tok.vocab_size} pieces, {time.time() - t0:.1f}s)")
    barrier(d)
    if not d.master:
        tok, _ = cached_tokenizer(texts, vocab_size, TOKENIZER_CACHE)
    return tok


def start_or_resume(args, kinds, resumable, d):
    """(args, state or None, path of OUT/last.pt). OUT is checked before any work (see
    guards.check_out). With --resume the checkpoint's flags win, except the `resumable` ones that
    a user may change (more steps, another log cadence); any other flag given with a different
    value is refused, with the list of conflicts."""
    check_out(args.out, args.resume, args.overwrite, d.master)
    path = os.path.join(args.out, "last.pt")
    if not args.resume:
        return args, None, path
    state = checkpoint.load(path, kinds=kinds, need=("step", "optimizer", "rng"))
    saved = dict(state["args"])
    conflicts = resume_conflicts(args, saved, resumable)
    if conflicts:
        raise UserError(f"--resume continues {path} with its own flags, but this command changes "
                        f"{'; '.join(conflicts)}: drop them, or start a new run with another --out")
    for k, v in vars(args).items():
        if k in resumable or k not in saved or k == "overwrite":
            saved[k] = v
    print0(d, f"resuming from {path} at step {state['step']}")
    return argparse.Namespace(**saved), state, path


def check_finite(loss, step, save, path):
    """Stop when the loss is no longer a number. train_step has not applied such a step, so the
    weights are still those after `step` good steps: they are saved (never the poisoned ones) and
    the message names the file that holds them."""
    if not math.isfinite(loss):
        save(step)
        raise UserError(f"loss became {loss} at step {step + 1}; that step was not applied, and the last good "
                        f"state (after step {step}) is in {path}")


def autocast(device, dtype):
    """The region of forward passes: autocast to `dtype` (bf16) on `device`, or plain float32.
    Parameters, optimizer state and the loss reductions stay float32 either way."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def wrap_ddp(model, d):
    """DistributedDataParallel over `model`. A model that keeps parameters some steps never use (a
    classifier's unused LM head or decoder, ELMER's separate off-ramps) says so with
    `unused_parameters = True`, and DDP then looks for them after every backward pass."""
    if d.world == 1:
        return model
    return DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None,
               find_unused_parameters=getattr(model, "unused_parameters", False))


def train_step(ddp_model, raw_model, optimizer, micro_batches, loss_sums, d, args, step):
    """One optimizer step. loss_sums(model, batch) -> dict of summed statistics with a 'loss'
    (differentiable sum); each batch's `norm` is the count it is divided by, summed over the
    micro-batches and processes. Returns the statistics summed over micro-batches and processes,
    plus 'norm', 'tokens' (input tokens processed), 'lr' and 'grad_norm'."""
    lr = lr_at(step, args.lr, args.warmup, args.steps)
    set_lr(optimizer, lr)
    # dropout draws from the global generator: seeding it per (step, rank) makes a resumed run
    # replay exactly what the uninterrupted one would have done
    torch.manual_seed(args.seed * 1_000_003 + step * d.world + d.rank)
    norm = all_reduce_sum(torch.tensor(float(sum(b.norm for b in micro_batches)), device=d.device), d)
    norm = norm.clamp_min(1.0)
    totals = {}
    for j, batch in enumerate(micro_batches):
        last = j == len(micro_batches) - 1
        sync = contextlib.nullcontext() if (last or d.world == 1) else ddp_model.no_sync()
        with sync:
            with autocast(d.device, d.dtype):
                sums = loss_sums(ddp_model, batch.to(d.device))
            # DDP averages gradients over processes; multiplying by world turns that into a sum
            (sums["loss"] * (d.world / norm)).backward()
        for k, v in sums.items():
            totals[k] = totals.get(k, 0.0) + v.detach().float()
        totals["tokens"] = totals.get("tokens", 0.0) + torch.tensor(float(batch.n_tokens), device=d.device)
    grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), args.clip)
    stats = reduce_stats(totals, d)
    # a non-finite loss or gradient (the same on every process after the reductions) is never
    # applied: the weights stay good for check_finite to save
    if all(math.isfinite(v) for v in stats.values()) and math.isfinite(float(grad_norm)):
        optimizer.step()
    else:
        stats["loss"] = stats["nll"] = float("nan")
    optimizer.zero_grad(set_to_none=True)
    stats["norm"] = float(norm)
    stats["lr"] = lr
    stats["grad_norm"] = float(grad_norm)
    return stats


def per_token(sums):
    """Per-token loss and accuracy of each part an objective reports: PMLM's ae_/par_ sums (and
    ae_hidden_/par_hidden_: the targets not in view, core/pmlm.py), or one loss/hit/n (T5), its
    text tokens' text_ sums, and a length predictor's len_ sums (per target: T5-NAR)."""
    out = {}
    for prefix in ("ae_", "par_", "ae_hidden_", "par_hidden_", "", "text_", "len_"):
        n = sums.get(prefix + "n", 0)
        if n:
            out[prefix + "loss"] = sums[prefix + "loss"] / n
            out[prefix + "acc"] = sums[prefix + "hit"] / n
    return out


def reduce_stats(totals, d):
    """Sum a dict of scalar tensors over processes in one all-reduce; return floats."""
    keys = sorted(totals)
    if not keys:
        return {}
    flat = all_reduce_sum(torch.stack([torch.as_tensor(totals[k], device=d.device).float() for k in keys]), d)
    return dict(zip(keys, flat.tolist()))


@torch.no_grad()
def evaluate(model, batches, loss_sums, d):
    """Summed statistics of loss_sums over this process's share of the held-out batches."""
    was_training = model.training
    model.eval()
    totals = {}
    for batch in batches:
        with autocast(d.device, d.dtype):
            sums = loss_sums(model, batch.to(d.device))
        for k, v in sums.items():
            totals[k] = totals.get(k, 0.0) + v.detach().float()
    model.train(was_training)
    return reduce_stats(totals, d)


# -----------------------------------------------------------------------------
# checkpoint state

def rng_state():
    """The generator states. Data and masking draw from per-example generators and dropout is
    reseeded every step, so these are kept for inspection and for code that draws elsewhere."""
    state = dict(torch=torch.get_rng_state())
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state):
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class Throughput:
    """Tokens per second over the steps since the last report."""

    def __init__(self):
        self.t, self.tokens = time.time(), 0.0

    def add(self, n):
        self.tokens += n

    def rate(self):
        now = time.time()
        r = self.tokens / max(1e-9, now - self.t)
        self.t, self.tokens = now, 0.0
        return r
