"""python -m reproduce: the runner of the papers' comparisons (reproduce/runner.py; --help)."""
import os
import signal
import sys

# Ctrl-C (or a supervisor passing it on to a worker of --jobs) while the runner is still importing:
# nothing has started, nothing to save; it leaves quietly, not with a KeyboardInterrupt traceback
EARLY = {s: signal.signal(s, lambda signum, frame: os._exit(128 + signum)) for s in (signal.SIGINT, signal.SIGTERM)}

HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:  # run as a file (a worker of --jobs)
    sys.path[0] = os.path.dirname(HERE)
elif os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

from reproduce.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(early=EARLY))
