"""One exception type for problems the user can fix (a missing file, a malformed line, a foreign
checkpoint). Scripts catch it and print one line instead of a traceback."""

import functools
import os
import sys
import time


class UserError(Exception):
    """A problem with the user's input, stated so that it names the file and the fix."""


class Interrupted(Exception):
    """A run stopped by a signal after saving; `status` is the exit status (128 + signal)."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


ACTIVE = []  # the signal handlers a training loop installed (guards.StopSignals), restored whatever ends the script


def restore_signals():
    for s in list(ACTIVE):
        s.restore()


def lost_peer(e):
    """Whether an exception is a collective failing because another process of the run is gone."""
    text = str(e)
    return int(os.environ.get("WORLD_SIZE", 1)) > 1 and (
        type(e).__module__.startswith("torch.distributed")
        or "Connection closed by peer" in text
        or "Connection reset by peer" in text
        or "Broken pipe" in text
    )


def main_guard(fn):
    """Decorate a script's main(): a UserError becomes `error: ...` on stderr and exit status 2;
    an Interrupted run its one line and 128 + the signal number; Ctrl-C outside the training
    loop (which saves, see guards.StopSignals) one line and status 130.

    Under torchrun every process usually meets the same bad input. Rank 0 prints at once; the
    others wait a moment first, and torchrun, which stops the remaining workers as soon as one
    fails, ends them before they repeat the line, so the user's first line is the one error.
    A process whose error is its own still prints it after the wait (10 s: a loaded machine can
    take seconds to end rank 0 and notice)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Interrupted as e:
            if str(e):
                print(str(e), file=sys.stderr, flush=True)
            sys.exit(e.status)
        except KeyboardInterrupt:  # before the training loop, or a second Ctrl-C within it
            if int(os.environ.get("RANK", 0)) == 0:
                print("interrupted; nothing more was saved", file=sys.stderr, flush=True)
            sys.exit(130)
        except UserError as e:
            rank = int(os.environ.get("RANK", 0))
            if rank > 0:
                time.sleep(10.0)
                # the other processes may have printed progress meanwhile: this line says it is the reason
                print(
                    f"error: {e} (process {rank} of {os.environ.get('WORLD_SIZE', '?')}: this stopped the run)",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                print(f"error: {e}", file=sys.stderr, flush=True)
            sys.exit(2)
        except RuntimeError as e:
            if not lost_peer(e):
                raise
            # another process stopped on an error of its own and printed it (distributed.compute_cleanup)
            print(
                f"stopped: process {os.environ.get('RANK', 0)} lost contact with another process of this run, "
                f"which stopped first (its error is the line above)",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(1)
        finally:
            restore_signals()

    return wrapped
