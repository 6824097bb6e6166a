"""reproduce/runner.py --jobs N: N runners on one OUT, started and stopped as one command.

The runner already shares OUT safely (a lock per run, state.json updated under a lock); what one
command adds is starting the N runners, waiting in each for a run another holds (a fine-tuning
whose pretraining another runner is still running waits for it, where a lone runner would skip
it), and passing Ctrl-C or SIGTERM on to every runner once, so each saves its run as the scripts
do and the same command continues. Small models leave a GPU mostly idle between kernel launches,
so several runs at once go faster than one after another; on a CPU, N 1-thread runners use N cores
better than one N-thread runner.
"""

import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))  # reproduce/


def worker_argv(argv, k):
    """The command of worker K: the supervisor's own flags without --jobs, each run's output to its
    log only, and the worker's number for its lines and for waiting."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--jobs":
            skip = True
        elif not a.startswith("--jobs="):
            out.append(a)
    return [sys.executable, "-m", "reproduce", *out, "--quiet", "--worker", str(k)]


def supervise(argv, jobs, threads=None):
    """Start JOBS workers, pass SIGINT/SIGTERM on to them, wait for all. Returns the first
    non-zero exit status (130/143 when stopped), else 0. THREADS sets each worker's
    OMP_NUM_THREADS where the caller has not."""
    env = dict(os.environ)
    # the workers import this tree whatever their directory: its root leads their module path
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(HERE), env.get("PYTHONPATH")) if p)
    if threads and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(threads)
    procs = []
    got = []

    def forward(signum, frame):
        got.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for k in range(1, jobs + 1):
            # a session of its own: a Ctrl-C at the terminal reaches the workers once, through forward()
            procs.append(subprocess.Popen(worker_argv(argv, k), env=env, start_new_session=True))
            if got:
                break
        codes = [p.wait() for p in procs]
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    stopped = [c for c in codes if c in (130, 143)]
    if got or stopped:
        return stopped[0] if stopped else 128 + got[0]
    return next((c for c in codes if c), 0)
