"""Guards that keep a run's files safe and its inputs sane, shared by train.py, finetune.py and
eval.py: every flag checked before any work, the output directory checked before training, a
re-run that would overwrite an earlier one refused, a resume that would silently ignore changed
flags refused, and Ctrl-C / SIGTERM turned into a checkpoint at the last completed step.
"""

import argparse
import math
import os
import signal
import sys
import time

import torch

from .distributed import all_reduce_sum
from .errors import ACTIVE, Interrupted, UserError
from .flags import RunConfig, rules_of

# -----------------------------------------------------------------------------
# flags: parsed, remembered as given, checked


def parse_args(p, argv=None):
    """p.parse_args(argv), every value checked against its flag's rule (core/flags.py): one `error:`
    line naming each flag out of range. The flags as given, frozen (a RunConfig), remembering which
    the command line gave."""
    args = p.parse_args(argv)
    defaults = {a.dest: a.default for a in p._actions}
    for a in p._actions:
        a.default = argparse.SUPPRESS
    try:
        given = set(vars(p.parse_args(argv)))
    finally:
        for a in p._actions:
            a.default = defaults[a.dest]
    check_values(args, rules_of(p))
    return RunConfig(given, **vars(args))


def check_values(args, rules):
    flag = lambda k: "--" + k.replace("_", "-")
    bad = []
    for k, v in vars(args).items():
        rule = rules.get(k)
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v) and not (rule and rule.infinite)):
            bad.append(f"{flag(k)} {v} must be a finite number" + (f" {rule.what}" if rule else ""))
            continue
        if rule is None or v is None:  # None: not given, derived later (from a checkpoint, the encoder)
            continue
        if not rule.test(v):
            bad.append(f"{flag(k)} {v} must be {rule.what}")
    if getattr(args, "min_len", 0) > (getattr(args, "max_len", None) or math.inf):
        bad.append(f"--min-len {args.min_len} is above --max-len {args.max_len}")
    if getattr(args, "device", None) == "cuda" and not torch.cuda.is_available():
        bad.append("--device cuda, but no CUDA GPU is available here (use --device cpu or auto)")
    if bad:
        raise UserError("; ".join(bad))


def refuse_unused(args, applies, notes_to=None):
    """Flags given on the command line that this run would ignore are never dropped without a word.
    `applies` maps a dest to (whether it applies, what it needs[, harmless]). A flag that would
    change what the run means (an architecture, an exit rule, a decoding budget) is refused; one
    marked harmless (a metric's sample size, a length the task does not use) gets a `note:` line
    and the run goes on (on stdout with the run's other notes, or `notes_to`). A flag at its default
    was not given and is never named."""
    given = getattr(args, "given", set())
    unused = [(k, need, rest) for k, (ok, need, *rest) in applies.items() if k in given and not ok]
    bad = [f"--{k.replace('_', '-')} applies only {need}" for k, need, rest in unused if not (rest and rest[0])]
    if bad:
        raise UserError("; ".join(bad) + ": drop " + ("it" if len(bad) == 1 else "them"))
    for k, need, _ in (u for u in unused if u[2] and u[2][0]):
        if int(os.environ.get("RANK", 0)) == 0:
            print(
                f"note: --{k.replace('_', '-')} is not used by this run (it applies only {need})",
                file=notes_to or sys.stdout,
                flush=True,
            )


def check_positions(what, needed, available, fix):
    """A length that would reach past the model's position table, refused before any work."""
    if needed > available:
        raise UserError(f"{what} = {needed} positions, past the model's {available}: {fix}")


# -----------------------------------------------------------------------------
# the output directory

RUN_FILES = ("last.pt", "best.pt", "log.jsonl")


def unwritable(path, flag):
    """Why the file `path` (given by `flag`) cannot be written, or None: checked before the work it
    would hold, so that nothing computed is lost to a bad path. Makes its folder, and leaves no file."""
    if os.path.isdir(path):
        return f"{flag} {path} is a directory: give a file name"
    folder = os.path.dirname(os.path.abspath(path))
    parent = folder
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{flag} {path}: {parent} is a file, not a folder"
    existed = os.path.exists(path)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path, "a"):
            pass
        if not existed:
            os.remove(path)
    except OSError as e:
        return f"{flag} {path} cannot be written ({e.strerror or e})"
    return None


def check_out(out, resume, overwrite, master):
    """Before any work: --out must be a directory this process can create and write. Without
    --resume, a directory that holds an earlier run is refused unless --overwrite, which removes
    that run's log and best.pt (so neither mixes with the new run's)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise UserError(f"--out {out} is a file, not a directory")
    if master:
        try:
            os.makedirs(out, exist_ok=True)
            probe = os.path.join(out, f".write-test{os.getpid()}")
            open(probe, "w").close()
            os.remove(probe)
        except OSError as e:
            raise UserError(f"--out {out} cannot be written ({e.strerror or e})") from None
    if resume:
        return
    earlier = [f for f in RUN_FILES if os.path.exists(os.path.join(out, f))]
    if earlier and not overwrite:
        raise UserError(
            f"--out {out} already holds a run ({', '.join(earlier)}): continue it with --resume, "
            f"replace it with --overwrite, or choose another --out"
        )
    if earlier and master:
        for f in ("best.pt", "log.jsonl"):
            if f in earlier:
                os.remove(os.path.join(out, f))
        print(f"note: --overwrite: replacing the run in {out} ({', '.join(earlier)})", flush=True)


def resume_conflicts(args, saved, resumable):
    """The flags given on this command line that differ from the run being resumed."""
    given = getattr(args, "given", set())
    return [
        f"--{k.replace('_', '-')} {getattr(args, k)} (the run has {saved[k]})"
        for k in sorted(given)
        if k not in resumable and k in saved and saved[k] != getattr(args, k)
    ]


def check_continues(start, steps, stop_after, path, longer):
    """A resumed run must have steps left: --steps / --epochs beyond the checkpoint's step, and a
    --stop-after beyond it too (else nothing would run, and nothing new be saved)."""
    if start >= steps:
        raise UserError(f"{path} is already at step {start} of {steps}: give more {longer} to continue it")
    if stop_after is not None and stop_after <= start:
        raise UserError(f"--stop-after {stop_after} is not beyond the step of {path} ({start})")


def best_on_disk(out, best):
    """The validation loss a resumed run must beat to write over OUT/best.pt: the one best.pt
    records, since that is what it holds (a better run's copied in, say), else the run's own
    `best`. A best.pt that cannot be read is refused, never written over."""
    path = os.path.join(out, "best.pt")
    if not os.path.exists(path):
        return best
    try:
        held = torch.load(path, map_location="cpu", weights_only=True).get("best_valid_loss")
    except Exception as e:  # noqa: BLE001  (not a checkpoint: torch raises many kinds)
        raise UserError(
            f"{path} cannot be read ({type(e).__name__}), so --resume cannot tell whether a "
            f"validation beats it: move it aside, or remove it"
        ) from None
    return held if isinstance(held, (int, float)) and math.isfinite(held) else best


# -----------------------------------------------------------------------------
# Ctrl-C and SIGTERM: finish the step, save, exit


class StopSignals:
    """The context of the training loop (`with StopSignals() as stop:`; `stop.check` after each
    step). The first SIGINT/SIGTERM asks for a stop after the current step; a second one stops at
    once. Every process agrees on the step to stop at (the flag is summed over processes), so no
    rank waits in a collective for one that left. Only rank 0 writes the checkpoint; every process
    exits with status 128 + the signal. Leaving the context puts the previous handlers back."""

    def __init__(self):
        self.signum, self.previous = None, {}

    def __enter__(self):
        # a signal the parent ignores (nohup, a background job) stays ignored
        self.previous = {
            s: signal.signal(s, self.handle)
            for s in (signal.SIGINT, signal.SIGTERM)
            if signal.getsignal(s) is not signal.SIG_IGN
        }
        ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        self.restore()
        return False

    def handle(self, signum, frame):
        # Ctrl-C under torchrun reaches a worker twice at once (from the terminal, and forwarded by
        # torchrun): only a signal a second after the first means "stop now"
        if self.signum is not None:
            if time.time() - self.t > 1.0:
                self.restore()
                raise KeyboardInterrupt
            return
        self.signum, self.t = signum, time.time()

    def restore(self):
        for s, h in self.previous.items():
            signal.signal(s, h)
        if self in ACTIVE:
            ACTIVE.remove(self)

    def check(self, d, done, save, path, sync_point=True):
        """After step `done`: if any process was signalled, save and stop every process. One process
        reads its own flag; several agree on it by an all-reduce, a host sync, made only at the
        loop's `sync_point`s (its logging points): under torchrun a signal stops the run there."""
        if d.world == 1:
            if not self.signum:
                return
        else:
            if not sync_point:
                return
            if all_reduce_sum(torch.tensor([float(self.signum or 0)], device=d.device), d).item() == 0:
                return
        signum = self.signum or signal.SIGTERM
        save(done)
        self.restore()
        name = signal.Signals(signum).name
        raise Interrupted(
            f"stopped by {name} after step {done}; saved {path} (continue with --resume)" if d.master else "",
            128 + signum,
        )
