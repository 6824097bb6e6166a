"""What bench/reproduce.py knows of its runs: OUT/state.json (each run's command, measured time and
status, shared by runners under a lock), the per-run locks, and how far each run has got from
its own files."""
import contextlib
import fcntl
import json
import os
import shlex

from plan import BY_NAME, steps_of

VARYING = ("--steps", "--epochs", "--dtype")  # a run continues, or is extended, under other values of these


def command(run, argv):
    return f"python {run.script}.py {shlex.join(argv)}"


def what_it_ran(cmd):
    """A command less the flags a run may change between sittings (VARYING, --resume, --overwrite)."""
    words, kept = shlex.split(cmd), []
    i = 0
    while i < len(words):
        if words[i] in VARYING:
            i += 2
            continue
        if words[i] not in ("--resume", "--overwrite"):
            kept.append(words[i])
        i += 1
    return kept


def ran_otherwise(run, argv, out, state):
    """The recorded command of a pretraining or fine-tuning whose checkpoint exists but which ran
    with other flags than the plan's now (the plan was edited since), else None. Its result is
    not the plan's row, and the runner will not overwrite it: it is moved aside by hand."""
    rec = state["runs"].get(run.name, {})
    if run.script == "eval" or not rec.get("command") or not os.path.exists(os.path.join(out, run.name, "last.pt")):
        return None
    return None if what_it_ran(rec["command"]) == what_it_ran(command(run, argv)) else rec["command"]



def load_state(out):
    path = os.path.join(out, "state.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return dict(runs={})


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


def progress_of(run, argv, fields, out, state):
    """(fraction done in [0, 1], a last.pt to resume from or None). Train: the checkpoint's step
    against the budget's; finetune: its step against its steps and its epochs against the
    budget's; eval: the files recorded for this exact command, newer than the checkpoint."""
    import torch
    if run.script == "eval":
        rec = state["runs"].get(run.name, {})
        ckpt = argv[0]
        files = rec.get("files") or []
        fresh = files and os.path.exists(ckpt) and all(
            os.path.exists(f) and os.path.getmtime(f) >= os.path.getmtime(ckpt) for f in files)
        return (1.0 if fresh and rec.get("command") == command(run, argv) else 0.0), None
    last = os.path.join(out, run.name, "last.pt")
    if not os.path.exists(last):
        return 0.0, None
    ck = torch.load(last, map_location="cpu", weights_only=True, mmap=True)
    step, a = ck["step"], ck["args"]
    if run.script == "train":
        return min(1.0, step / steps_of(run, fields)), last
    if a["epochs"] < fields["epochs"]:
        return step / a["steps"] * a["epochs"] / fields["epochs"], last
    return min(1.0, step / a["steps"]), last


def kind_of(run):
    """What a run's time is estimated from: its script, with ELMER's runs apart (its pretraining
    makes k passes, its fine-tuning projects the vocabulary at every off-ramp)."""
    elmer = "elmer" in run.flags or run.script == "finetune" and "--exit" in run.flags
    return run.script + "_elmer" * (elmer and run.script != "eval")


def estimate(run, fields, state):
    """Seconds for the whole run: the mean measured time of finished runs of its kind here, else
    the budget's figure (per step for pretraining, per epoch for fine-tuning)."""
    key = kind_of(run)
    same = [r["seconds"] / BY_NAME[name].steps_x for name, r in state["runs"].items()
            if name in BY_NAME and kind_of(BY_NAME[name]) == key and r.get("status") == "done"]
    if same:
        return sum(same) / len(same) * run.steps_x
    s = fields["seconds"].get(key, fields["seconds"].get(run.script, 60))
    if not fields.get("scale", True):  # the budget's figures are per run
        return s
    return s * (steps_of(run, fields) if run.script == "train" else fields["epochs"] if run.script == "finetune" else 1)
