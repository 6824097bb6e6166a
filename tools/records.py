"""A study's or a benchmark's table as data: what tools/render_docs.py's `study` blocks render.

    write(path, command, columns, rows, note=None, dtype=None)

`columns` is a list of (header, key, format) and `rows` a list of dicts holding the raw values;
the file records with them the command that made it, the machine and versions
(reproduce/report.py environment), the date and the load average of the machine while it ran
(timings on a shared CPU mean little without it).
"""

import datetime
import json
import os
import re
import shlex
import sys


def load_average():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def write(path, command, columns, rows, note=None, dtype=None):
    """Write the table to `path` (JSON), the folder made if needed; `command` a string or an argv;
    `dtype` what the script computed in, where that is not what the scripts' `--dtype auto` picks."""
    from reproduce.report import environment

    if not isinstance(command, str):
        command = " ".join(shlex.quote(a) for a in command)
    env = environment()
    if dtype:
        env = re.sub(r"compute dtype [^;]*", f"compute dtype {dtype}", env)
    d = {
        "command": command,
        "environment": env,
        "date": datetime.date.today().isoformat(),
        "load_average": load_average(),
        "columns": [list(c) for c in columns],
        "rows": rows,
    }
    if note:
        d["note"] = note
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


def cell(value, fmt):
    """One cell: '-' for a missing value, else the value through its column's format."""
    return "-" if value is None else fmt.format(value)


def markdown(columns, rows):
    """The rows as a markdown table, one line each (reproduce/report.py's table, each cell formatted)."""
    from reproduce.report import table

    return table([h for h, _, _ in columns], [[cell(r.get(k), f) for _, k, f in columns] for r in rows])


def table(d):
    """The markdown table of a written file, then where it came from."""
    missing = [k for k in ("columns", "rows", "command", "date", "environment") if k not in d]
    if missing:
        raise ValueError(f"no {', '.join(missing)}: not a file tools/records.py wrote")
    out = markdown(d["columns"], d["rows"])
    load = f", load average {d['load_average']:.1f}" if d.get("load_average") is not None else ""
    out += [
        "",
        f"`{d['command']}` ({d['date']}{load}; {d['environment']})." + (f" {d['note']}" if d.get("note") else ""),
    ]
    return "\n".join(out) + "\n"
