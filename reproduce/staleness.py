"""Whether a run's files are the plan's run as it is now (reproduce/runner.py, report.py, archive.py):
the command it recorded against the plan's (what_it_ran), the checkpoint of its pretraining it
started from (its lineage: pretraining_step, init_step_of), the checkpoint's kind, the recipe it
trained with, and when it ended against its pretraining's present run (stale_reason)."""

import json
import os
import shlex
import time

from reproduce.plan import BY_NAME

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
KEPT = ("step", "init_step", "kind", "stopped_early")  # what checkpoint_lineage keeps of a checkpoint
KEPT_ARGS = ("objective", "model", "task", "steps", "epochs")  # and of its args


def checkpoint_lineage(path):
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
    path = os.path.join(out, pre, "last.pt")
    ck = checkpoint_lineage(path) if os.path.exists(path) else None
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
    ck = checkpoint_lineage(path)
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
    ck = checkpoint_lineage(path)
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


def ended_before(state, name, pre):
    """'fine-tuned before pre-X's present run ended (...)' where `state` (OUT/state.json) records run
    NAME as ending before pretraining PRE's finished run did (times to the minute), else None. A
    fine-tuning starts from its pretraining's final checkpoint, so one that ended first started from
    an earlier run of it."""
    runs = state["runs"]
    ft, pt = runs.get(name, {}), runs.get(pre, {})
    if pt.get("status") != "done" or not ft.get("finished") or not pt.get("finished"):
        return None
    if ft["finished"] >= pt["finished"]:
        return None
    ended = f"{ft['finished']} < {pt['finished']}"
    return f"fine-tuned before {pre}'s present run ended ({ended}): from an earlier run of it"


def stale_reason(run, resolved, out, state):
    """Why a fine-tuning's result is not the plan's run as it is now, else None: it ran another recipe
    (recipe_change), it started from another step of its pretraining (a pretraining extended by a
    later sitting), it ended before its pretraining's present run did (a pretraining run again from
    step 0 to the same step: `finished` of each in `state`, OUT/state.json's runs), or, for a run
    older than the step's record, the pretraining's checkpoint was written after the fine-tuning's.
    An evaluation is stale when the fine-tuning it reads is."""
    if run.script == "eval":
        ft = next((d for d in resolved[run.name][1] if not d.startswith("pre-")), None)
        return stale_reason(BY_NAME[ft], resolved, out, state) if ft in BY_NAME else None
    if run.script != "finetune":
        return None
    changed = recipe_change(run, resolved[run.name][0], out)
    if changed:
        return changed
    pre = next((d for d in resolved[run.name][1] if d.startswith("pre-")), None)
    if pre is None:
        return None
    earlier = ended_before(state, run.name, pre)
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
