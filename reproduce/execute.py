"""Running one run of the plan in the runner's own process: the scripts' main(argv) with its output
to the console and its log, the check that a script accepts a run's flags, and the tiny budget's
data."""

import contextlib
import io
import json
import os
import re
import sys
import traceback

from reproduce.staleness import command


def scripts():
    """The three scripts' modules, imported once (in-process runs skip a 6 s import each)."""
    import eval as evaluate_script
    import finetune
    import train

    return dict(train=train, finetune=finetune, eval=evaluate_script)


def rejected(module, argv):
    """None if the script's own argument parser accepts argv, else its one-line reason (a flag or
    a choice this checkout does not have yet)."""
    from core.errors import UserError

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            module.get_args(argv)
    except SystemExit:
        lines = [l for l in err.getvalue().splitlines() if l.strip()]
        return re.sub(r"^\S+: error: ", "", lines[-1]) if lines else "rejected"
    except UserError as e:
        return str(e)
    return None


# -----------------------------------------------------------------------------
# running one


class Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


def execute(module, run, argv, log_path, quiet):
    """Run a script's main(argv) here, its output to the console and its log. Returns (exit
    status, what main returned, the error line or None)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a") as log:
        log.write(f"\n$ {command(run, argv)}\n")
        out = Tee(log) if quiet else Tee(sys.stdout, log)
        err = Tee(log) if quiet else Tee(sys.stderr, log)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                return 0, module.main(argv), None
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                return code, None, (None if code == 0 else f"exit status {code}")
            except Exception as e:  # a bug in a script: logged, and the runner goes on with the rest
                traceback.print_exc()
                return 1, None, f"{type(e).__name__}: {e}"


def write_subset(data_dir):
    """The tiny budget's data: a few hundred records of the embedded corpus."""
    from core.data import embedded_records

    if os.path.exists(os.path.join(data_dir, "test.jsonl")):
        return
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, "pretrain.txt"), "w") as f:
        f.write("\n".join(r["document"] for r in embedded_records("train")[:1500]) + "\n")
    for split, n in (("train", 96), ("valid", 16), ("test", 8)):
        with open(os.path.join(data_dir, f"{split}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in embedded_records(split)[:n])
