"""The progress line (fixed fields: step/total, loss, lr, tokens/s, ETA) and the JSONL log."""
import json
import os
import time


def fmt_duration(s):
    s = int(max(0, s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Progress:
    def __init__(self, total, log_path=None, start_step=0):
        self.total, self.start_step = total, start_step
        self.t0 = time.time()
        self.log_path = log_path
        if log_path:
            os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)

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
        return (f"step {step:>{len(str(self.total))}}/{self.total} | loss {loss:.4f} | lr {lr:.2e} | "
                f"{tps} tok/s | ETA {fmt_duration(eta)}" + (f" | {extra}" if extra else ""))
