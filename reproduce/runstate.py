"""What reproduce/runner.py knows of its runs: OUT/state.json (each run's command, measured time and
status, shared by runners under a lock), the per-run locks, and how far each run has got from
its own files."""

import contextlib
import fcntl
import glob
import json
import os
import shlex
import sys
import time

from reproduce.dtypes import compute_dtype, dtype_slowdown
from reproduce.plan import BY_NAME, epochs_of, needs_of, steps_of

VARYING = ("--steps", "--epochs", "--dtype")  # a run continues, or is extended, under other values of these
# flags that change how often a run logs, evaluates on held-out text or saves, not what it computes
# (train.py's and finetune.py's RESUMABLE): a budget ties --eval-every to --steps, for one
UNCHANGING = ("--log-every", "--eval-every", "--save-every")


def command(run, argv):
    return f"python {run.script}.py {shlex.join(argv)}"


def what_it_ran(cmd):
    """A command less what does not change its result: the flags a run may change between sittings
    (VARYING), how often it logs, evaluates or saves (UNCHANGING), --resume, --overwrite; and its
    paths written one way (`./x/../x/y` and an absolute path to it are `x/y`), those inside the OUT
    it ran in as OUT/... (an OUT moved, or named from another folder, ran the same commands)."""
    words, kept = shlex.split(cmd), []
    paths = [w for w in words[2:] if "/" in w and not w.startswith("-")]
    where = words[words.index("--out") + 1] if "--out" in words[:-1] else paths[0] if paths else None
    base = (
        os.path.dirname(
            os.path.dirname(os.path.abspath(where)) if "--out" not in words[:-1] else os.path.abspath(where)
        )
        if where
        else None
    )
    i = 0
    while i < len(words):
        if words[i] in VARYING + UNCHANGING:
            i += 2
            continue
        if words[i] not in ("--resume", "--overwrite"):
            w = words[i]
            if "/" in w and not w.startswith("-"):
                full = os.path.abspath(w)
                inside = base and full.startswith(base + os.sep)
                w = "OUT/" + os.path.relpath(full, base) if inside else os.path.relpath(full)
            kept.append(w)
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


# -----------------------------------------------------------------------------
# lineage: which checkpoint of its pretraining a result came from

_LINEAGE = {}  # (path, mtime_ns, size) -> {"step", "init_step", ...}: a report reads each checkpoint once
KEPT = ("step", "init_step", "kind", "stopped_early")  # what _ckpt keeps of a checkpoint
KEPT_ARGS = ("objective", "model", "task", "steps", "epochs")  # and of its args


def _ckpt(path):
    """The lineage fields of a checkpoint ({"step": .., "init_step": ..}), or None where it cannot be
    read; read once per version of the file (the report is written after every run, and loading
    every checkpoint for it each time was most of a tiny sitting's time)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_ino, st.st_mtime_ns, st.st_size)
    # a file written within the last second is read again: a filesystem's clock may be too coarse
    # to tell two quick writes of one size apart
    if key not in _LINEAGE or time.time() - st.st_mtime < 1.0:
        import torch

        try:
            ck = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # noqa: BLE001  (a checkpoint being rewritten, or not one: no lineage to read)
            return None
        if isinstance(ck, dict):
            _LINEAGE[key] = {k: ck.get(k) for k in KEPT}
            _LINEAGE[key]["args"] = {k: (ck.get("args") or {}).get(k) for k in KEPT_ARGS}
        else:
            _LINEAGE[key] = {}
    return _LINEAGE[key]


LINEAGE = "lineage.json"  # an archived fine-tuning's {"init_step": N}, kept where its last.pt is not


def pretraining_step(out, pre):
    """The step of pretraining run PRE's last.pt now, or None."""
    ck = _ckpt(os.path.join(out, pre, "last.pt")) if os.path.exists(os.path.join(out, pre, "last.pt")) else None
    return None if ck is None else ck.get("step")


def init_step_of(out, name):
    """(the pretraining step fine-tuning NAME started from, as its last.pt records it, or as its
    archive's lineage.json does where the weights are gone (reproduce/archive.py), or None; its
    last.pt's modification time, or None)."""
    path = os.path.join(out, name, "last.pt")
    if not os.path.exists(path):
        try:
            with open(os.path.join(out, name, LINEAGE)) as f:
                return json.load(f).get("init_step"), None
        except (OSError, ValueError, AttributeError):
            return None, None
    ck = _ckpt(path)
    return (None if ck is None else ck.get("init_step")), os.path.getmtime(path)


def flag_value(argv, flag, default=None):
    """The value of `flag` in an argv (its last occurrence, as argparse reads it)."""
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    return values[-1] if values else default


def wrong_checkpoint(run, argv, out):
    """Why run NAME's last.pt is not what the plan runs there (another objective or preset for a
    pretraining, another task for a fine-tuning: a file copied or left from another budget), else
    None. A checkpoint that cannot be read is said so too."""
    path = os.path.join(out, run.name, "last.pt")
    if run.script == "eval" or not os.path.exists(path):
        return None
    ck = _ckpt(path)
    if not ck:
        return f"{path} is not a checkpoint this project can read"
    kind, got = str(ck.get("kind")), ck.get("args", {})
    if run.script == "train":
        want = dict(objective=flag_value(argv, "--objective", "pmlm"), model=flag_value(argv, "--model", "small"))
        if kind != f"pretrain/{want['objective']}" or got.get("model") != want["model"]:
            return (
                f"{path} is a {kind} checkpoint of --model {got.get('model')}, not the plan's "
                f"pretrain/{want['objective']} of --model {want['model']}"
            )
    else:
        task = flag_value(argv, "--task", "summarize")
        if kind != f"finetune/{task}":
            return f"{path} is a {kind} checkpoint, not the plan's finetune/{task}"
    return None


# finetune.py's flags that make its recipe and that it keeps as given: a run made under other
# values (an earlier default) is not the plan's run now
RECIPE = (
    "train_share",
    "lr",
    "lr_schedule",
    "warmup_epochs",
    "mask_epochs",
    "batch",
    "patience",
    "valid_every",
    "valid_examples",
    "weight_decay",
    "clip",
    "seed",
)


def recipe_change(run, argv, out):
    """'fine-tuned with --lr 0.00015, the plan now runs 0.001' where the recipe that fine-tuning NAME
    recorded (its config.json) differs from what the plan's command runs now, else None."""
    path = os.path.join(out, run.name, "config.json")
    try:
        with open(path) as f:
            saved = json.load(f)["args"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no record (not started, or a run older than config.json): nothing to compare
    import finetune
    from core.checkpoint import upgrade_finetune_args

    saved = upgrade_finetune_args(saved)
    now = vars(finetune.get_args(argv))
    diffs = [(k, saved[k], now[k]) for k in RECIPE if k in saved and k in now and saved[k] != now[k]]
    if not diffs:
        return None
    return (
        "fine-tuned with "
        + ", ".join(f"--{k.replace('_', '-')} {a}" for k, a, _ in diffs)
        + "; the plan now runs "
        + ", ".join(f"{b}" for _, _, b in diffs)
    )


def ended_before(out, name, pre):
    """'fine-tuned before pre-X's present run ended (...)' where OUT/state.json records run NAME as
    ending before pretraining PRE's finished run did (times to the minute), else None. A
    fine-tuning starts from its pretraining's final checkpoint, so one that ended first started from
    an earlier run of it."""
    try:
        runs = load_state(out)["runs"]
    except StateError:
        return None
    ft, pt = runs.get(name, {}), runs.get(pre, {})
    if pt.get("status") != "done" or not ft.get("finished") or not pt.get("finished"):
        return None
    if ft["finished"] >= pt["finished"]:
        return None
    ended = f"{ft['finished']} < {pt['finished']}"
    return f"fine-tuned before {pre}'s present run ended ({ended}): from an earlier run of it"


def stale_reason(run, resolved, out):
    """Why a fine-tuning's result is not the plan's run as it is now, else None: it ran another recipe
    (recipe_change), it started from another step of its pretraining (a pretraining extended by a
    later sitting), it ended before its pretraining's present run did (a pretraining run again from
    step 0 to the same step: OUT/state.json's `finished` of each), or, for a run older than the step's
    record, the pretraining's checkpoint was written after the fine-tuning's. An evaluation is
    stale when the fine-tuning it reads is."""
    if run.script == "eval":
        ft = next((d for d in resolved[run.name][1] if not d.startswith("pre-")), None)
        return stale_reason(BY_NAME[ft], resolved, out) if ft in BY_NAME else None
    if run.script != "finetune":
        return None
    changed = recipe_change(run, resolved[run.name][0], out)
    if changed:
        return changed
    pre = next((d for d in resolved[run.name][1] if d.startswith("pre-")), None)
    if pre is None:
        return None
    earlier = ended_before(out, run.name, pre)
    if earlier:
        return earlier
    started, mtime = init_step_of(out, run.name)
    if mtime is None and started is None:
        return None
    now = pretraining_step(out, pre)
    if mtime is None and now is None:  # archived, and its pretraining's weights gone too: nothing to compare
        return None
    if started is not None:
        return None if started == now else f"fine-tuned from {pre} at step {started}, which is now at step {now}"
    pre_path = os.path.join(out, pre, "last.pt")
    if os.path.exists(pre_path) and os.path.getmtime(pre_path) > mtime:
        return f"{pre} was written after this fine-tuning (step {now} now); which step it started from is not recorded"
    return None


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
    if run.script in ("finetune", "eval") and resolved is not None and stale_reason(run, resolved, out):
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
    ck = _ckpt(last)
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
