"""The scripts' and the plan's defaults as data, so that a default changed in code is a default
named in CHANGELOG.md (tests/test_changelog.py).

    python -m tools.defaults            # the defaults that changed since results/defaults.json, and
                                        # whether CHANGELOG.md's newest entry names each
    python -m tools.defaults --write    # record today's, once the newest entry names every change

results/defaults.json holds the defaults as they were when its CHANGELOG entry was written. A
default that differs from it must be named in a newer entry: a script's flag as `--flag`, a budget's
field as "the NAME budget".
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "results", "defaults.json")


def current():
    """{"train.py --flag": default, ..., "plan cpu steps": ...}: every default a run depends on."""
    import eval as evaluate_script
    import finetune
    import train
    from reproduce.plan import BUDGETS

    out = {}
    for name, module in (("train.py", train), ("finetune.py", finetune), ("eval.py", evaluate_script)):
        parser = capture_parser(module)
        for a in parser._actions:
            if a.option_strings and a.dest != "help":
                out[f"{name} {a.option_strings[0]}"] = (
                    a.default if isinstance(a.default, (int, float, str, bool, type(None))) else repr(a.default)
                )
    for budget, fields in BUDGETS.items():
        for k, v in fields.items():
            if isinstance(v, (int, float, str, bool, type(None))):
                out[f"plan {budget} {k}"] = v
    return out


def newest_entry():
    """(the heading of CHANGELOG.md's newest entry, its text)."""
    text = open(os.path.join(ROOT, "CHANGELOG.md")).read()
    parts = text.split("\n## ")[1:]
    heading, _, body = parts[0].partition("\n")
    return heading.strip(), body


def unnamed_changes():
    """[(key, recorded, now)] of the defaults changed since results/defaults.json that CHANGELOG.md's
    newest entry, written after that record, does not name; and that record's entry."""
    with open(PATH) as f:
        recorded = json.load(f)
    heading, body = newest_entry()
    changed = [
        (k, v, recorded["defaults"].get(k, "(absent)"))
        for k, v in current().items()
        if recorded["defaults"].get(k, "(absent)") != v
    ]
    if not changed:
        return [], recorded["entry"]
    fresh = heading != recorded["entry"]

    def named(key):
        words = key.split()
        if words[0] == "plan":
            return f"the {words[1]} budget" in body.lower() or f"`{words[1]}` budget" in body.lower()
        return f"`{words[1]}" in body

    return [(k, old, v) for k, v, old in changed if not (fresh and named(k))], recorded["entry"]


def capture_parser(module):
    """The argparse parser a script's get_args builds (its parse_args intercepted)."""
    seen = {}
    real = argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):
        seen["p"] = self
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = grab
    try:
        module.get_args([])
    except SystemExit:
        pass
    finally:
        argparse.ArgumentParser.parse_args = real
    return seen["p"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", action="store_true", help=f"record the defaults in {os.path.relpath(PATH, ROOT)}")
    a = p.parse_args(argv)
    missing, entry = unnamed_changes()
    for k, old, now in missing:
        print(f"{k}: {old!r} -> {now!r}, not named in a CHANGELOG.md entry newer than {entry}")
    if a.write:
        if missing:
            print("error: name these changes in a new CHANGELOG.md entry first", file=sys.stderr)
            return 1
        with open(PATH, "w") as f:
            json.dump(dict(entry=newest_entry()[0], defaults=current()), f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {os.path.relpath(PATH, ROOT)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
