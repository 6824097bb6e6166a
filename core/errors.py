"""One exception type for problems the user can fix (a missing file, a malformed line, a foreign
checkpoint). Scripts catch it and print one line instead of a traceback."""
import functools
import sys


class UserError(Exception):
    """A problem with the user's input, stated so that it names the file and the fix."""


def main_guard(fn):
    """Decorate a script's main(): a UserError becomes `error: ...` on stderr and exit status 2."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
    return wrapped
