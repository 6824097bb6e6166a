"""The progress line (fixed fields: step/total, loss, lr, tokens/s, ETA) and the JSONL log; eval.py's
progress through a long generation."""

import json
import os
import sys
import time


def fmt_duration(s):
    s = int(max(0, s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def truncate_log(path, step):
    """A resumed run replays the steps after its checkpoint: the records an earlier process wrote
    past that step (before a SIGKILL, say) are dropped, and so is a line cut short by the kill,
    so that every step appears once. Rewritten atomically."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or rec.get("step", 0) <= step:
                kept.append(json.dumps(rec) + "\n")
    with open(path + ".tmp", "w") as f:
        f.writelines(kept)
    os.replace(path + ".tmp", path)


class Progress:
    def __init__(self, total, log_path=None, start_step=0):
        self.total, self.start_step = total, start_step
        self.t0 = time.time()
        self.log_path = log_path
        if log_path:
            os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
            if start_step > 0:  # resuming
                truncate_log(log_path, start_step)

    def log(self, record):
        """Append one JSON line (rank 0 only calls this)."""
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")

    def line(self, step, loss, lr, tokens_per_s, extra=""):
        done = step - self.start_step
        elapsed = time.time() - self.t0
        eta = elapsed / max(1, done) * (self.total - step)
        tps = f"{tokens_per_s / 1000:.1f}k" if tokens_per_s >= 1000 else f"{tokens_per_s:.0f}"
        return (
            f"step {step:>{len(str(self.total))}}/{self.total} | loss {loss:.4f} | lr {lr:.2e} | "
            f"{tps} tok/s | ETA {fmt_duration(eta)}" + (f" | {extra}" if extra else "")
        )


def progress_line(what, stream=None):
    """A progress report: one line rewritten in place on a terminal; in a log file (not a terminal)
    a line at every tenth of the work, so that the file does not hold one endless line."""
    stream = stream or sys.stderr
    tty = stream.isatty()
    shown = [-1]

    def show(done, total):
        if tty:
            print(f"\r  {what}: {done}/{total}", end="" if done < total else "\n", file=stream, flush=True)
        elif 10 * done // max(1, total) > shown[0] or done == total:
            shown[0] = 10 * done // max(1, total)
            print(f"  {what}: {done}/{total}", file=stream, flush=True)

    return show
