"""What reproduce/runner.py knows of its runs: OUT/state.json (each run's command, measured time and
status, shared by runners under a lock), the per-run locks, and how far each run has got from
its own files."""

import contextlib
import fcntl
import glob
import json
import os
import sys
import time

from reproduce.dtypes import compute_dtype, dtype_slowdown
from reproduce.plan import BY_NAME, epochs_of, needs_of, steps_of
from reproduce.staleness import checkpoint_lineage, command, stale_reason, what_it_ran


class StateError(Exception):
    """OUT/state.json cannot be read as the runner wrote it (garbage, empty, hand-edited)."""


def load_state(out):
    """OUT/state.json, checked: a file that is not what the runner writes is refused with its path
    and what is wrong, and left as it is (nothing the runs saved depends on it but the time
    estimates and which eval files are whose)."""
    path = os.path.join(out, "state.json")
    if not os.path.exists(path):
        return dict(runs={})
    try:
        with open(path) as f:
            state = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StateError(
            f"{path} is not readable JSON ({e}); move it aside (the runs' checkpoints and results "
            f"stay; the next sitting rebuilds it, losing only the measured times)"
        ) from None
    bad = None
    if not isinstance(state, dict) or not isinstance(state.get("runs", {}), dict):
        bad = "not an object with a 'runs' object"
    else:
        state.setdefault("runs", {})
        for name, rec in state["runs"].items():
            if not isinstance(rec, dict):
                bad = f"run {name!r} is not an object"
            elif (
                not isinstance(rec.get("seconds", 0.0), (int, float))
                or not isinstance(rec.get("files", []), list)
                or not isinstance(rec.get("status", ""), str)
                or not isinstance(rec.get("command", ""), str)
            ):
                bad = f"run {name!r} has a field of the wrong type"
            if bad:
                break
    if bad:
        raise StateError(
            f"{path}: {bad}; move it aside (the runs' checkpoints and results stay; the next "
            f"sitting rebuilds it, losing only the measured times)"
        )
    return state


def save_state(out, state):
    path = os.path.join(out, "state.json")
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=1)
    os.replace(path + ".tmp", path)


@contextlib.contextmanager
def locked_state(out):
    """state.json as it is on disk now, saved back on leaving, with no other runner in between:
    two runners sharing OUT each update only their own runs' records."""
    with open(os.path.join(out, "state.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state(out)
        yield state
        save_state(out, state)


def claim(out, name):
    """An exclusive lock on run NAME for this process (None if another runner holds it). The
    kernel releases it when the process ends, so a killed runner leaves no stale lock."""
    os.makedirs(os.path.join(out, "locks"), exist_ok=True)
    f = open(os.path.join(out, "locks", name + ".lock"), "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


def run_files(state, name, out):
    """The result files recorded for run NAME, as paths to open: recorded relative to OUT (so that an
    OUT moved or named another way still finds them); older records, relative to where the runner
    ran, are taken as they are."""
    for f in state["runs"].get(name, {}).get("files") or []:
        inside = os.path.join(out, f)
        yield f if os.path.isabs(f) or not os.path.exists(inside) else inside


def eval_results(state, run_name, out):
    """The eval rows recorded for an eval run (one, or one per threshold of a sweep); a recorded file
    that is not a result is left out, with a note saying so."""
    rows = []
    for f in run_files(state, run_name, out):
        if not os.path.exists(f):
            continue
        try:
            with open(f) as fh:
                row = json.load(fh)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            print(f"note: {f}, recorded as {run_name}'s result, is not a JSON result ({e}); left out", file=sys.stderr)
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            print(f"note: {f}, recorded as {run_name}'s result, holds no result record; left out", file=sys.stderr)
    return rows


def is_result(path):
    """Whether a recorded result file holds a JSON object (not a file cut short, emptied or edited
    into something else)."""
    try:
        with open(path) as f:
            return isinstance(json.load(f), dict)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def progress_of(run, argv, fields, out, state, resolved=None):
    """(fraction done in [0, 1], a last.pt to resume from or None). Train: the checkpoint's step
    against the budget's; finetune: its step against its steps and its epochs against the
    budget's, 0 when its pretraining has changed since (stale_reason, given `resolved`); eval: the
    files recorded for this exact command, newer than the checkpoint, each a JSON result, 0 while its
    fine-tuning is stale. A fine-tuning and its evaluation restored from an archive without their
    weights are done (reproduce/archive.py) unless stale."""
    if run.script in ("finetune", "eval") and resolved is not None and stale_reason(run, resolved, out, state):
        return 0.0, None  # its pretraining changed since: run it again from that pretraining as it is (then its eval)
    if run.script == "eval":
        rec = state["runs"].get(run.name, {})
        ckpt = argv[0]
        files = list(run_files(state, run.name, out))
        if archived(state, run.name) and not os.path.exists(ckpt):  # restored without weights: its files are the result
            fresh = files and all(os.path.exists(f) for f in files)
        else:
            fresh = (
                files
                and os.path.exists(ckpt)
                and all(os.path.exists(f) and os.path.getmtime(f) >= os.path.getmtime(ckpt) for f in files)
            )
        same = rec.get("command") and what_it_ran(rec["command"]) == what_it_ran(command(run, argv))
        damaged = [f for f in files if not is_result(f)] if fresh and same else []
        if damaged:  # a file that is no result is no evaluation done: it runs again (and writes it anew)
            print(
                f"note: {damaged[0]}, recorded as {run.name}'s result, is not a JSON result: {run.name} is not done"
                + (
                    " (restore the file from its archive: its checkpoint is gone)"
                    if not os.path.exists(ckpt)
                    else ", and runs again"
                ),
                file=sys.stderr,
            )
        return (1.0 if fresh and same and not damaged else 0.0), None
    last = os.path.join(out, run.name, "last.pt")
    if not os.path.exists(last):  # a fine-tuning restored from an archive is done; a pretraining needs its weights
        return (1.0 if run.script == "finetune" and archived(state, run.name) else 0.0), None
    ck = checkpoint_lineage(last)
    if ck is None:  # unreadable: torch's own error says why, and nothing is run over it
        import torch

        ck = torch.load(last, map_location="cpu", weights_only=True, mmap=True)
    step, a = ck["step"], ck["args"]
    if run.script == "train":
        return min(1.0, step / steps_of(run, fields)), last
    if not os.path.exists(os.path.join(out, run.name, "best.pt")):  # what its evaluation reads: run it again
        return 0.0, None
    if ck.get("stopped_early"):  # stopped on validation: done, whatever its --epochs allowed
        return 1.0, None
    epochs = epochs_of(run, fields)
    if a["epochs"] < epochs:
        return step / a["steps"] * a["epochs"] / epochs, last
    return min(1.0, step / a["steps"]), last


def archived(state, name):
    """Whether run NAME's record came from an archive (reproduce/archive.py) and has not run here since."""
    return bool(state["runs"].get(name, {}).get("archived"))


def kind_of(run):
    """What a run's time is estimated from: its script, with ELMER's runs apart (its pretraining
    makes k passes, its fine-tuning projects the vocabulary at every off-ramp) and classification
    apart (a fine-tuning on short inputs that stops early; an evaluation without decoding). An
    evaluation's kind follows the fine-tuning it reads."""
    if run.script == "eval":
        tuned = BY_NAME[needs_of(run)[0]]
        return "eval" + "_classify" * ("--task classify" in tuned.flags)
    elmer = "elmer" in run.flags or run.script == "finetune" and "--exit" in run.flags
    classify = run.script == "finetune" and "--task classify" in run.flags
    return run.script + "_elmer" * elmer + "_classify" * classify


def _multiple(run, fields):
    """A run's length in its kind's unit: a pretraining's steps multiple, a fine-tuning's epochs one
    (at most the budget's: plan.epochs_of)."""
    return epochs_of(run, fields) / fields["epochs"] if run.script == "finetune" else run.steps_x


def estimate(run, fields, state, here=None):
    """Seconds for the whole run: the mean measured time of finished runs of its kind, else the
    budget's figure (per step for pretraining, per epoch for fine-tuning), each scaled from the
    dtype it was measured in to HERE, the dtype this machine computes in (reproduce/dtypes.py)."""
    key = kind_of(run)
    same = [
        r["seconds"] / _multiple(BY_NAME[name], fields) * dtype_slowdown(r.get("dtype"), here)
        for name, r in state["runs"].items()
        if name in BY_NAME and kind_of(BY_NAME[name]) == key and r.get("status") == "done"
    ]
    if same:
        return sum(same) / len(same) * _multiple(run, fields)
    s = fields["seconds"].get(key, fields["seconds"].get(run.script, 60)) * dtype_slowdown(
        fields.get("measured_in"), here
    )
    if key.startswith("finetune") and "classify" not in key:  # an epoch of the budget's share of the pairs
        s *= fields.get("share", 1)
    if not fields.get("scale", True):  # the budget's figures are per run
        return s
    return s * (
        steps_of(run, fields) if run.script == "train" else epochs_of(run, fields) if run.script == "finetune" else 1
    )


# -----------------------------------------------------------------------------
# a run's outcome, recorded

STOPPED = (130, 143)  # 128 + SIGINT / SIGTERM: the scripts saved and stopped


def record(args, r, resolved, state, unavailable, code, returned, err, secs, t0, argv_):
    """Write run R's outcome into state.json (under its lock) and into STATE; returns its record."""
    with locked_state(args.out) as shared:
        shared["unavailable"] = unavailable
        shared["budget"] = args.budget
        rec = shared["runs"].setdefault(r.name, {})
        rec.pop("archived", None)  # ran here: its own files now, not an archive's
        rec.update(
            command=command(r, resolved[r.name][0]),
            key=kind_of(r),
            dtype=compute_dtype(args.dtype),
            seconds=rec.get("seconds", 0.0) * ("--resume" in argv_) + secs,  # over its sittings
            finished=time.strftime("%Y-%m-%d %H:%M"),
            status="done" if code == 0 else "stopped" if code in STOPPED else "failed",
            error=err,
        )
        if args.worker is not None:
            rec["runner"] = args.worker
        if r.script == "eval" and code == 0:
            ckdir = os.path.dirname(argv_[0])
            rec["files"] = sorted(
                os.path.relpath(f, args.out)
                for f in glob.glob(os.path.join(ckdir, "eval-*.json"))
                if os.path.getmtime(f) >= t0 - 1
            )
            shared["lead"] = [row for row in returned or [] if row.get("model", "").startswith("LEAD")] or shared.get(
                "lead"
            )
            shared["majority"] = next(
                (row for row in returned or [] if row.get("model") == "majority class"), shared.get("majority")
            )
    state.clear()
    state.update(shared)
    return rec
