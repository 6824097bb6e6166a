"""One command for the three papers' comparisons: every pretraining, fine-tuning and evaluation
run of reproduce/plan.py, resumable over several sittings, and one markdown file of their tables.

    python -m reproduce --budget tiny            # CI: the tiny preset, a few minutes on 2 cores
    python -m reproduce --budget cpu --dry-run   # the plan's commands, what is left, the time it takes
    python -m reproduce --budget cpu --steps 1500 --epochs 2 --only 'pmlm|mlm'
    python -m reproduce --budget gpu             # 20,000 pretraining steps, 10 epochs, small preset

A run whose result exists is skipped (train: last.pt at the final step; finetune: last.pt at its
final step, started from its pretraining's checkpoint as it is now; eval: its result files, newer
than the checkpoint); one that stopped is continued with --resume. When a pretraining changes
after the runs built on it finished (a later sitting with more --steps), those runs are stale:
the listing says so, they run again from the pretraining as it is now (the fine-tuning with
--overwrite, then its evaluation), and until they have, RESULTS.md shows them as STALE, never as
current. Every fine-tuned row names the pretraining step it came from. Ctrl-C stops the run in progress the way the
scripts do (the step finishes, last.pt
is saved) and ends the sitting; the same command continues. Runs execute in this process, one
after another (the scripts' main(argv)); each one's output also goes to OUT/logs/NAME.log.
OUT/state.json keeps the measured time of every run (the estimates) and which eval files are
whose; OUT/RESULTS.md is rewritten after every run.

The runs are taken in the plan's order of claims (reproduce/plan.py, STAGES): the central claims
under all their seeds, then every other claim under its first seed, then the further seeds, each
only where a pair it would enter is close at its first seeds (reproduce/further_seeds.py); each
evaluation right after its fine-tuning, each pretraining just before the first run that needs it.
A sitting stopped anywhere has measured as many claims as its time allowed; --dry-run prints each
stage's runs left and their estimated time.

Several runners share OUT (two 1-thread jobs use 2 cores better than one 2-thread job; small
models leave a GPU idle between launches), either as one command or started by hand:

    python -m reproduce --budget cpu --jobs 2     # two workers, OMP_NUM_THREADS=1 each
    OMP_NUM_THREADS=1 python -m reproduce --budget cpu --only '^pre-(pmlm|mlm)$' &
    OMP_NUM_THREADS=1 python -m reproduce --budget cpu --only '^pre-elmer$' &

A runner holds a lock on every run it executes (OUT/locks/NAME.lock, released when its process
ends, however it ends): another runner skips that run, and a runner started by hand skips what
needs it too, where a worker of --jobs waits for it (reproduce/workers.py). state.json is re-read
and updated under its own lock after every run, so neither runner loses the other's.
"""

import argparse
import math
import os
import re
import shlex
import signal
import sys
import time

from reproduce import report
from reproduce.execute import execute, rejected, scripts, write_subset
from reproduce.further_seeds import not_needed
from reproduce.plan import (
    BUDGETS,
    BY_NAME,
    ORDER,
    PLACEHOLDER,
    STAGES,
    epochs_of,
    fill,
    in_order,
    needs_of,
    plan_for,
    stage_of,
    steps_of,
)
from reproduce.weights import round_in_place
from reproduce.dtypes import compute_dtype
from reproduce.runstate import kind_of, locked_state  # noqa: F401
from reproduce.runstate import STOPPED, archived, claim, estimate, load_state, progress_of, record
from reproduce.staleness import command, ran_otherwise, stale_reason, wrong_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def get_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m reproduce", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--budget", default="cpu", choices=sorted(BUDGETS))
    p.add_argument("--out", default=None, help="where every run goes (default: checkpoints/reproduce-BUDGET)")
    p.add_argument("--steps", type=int, default=None, help="pretraining steps (default: the budget's)")
    p.add_argument("--epochs", type=float, default=None, help="fine-tuning epochs (default: the budget's)")
    p.add_argument("--limit", type=int, default=None, help="evaluate on a sample of N test examples")
    p.add_argument("--permutations", type=int, default=None, help="ELMER's LPLM k (default: the budget's)")
    p.add_argument("--dtype", default=None, help="passed to every script as --dtype (default: the scripts' own)")
    p.add_argument("--only", default=None, help="a regex: the runs whose names match (and what they need)")
    p.add_argument("--skip", default=None, help="a regex: leave out the runs whose names match (and what needs them)")
    p.add_argument("--dry-run", action="store_true", help="print the plan's commands and what is left; run nothing")
    p.add_argument("--stop-after-runs", type=int, default=None, help="end the sitting after N runs")
    p.add_argument("--report-only", action="store_true", help="rewrite OUT/RESULTS.md from what exists")
    p.add_argument("--quiet", action="store_true", help="the runs' output to their log files only")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="N runners at once on OUT, each waiting for the runs it needs that another holds "
        "(each gets OMP_NUM_THREADS = cores / N unless set); see reproduce/workers.py",
    )
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # set by --jobs
    args = p.parse_args(argv)
    if args.stop_after_runs is not None and args.stop_after_runs < 1:
        p.error("--stop-after-runs must be at least 1")
    most = max(1, os.cpu_count() or 1)
    if not 1 <= args.jobs <= most:
        p.error(
            f"--jobs {args.jobs}: between 1 and this machine's {most} cores (each runner holds a model and "
            f"its data, about 650 MB)"
        )
    for flag in ("steps", "epochs", "limit", "permutations"):
        v = getattr(args, flag)
        if v is not None and not (v > 0 and math.isfinite(v)):
            p.error(f"--{flag} {v:g}: must be a finite number above 0")
    for flag in ("only", "skip"):
        if getattr(args, flag) is not None:
            try:
                re.compile(getattr(args, flag))
            except re.error as e:
                p.error(f"--{flag} {getattr(args, flag)!r} is not a regular expression ({e})")
    from core.training import DTYPES

    if args.dtype is not None and args.dtype not in DTYPES:
        p.error(f"--dtype {args.dtype!r}: one of {', '.join(DTYPES)} (what the scripts accept)")
    if args.report_only and args.dry_run:
        p.error("--report-only writes OUT/RESULTS.md and --dry-run writes nothing: give one of them")
    if args.jobs > 1 and args.stop_after_runs is not None:
        p.error("--stop-after-runs counts one runner's runs: use it without --jobs")
    args.out = args.out or os.path.join("checkpoints", f"reproduce-{args.budget}")
    return args


# -----------------------------------------------------------------------------
# the plan, resolved for a budget


def budget_fields(args):
    b = dict(BUDGETS[args.budget])
    for k in ("steps", "epochs", "limit", "permutations"):
        if getattr(args, k) is not None:
            b[k] = getattr(args, k)
    b["data"] = os.path.join(args.out, "data")
    for script in ("train", "finetune", "eval", "elmer", "elmer_ft", "summarize"):
        if script in b:
            b[script] = fill(b[script], b)
    if b["limit"] is None:  # eval on the whole split
        b["eval"] = re.sub(r"--limit \S+", "", b["eval"]).strip()
    elif "--limit" not in b["eval"]:  # a budget that evaluates the whole split, told to sample
        b["eval"] = f"{b['eval']} --limit {b['limit']}".strip()
    return b


def resolve(run, fields, out, dtype=None):
    """(argv of the script, names of the runs it needs). {pre-X} is OUT/pre-X/last.pt, {ft-X} is
    OUT/X/best.pt."""

    def path(m):
        name = m.group(1)
        return os.path.join(out, name, "last.pt") if name.startswith("pre-") else os.path.join(out, name[3:], "best.pt")

    flags = PLACEHOLDER.sub(path, fill(run.flags, fields))
    budget = fields[run.script]
    if run.script == "finetune" and "--task classify" not in run.flags:  # the budget's summarization flags
        budget = f"{budget} {fields.get('summarize', '')}"
    if run.steps_x != 1:
        budget = re.sub(r"--steps \d+", f"--steps {steps_of(run, fields)}", budget)
    if run.epochs_x != 1:
        budget = re.sub(r"--epochs \S+", f"--epochs {epochs_of(run, fields):g}", budget)
    argv = shlex.split(flags) + shlex.split(budget)
    if run.script != "eval":
        argv += ["--out", os.path.join(out, run.name)]
    if dtype:
        argv += ["--dtype", dtype]
    return argv, needs_of(run)


def select(plan, resolved, only, skip):
    """The runs --only picks (with the runs they need), less those --skip drops (and what needs them)."""
    names = {r.name for r in plan}
    keep = {n for n in names if not only or re.search(only, n)}
    todo = list(keep)
    while todo:
        for dep in resolved[todo.pop()][1]:
            if dep in names and dep not in keep:
                keep.add(dep)
                todo.append(dep)
    if skip:
        dropped = {n for n in keep if re.search(skip, n)}
        changed = True
        while changed:
            new = {n for n in keep - dropped if any(d in dropped for d in resolved[n][1])}
            changed = bool(new)
            dropped |= new
        keep -= dropped
    return [r for r in plan if r.name in keep]


# -----------------------------------------------------------------------------


def check_out(out, create):
    """None if OUT can hold the runs (created here unless `create` is False), else why not."""
    if os.path.exists(out) and not os.path.isdir(out):
        return f"--out {out} is a file, not a directory"
    if os.path.isdir(out):
        return None if os.access(out, os.W_OK | os.X_OK) else f"--out {out} is not writable"
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {out} cannot be created ({parent} is not a writable directory)"
    if create:
        os.makedirs(out, exist_ok=True)
    return None


def main(argv=None, early=None):
    """EARLY: the signal handlers to restore once everything is imported (python -m reproduce sets
    them first, so that a Ctrl-C while importing leaves quietly)."""
    from reproduce.runstate import StateError

    args = get_args(argv)
    fields = dict(budget_fields(args), budget=args.budget)
    problem = check_out(args.out, create=not args.dry_run)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        state = load_state(args.out)
    except StateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if state.get("budget", args.budget) != args.budget:
        print(
            f"error: {args.out} holds the runs of --budget {state['budget']}, not {args.budget}: give "
            f"--budget {state['budget']}, or another --out",
            file=sys.stderr,
        )
        return 2
    mods = scripts()
    plan = plan_for(fields)
    resolved = {r.name: resolve(r, fields, args.out, args.dtype) for r in plan}
    runs = when_needed(in_order(select(plan, resolved, args.only, args.skip)), resolved, state, args.out)

    unavailable = unavailable_runs(plan, resolved, mods, args.out, state)
    if args.report_only:
        state["unavailable"] = unavailable
        print(f"wrote {report.write(args, fields, state, resolved)}")
        return 0

    state["unavailable"] = unavailable
    if BUDGETS[args.budget]["data"] == "subset" and not args.dry_run:
        write_subset(fields["data"])
    say = print if args.worker is None else lambda msg="", **kw: print(f"[{args.worker}] {msg.strip()}", flush=True)
    if args.worker is None:
        print(f"reproduce: budget {args.budget}, {len(runs)} runs in {args.out}")
    left, total, stages = runs_left(args, fields, state, resolved, runs, unavailable)
    if args.worker is None:
        print(
            f"left: {len(left)} runs, about {report.fmt_secs(total)}"
            + (
                f" on one runner (at least {report.fmt_secs(total / args.jobs)} with --jobs {args.jobs})"
                if args.jobs > 1
                else ""
            )
            + (
                f"; {blocked} cannot run here (listed above)"
                if (blocked := sum(r.name in unavailable for r in runs))
                else ""
            )
        )
        for k, (n, secs) in sorted(stages.items()):
            print(f"  stage {k + 1}, {STAGES[k]}: {n} runs left, about {report.fmt_secs(secs)}")
    if args.dry_run:
        return 0
    if early:  # everything imported: from here on Ctrl-C stops a sitting the usual way
        for sig, handler in early.items():
            signal.signal(sig, handler)
    if args.jobs > 1:
        from reproduce.workers import supervise

        code = supervise(sys.argv[1:] if argv is None else argv, args.jobs, max(1, (os.cpu_count() or 1) // args.jobs))
        state = dict(load_state(args.out), unavailable=unavailable)
        print(f"\nresults: {report.write(args, fields, state, resolved)}")
        return code
    return run_left(args, fields, state, resolved, mods, left, unavailable, say, runs)


def unavailable_runs(plan, resolved, mods, out, state):
    """{run: why it cannot start}: what each run of the plan needs before it can start (every run,
    whatever --only picks, so that runners sharing OUT record the same): a flag this checkout has,
    no TODO note, no result of other flags in its directory, the right checkpoint, and runs it
    depends on that can start."""
    unavailable = {}
    for r in plan:
        why = r.todo or rejected(mods[r.script], resolved[r.name][0])
        if why:
            unavailable[r.name] = ("TODO: " if r.todo else "not on this branch: ") + why
        elif recorded := ran_otherwise(r, resolved[r.name][0], out, state):
            unavailable[r.name] = (
                f"ran with other flags than the plan's (`{recorded}`): "
                f"move {os.path.join(out, r.name)} aside to run it again"
            )
        elif wrong := wrong_checkpoint(r, resolved[r.name][0], out):
            unavailable[r.name] = f"{wrong}: move {os.path.join(out, r.name)} aside to run it again"
    changed = True
    while changed:
        changed = False
        for r in plan:
            bad = [d for d in resolved[r.name][1] if d in unavailable]
            if r.name not in unavailable and bad:
                unavailable[r.name], changed = f"needs {bad[0]}", True
    return unavailable


def runs_left(args, fields, state, resolved, runs, unavailable):
    """([runs not done that can start], their estimated seconds, {stage: (runs left, seconds)}); a
    runner (not a worker) prints each run's state under its stage, and with --dry-run its command."""
    left, total, stages, shown = [], 0.0, {}, None
    here = compute_dtype(args.dtype)
    for r in runs:
        argv_, _ = resolved[r.name]
        done, resume = progress_of(r, argv_, fields, args.out, state, resolved)
        spared = None
        if done < 1 and r.name not in unavailable:
            spared = not_needed(r.name, state, args.out) or weights_not_needed(
                r, fields, state, resolved, args.out, unavailable
            )
        if done < 1 and r.name not in unavailable and not spared:
            left.append(r)
        if args.worker is not None:
            continue
        if shown is None or stage_of(r.name) > shown:  # a pretraining moved to its first user keeps the stage
            shown = stage_of(r.name)
            print(f" stage {shown + 1}, {STAGES[shown]}:")
        # None: another runner is running it (a dry run takes no lock: it creates nothing under OUT)
        free = (claim(args.out, r.name) if not args.dry_run else open(os.devnull)) if done < 1 else None
        if free:
            free.close()
        stale = stale_reason(r, resolved, args.out, state)
        busy = "" if free else "running in another runner, "
        todo = f"resume ({100 * done:.0f}%)" if resume else f"stale ({stale}): to run again" if stale else "to run"
        mark = unavailable.get(r.name) or spared or ("done" if done >= 1 else busy + todo)
        if done >= 1 and stale and r.name not in unavailable:  # an evaluation of a stale fine-tuning
            mark = f"stale ({stale}): runs again after it"
        secs = 0.0 if done >= 1 or r.name in unavailable or spared else estimate(r, fields, state, here) * (1 - done)
        total += secs
        n, t = stages.get(shown, (0, 0.0))
        stages[shown] = (n + (r in left), t + secs)
        print(
            f"  {r.name:<24} {mark}"
            + (f" ~{report.fmt_secs(secs)}" if secs else "")
            + (f"\n      {command(r, argv_)}" if args.dry_run else "")
        )
    return left, total, stages


def weights_not_needed(run, fields, state, resolved, out, unavailable):
    """Why a pretraining need not run (again): no run of the plan left needs its weights (those built
    on it are done, or not needed: further_seeds.not_needed), else None. One restored from an archive
    without its weights says so."""
    if run.script != "train" or os.path.exists(os.path.join(out, run.name, "last.pt")):
        return None
    for name, (argv_, needs) in resolved.items():
        if (
            run.name in needs
            and name not in unavailable
            and not not_needed(name, state, out)
            and progress_of(BY_NAME[name], argv_, fields, out, state, resolved)[0] < 1
        ):
            return None
    if archived(state, run.name):
        return "archived: its curve is kept and no run left needs its weights"
    return "not needed: no run left needs its weights"


def when_needed(runs, resolved, state, out):
    """RUNS with each pretraining moved to just before the first of them that needs it and is not
    spared (further_seeds.not_needed): a pretraining whose first users in the plan's order keep
    archived verdicts waits for the run that reads it."""
    spared = {r.name for r in runs if r.script != "train" and not_needed(r.name, state, out)}
    pre = [r for r in runs if r.script == "train"]
    rest = [r for r in runs if r.script != "train"]
    for p in reversed(pre):
        first = next((i for i, r in enumerate(rest) if p.name in resolved[r.name][1] and r.name not in spared), None)
        if first is None:  # no user left: where the plan's order put it
            first = next((i for i, r in enumerate(rest) if ORDER[r.name] > ORDER[p.name]), len(rest))
        rest.insert(first, p)
    return rest


def may_still_finish(name, out, state, mine):
    """Whether run NAME, not finished, may yet finish in this sitting: another runner holds it, or
    it is among MINE, the runs this one has still to run, and has not failed. A run another runner
    let go of unfinished (stopped, failed, killed) does not finish in this sitting."""
    held = claim(out, name)
    if held is None:
        return True
    held.close()
    return name in mine and state["runs"].get(name, {}).get("status") != "failed"


def run_left(args, fields, state, resolved, mods, left, unavailable, say, runs=()):
    """Run what is left, in the plan's order. A run whose needs are unfinished is skipped, or, in a
    worker of --jobs, waited for while another runner may still finish them. A pretraining this
    sitting extends makes the selected runs built on it stale: they join this sitting's runs."""
    status, ran, pending, attempted = 0, 0, list(left), set()
    try:
        while pending:
            waiting, progressed = [], False
            for r in pending:
                if args.stop_after_runs is not None and ran >= args.stop_after_runs:
                    say(f"stopped after {ran} runs (--stop-after-runs); the same command continues")
                    waiting = []
                    break
                argv_, needs = resolved[r.name]
                if os.path.exists(os.path.join(args.out, "state.json")):  # what another runner recorded meanwhile
                    state = dict(load_state(args.out), unavailable=unavailable)
                if spared := not_needed(r.name, state, args.out):  # the first seeds as they are now
                    say(f"{r.name}: {spared}")  # not a "skip": nothing is left to wait for
                    continue
                missing = [
                    d
                    for d in needs
                    if progress_of(BY_NAME[d], resolved[d][0], fields, args.out, state, resolved)[0] < 1
                ]
                if missing:
                    mine = {p.name for p in pending}
                    if args.worker is not None and all(may_still_finish(d, args.out, state, mine) for d in missing):
                        waiting.append(r)
                    else:
                        say(f"skip {r.name}: {missing[0]} did not finish")
                    continue
                held = claim(args.out, r.name)
                if held is None:
                    say(f"skip {r.name}: another runner is running it")
                    continue
                with held:
                    # read again under the lock: another runner may have recorded this run (an
                    # evaluation's progress is its record) since the read above
                    if os.path.exists(os.path.join(args.out, "state.json")):
                        state = dict(load_state(args.out), unavailable=unavailable)
                    frac, resume = progress_of(r, argv_, fields, args.out, state, resolved)
                    if frac >= 1:  # another runner finished it since this one started
                        continue
                    if r.script != "eval":
                        fresh = not resume and any(
                            os.path.exists(os.path.join(args.out, r.name, f))
                            for f in ("log.jsonl", "best.pt", "last.pt")
                        )
                        argv_ = argv_ + (["--resume"] if resume else ["--overwrite"] if fresh else [])
                    for d in needs:  # a kept pretraining is read as the archive keeps it (reproduce/weights.py)
                        round_in_place(args.out, d)
                    say(f"\n=== {r.name}: {command(r, argv_)}", flush=True)
                    t0 = time.time()
                    code, returned, err = execute(
                        mods[r.script], r, argv_, os.path.join(args.out, "logs", r.name + ".log"), args.quiet
                    )
                    secs = time.time() - t0
                    rec = record(args, r, resolved, state, unavailable, code, returned, err, secs, t0, argv_)
                ran, progressed = ran + 1, True
                attempted.add(r.name)
                if r.script == "train" and code == 0:
                    round_in_place(args.out, r.name)
                    pending += [
                        x
                        for x in runs
                        if x not in pending
                        and x.name not in attempted
                        and x.name not in unavailable
                        and progress_of(x, resolved[x.name][0], fields, args.out, state, resolved)[0] < 1
                    ]
                report.write(args, fields, state, resolved)
                say(
                    f"=== {r.name}: {rec['status']} in {report.fmt_secs(secs)}" + (f" ({err})" if err else ""),
                    flush=True,
                )
                if code in STOPPED:
                    say("stopped; the same command continues where it left off")
                    return code
                status = status or (1 if code else 0)
            if waiting and not progressed:
                time.sleep(WAIT_SECONDS)
            pending = waiting
    except KeyboardInterrupt:  # between runs
        say("\nstopped; the same command continues where it left off")
        return 130
    if args.worker is None:
        print(f"\nresults: {report.write(args, fields, state, resolved)}")
    failed = [n for n, r in state["runs"].items() if r.get("status") == "failed"]
    if failed:
        say(f"failed: {', '.join(failed)} (see {os.path.join(args.out, 'logs')})")
    return status


WAIT_SECONDS = 2  # a worker's pause between looks at the runs it waits for
