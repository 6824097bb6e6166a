"""The pieces of the training loop that train.py and finetune.py write out: the parts of an optimizer
step over a list of micro-batches (the loss's normaliser, gradient accumulation under DDP, the step's
statistics summed on the device and read at logging points), a held-out evaluation, and checkpoint
state in and out.

Loss normalisation: every objective returns *sums* over its predicted tokens plus the count to
normalise by. The count is summed over all micro-batches and all processes before the backward
pass, so a step computes the same gradient whatever the number of processes and of
micro-batches: 2 processes x 2 micro-batches == 1 process x 4 micro-batches.
"""

import contextlib
import math
import os
import time

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from . import checkpoint
from .distributed import DTYPES, all_reduce_sum, barrier, print0
from .errors import UserError
from .flags import ABOVE_0, AT_LEAST_0, AT_LEAST_1, FRACTION, SEED, RunConfig, flag
from .guards import check_out, resume_conflicts
from .tokenizer import cached_tokenizer

TOKENIZER_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "cache")


def add_run_flags(p, out, lr, save_every):
    """The flags train.py and finetune.py share: optimizer, dropout, cadence, output, resume, device."""
    flag(p, "--micro-batch", rule=AT_LEAST_1, type=int, default=32, help="examples per forward pass per process")
    flag(p, "--lr", rule=ABOVE_0, type=float, default=lr, help="peak learning rate")
    flag(p, "--weight-decay", rule=AT_LEAST_0, type=float, default=0.01)
    flag(p, "--clip", rule=ABOVE_0, type=float, default=1.0, help="gradient norm clipping")
    flag(
        p,
        "--dropout",
        rule=FRACTION,
        type=float,
        default=0.0,
        help="0 for runs that see the data once or twice (measured for pretraining: docs/design.md); the "
        "papers use "
        "0.1 over many epochs",
    )
    flag(p, "--log-every", rule=AT_LEAST_1, type=int, default=25)
    flag(
        p, "--save-every", rule=AT_LEAST_1, type=int, default=save_every, help="write OUT/last.pt every this many steps"
    )
    flag(
        p,
        "--stop-after",
        rule=AT_LEAST_1,
        type=int,
        default=None,
        help="save and stop after this step, keeping the schedule (continue with --resume)",
    )
    flag(p, "--out", default=out, help="directory for last.pt, config.json, log.jsonl")
    flag(p, "--resume", action="store_true", help="continue exactly from OUT/last.pt")
    flag(p, "--overwrite", action="store_true", help="replace the run already in OUT (without it, refused)")
    flag(p, "--seed", rule=SEED, type=int, default=1234)
    flag(p, "--device", default="auto", choices=["auto", "cpu", "cuda"])
    flag(
        p,
        "--attention",
        default="auto",
        choices=ATTENTION,
        help="the attention's implementation: auto (our Triton kernel on CUDA, the PyTorch reference "
        "elsewhere), or PyTorch's SDPA with a dense mask built once per step, or FlexAttention "
        "(kernels/baselines.py); the same model and result, another speed (docs/kernels.md)",
    )
    flag(
        p,
        "--compile",
        default="auto",
        choices=COMPILE,
        help="torch.compile the model for the training steps (its backward compiled with it; evaluation "
        "stays eager): auto = on on CUDA, off on a CPU, where the eager step's logs are the ones "
        "recorded (compiled code sums in another order; `python -m bench.bench_step --methods "
        "reference,reference:compiled` times the two)",
    )
    add_dtype_flag(p)


def add_dtype_flag(p):
    flag(
        p,
        "--dtype",
        default="auto",
        choices=DTYPES,
        help="compute dtype of forward passes: auto = bf16 autocast on CUDA and on CPUs with native bf16 "
        "(AVX512-BF16 or AMX), float32 elsewhere",
    )


ATTENTION = ("auto", "triton", "reference", "sdpa", "flex")
COMPILE = ("auto", "on", "off")


def attention_choice(args, d):
    """The context under which every attention of the run uses --attention's implementation."""
    import kernels

    if args.attention == "triton" and d.device.type != "cuda" and not os.environ.get("TRITON_INTERPRET"):
        raise UserError(
            "--attention triton runs on CUDA (on a CPU only under TRITON_INTERPRET=1, for tests); "
            "use auto or reference here"
        )
    return kernels.use_backend(args.attention)


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
    """(config, state or None, path of OUT/last.pt). OUT is checked before any work (see
    guards.check_out). With --resume the checkpoint's flags win, except the `resumable` ones that
    a user may change (more steps, another log cadence); any other flag given with a different
    value is refused, with the list of conflicts."""
    check_out(args.out, args.resume, args.overwrite, d.master)
    path = os.path.join(args.out, "last.pt")
    if not args.resume:
        return args, None, path
    state = checkpoint.load(path, kinds=kinds, need=("step", "optimizer", "rng"))
    saved = checkpoint.upgrade_args(state)
    # an input file named elsewhere (a moved folder) with the same bytes is the same input
    moved = [
        k
        for k in checkpoint.PATH_FLAGS
        if k in saved
        and getattr(args, k, None) not in (None, saved[k])
        and checkpoint.digest(getattr(args, k)) == state.get("digests", {}).get(k, "none")
    ]
    conflicts = resume_conflicts(args, saved, tuple(resumable) + tuple(moved))
    if conflicts:
        raise UserError(
            f"--resume continues {path} with its own flags, but this command changes "
            f"{'; '.join(conflicts)}: drop them, or start a new run with another --out"
        )
    for k, v in vars(args).items():
        if k in resumable or k in moved or k not in saved or k == "overwrite":
            saved[k] = v
    print0(d, f"resuming from {path} at step {state['step']}")
    return RunConfig(**saved), state, path


def run_digests(args, state):
    """The digests of the run's input files: taken when it started, kept by its checkpoints."""
    if state is not None and "digests" in state:
        return dict(state["digests"])
    return checkpoint.digests_of(vars(args))


def check_finite(skipped, first, done, save, path):
    """Stop when a step since the last logging point had a non-finite loss or gradient. The loop
    applied none of those (StepSums' 'skipped' is the optimizer's found_inf), so the weights are those
    of the good steps: they are saved at `done` (never poisoned ones) and the message names the first
    bad step and the file."""
    if skipped:
        save(done)
        raise UserError(
            f"the loss or gradient became non-finite at step {first + 1}"
            + (f" and {skipped - 1} later step(s)" if skipped > 1 else "")
            + f"; those steps were not applied, and the state after step {done} (its other steps "
            f"applied) is in {path}"
        )


def autocast(device, dtype):
    """The region of forward passes: autocast to `dtype` (bf16) on `device`, or plain float32.
    Parameters, optimizer state and the loss reductions stay float32 either way."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def compiles(choice, d):
    """Whether --compile `choice` puts the training steps' model under torch.compile."""
    return choice == "on" or (choice == "auto" and d.device.type == "cuda")


def compiled(ddp_model, choice, d):
    """The model the training steps call: `ddp_model` itself, or under --compile `choice` torch.compile of it, whose
    graph the loss functions call in place of its forward. Our attention is a custom operator there
    (kernels/attention_op.py), so a PMLM, seq2seq or ELMER forward is one graph (tests/test_step_syncs.py);
    ELMER's counts of active tokens are traced as symbols (capture_dynamic_output_shape_ops), not read.
    The raw model stays what is saved and evaluated."""
    return compile_model(ddp_model) if compiles(choice, d) else ddp_model


def compile_model(module, **options):
    """torch.compile(module, **options) as the training steps compile: counts of active tokens (ELMER)
    traced as symbols rather than breaking the graph."""
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch._dynamo.config.capture_scalar_outputs = True
    return torch.compile(module, **options)


def wrap_ddp(model, d):
    """DistributedDataParallel over `model`. A model that keeps parameters some steps never use (a
    classifier's unused LM head or decoder, ELMER's separate off-ramps) says so with
    `unused_parameters = True`, and DDP then looks for them after every backward pass."""
    if d.world == 1:
        return model
    return DDP(
        model,
        device_ids=[d.device.index] if d.device.type == "cuda" else None,
        find_unused_parameters=getattr(model, "unused_parameters", False),
    )


def host_scalar(value, d):
    """A float as a 1-element tensor on the device without a host sync: through pinned memory and a
    non-blocking copy on CUDA."""
    t = torch.tensor([float(value)])
    if d.device.type != "cuda":
        return t
    return t.pin_memory().to(d.device, non_blocking=True)


class StepStats:
    """What the loop reads of its steps, kept on the device between logging points: the last
    step's summed statistics, and how many steps since the last read had a non-finite loss or
    gradient (not applied) and the first of them. `read` is the one host sync of a logging point."""

    def __init__(self):
        self.last, self.skipped, self.first_skipped = None, None, None

    def add(self, stats, step):
        self.last = stats
        bad = stats["skipped"]
        if self.skipped is None:
            self.skipped, self.first_skipped = bad.clone(), torch.where(bad > 0, step, -1)
        else:
            self.first_skipped = torch.where((self.first_skipped < 0) & (bad > 0), step, self.first_skipped)
            self.skipped += bad

    def read(self):
        """(the last step's statistics as floats, steps skipped since the last read, the first of them)."""
        keys = self.last["keys"]
        flat = torch.cat(
            [
                self.last["sums"],
                self.last["grad_norm"].reshape(1).float(),
                self.skipped.reshape(1).float(),
                self.first_skipped.reshape(1).float(),
            ]
        ).tolist()
        stats = dict(zip(keys, flat[: len(keys)]), grad_norm=flat[-3], lr=self.last["lr"])
        skipped, first = int(flat[-2]), int(flat[-1])
        self.skipped = self.first_skipped = None
        return stats, skipped, first


# -----------------------------------------------------------------------------
# the parts of an optimizer step that train.py and finetune.py write out


def dropout_seed(seed, step, d):
    """The seed of the global generator (dropout's) for step `step` on this process: seeded per (step,
    rank), a resumed run replays exactly what the uninterrupted one would have done."""
    return seed * 1_000_003 + step * d.world + d.rank


def loss_norm(micro_batches, d):
    """What every micro-batch's summed loss is divided by: the count of the step's targets (each batch's
    `norm`) over its micro-batches and processes, at least 1. A host number on one process, a device
    tensor on several (summed with no host sync)."""
    norm = float(sum(b.norm for b in micro_batches))
    if d.world > 1:
        norm = all_reduce_sum(host_scalar(norm, d), d)
    return norm.clamp_min(1.0) if torch.is_tensor(norm) else max(norm, 1.0)


def accumulating(ddp_model, d, last):
    """The context of one micro-batch's forward and backward: under DDP the gradients are all-reduced
    after the step's last micro-batch only (no_sync before it)."""
    return contextlib.nullcontext() if (last or d.world == 1) else ddp_model.no_sync()


class StepSums:
    """A step's statistics, summed on the device over its micro-batches (`add`) and then over the
    processes (`total`), with no host sync."""

    def __init__(self):
        self.totals, self.tokens = {}, 0

    def add(self, sums, n_tokens):
        """One micro-batch's loss_sums(model, batch) and its count of input tokens."""
        for k, v in sums.items():
            self.totals[k] = self.totals[k] + v.detach().float() if k in self.totals else v.detach().float()
        self.tokens += n_tokens

    def total(self, norm, grad_norm, lr, d):
        """The step's statistics, on the device: 'sums' (in the order of 'keys', with 'tokens' and 'norm')
        summed over the processes, 'grad_norm', 'skipped' (1 where the loss or the gradient is not finite:
        the same on every process after the reductions), with the host's 'lr' and 'tokens' (this process's
        input tokens times the processes, for the progress line's rate; the exact sum is in 'sums')."""
        totals = dict(
            self.totals,
            tokens=host_scalar(self.tokens, d),
            norm=norm if torch.is_tensor(norm) else host_scalar(norm, d),
        )
        keys = sorted(totals)
        sums = all_reduce_sum(torch.stack([totals[k].reshape(()).float() for k in keys if k not in ("norm",)]), d)
        keys = [k for k in keys if k != "norm"] + ["norm"]  # norm is already the sum over processes
        sums = torch.cat([sums, totals["norm"].reshape(1).float()])
        skipped = (~torch.isfinite(sums).all() | ~torch.isfinite(grad_norm)).float()
        return dict(
            keys=keys, sums=sums, grad_norm=grad_norm.detach(), skipped=skipped, lr=lr, tokens=self.tokens * d.world
        )


def read_point(done, end, *every):
    """Whether step `done` is a logging, evaluation or saving point (every k of `every`) or the last:
    where the loop reads the statistics from the device (its one host sync)."""
    return done == end or any(done % k == 0 for k in every)


def per_token(sums):
    """Per-token loss and accuracy of each part an objective reports: PMLM's ae_/par_ sums (and
    ae_hidden_/par_hidden_: the targets not in view, core/unilm/pmlm.py), or one loss/hit/n (T5), its
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


class EarlyStop:
    """Early stopping on a validation loss: `update(loss)` says whether it is the lowest yet; `stop`
    turns True after `patience` updates in a row without a new lowest (never with patience 0)."""

    def __init__(self, patience, best=None, since_best=0):
        self.patience, self.best, self.since_best = patience, best, since_best

    def update(self, loss):
        if not math.isfinite(loss):  # a NaN validation is never the lowest, and never the bar
            self.since_best += 1
            return False
        if self.best is None or loss < self.best:
            self.best, self.since_best = loss, 0
            return True
        self.since_best += 1
        return False

    @property
    def stop(self):
        return bool(self.patience) and self.since_best >= self.patience


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
