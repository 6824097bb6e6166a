"""python -m reproduce: the runner of the papers' comparisons (reproduce/runner.py; --help)."""

import os
import signal
import sys

# Ctrl-C (or a supervisor passing it on to a worker of --jobs) while the runner is still importing:
# nothing has started, nothing to save; it leaves quietly, not with a KeyboardInterrupt traceback
EARLY = {s: signal.signal(s, lambda signum, frame: os._exit(128 + signum)) for s in (signal.SIGINT, signal.SIGTERM)}

from reproduce.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(early=EARLY))
