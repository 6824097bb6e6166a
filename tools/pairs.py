"""reproduce/significance.py's paired comparisons as a table, the file a doc's `study` block
renders (tools/records.py: with the command, the machine and the date):

    python -m tools.pairs A/outputs-best-test.jsonl B/outputs-best-test.jsonl [C D ...] --json PATH

A side of several seeds is their outputs files joined by commas; each pair gives one row per
metric (accuracy for classification, ROUGE-1/2/L for summaries), its interval counting the
fine-tuning seed's spread (--sigma, else the sides' own seeds' where a side has several).
"""

import argparse
import sys

from reproduce import significance
from tools import records

COLUMNS = [
    ("A", "a", "{}"),
    ("B", "b", "{}"),
    ("seeds", "seeds", "{}"),
    ("examples", "n", "{:,}"),
    ("metric", "metric", "{}"),
    ("A - B", "difference", "{:+.2f}"),
    ("example SE", "se", "{:.2f}"),
    ("seed spread", "sigma", "{:.2f}"),
    ("95% interval", "interval", "{}"),
    ("A > B", "verdict", "{}"),
    ("detectable", "detectable", "{:.2f}"),
]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="outputs files in pairs, A B [C D ...]; a side's seeds joined by commas")
    p.add_argument("--json", required=True, help="the table's file")
    p.add_argument(
        "--sigma",
        type=float,
        help="the seed spread (reproduce/significance.py; default: pooled from "
        "the sides' own seeds, 0 with one seed a side)",
    )
    a = p.parse_args(argv)
    if len(a.files) % 2:
        p.error(f"give the outputs files in pairs (A B [C D ...]); {len(a.files)} given")
    try:
        rows = significance.pair_rows(a.files, a.sigma)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    records.write(a.json, ["python", "-m", "tools.pairs"] + argv, COLUMNS, rows)
    print("\n".join(records.markdown(COLUMNS, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
