"""Pretraining speed of MLAE against the MLM, the PMLM and T5 at one preset: tokens per second of a
few `python train.py` steps of each objective, the runs interleaved (repeat r of every variant
before repeat r + 1 of any), on the embedded corpus.

    OMP_NUM_THREADS=1 python -m studies.pretrain_speed --json results/studies/pretrain-speed.json

The rate is train.py's own over the steps after the first --log-every (the first ones pay for
warm-up). On a CPU shared with other jobs it moves with their load, which the file records.
"""

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from core.config import PRESETS, depths  # noqa: E402
from tools import records  # noqa: E402

VARIANTS = {
    "pmlm": ("PMLM", ["--objective", "pmlm"]),
    "mlm": ("MLM", ["--objective", "mlm"]),
    "t5": ("T5", ["--objective", "t5"]),
    "mlae-b": ("MLAE, decoder (b)", ["--objective", "mlae", "--decoder", "b"]),
    "mlae-a": ("MLAE, decoder (a)", ["--objective", "mlae", "--decoder", "a"]),
    "mlae-b-sym": (
        "MLAE, decoder (b), symmetric",
        ["--objective", "mlae", "--decoder", "b", "--enc-layers", "3", "--dec-layers", "3"],
    ),
}
COLUMNS = [
    ("objective", "name", "{}"),
    ("layers", "depths", "{}"),
    ("parameters", "params", "{:.2f}M"),
    ("tokens/s, best", "best", "{:,.0f}"),
    ("tokens/s, every repeat", "each", "{}"),
]


def layers(model, flags):
    """The stack's layers (PMLM, MLM) or the encoder-decoder's, as train.py builds them."""
    if flags[1] in ("pmlm", "mlm"):
        return f"{PRESETS[model]['n_layers']}L"
    given = {f: int(flags[flags.index(f) + 1]) for f in ("--enc-layers", "--dec-layers") if f in flags}
    enc, dec = depths(model, given.get("--enc-layers"), given.get("--dec-layers"))
    return f"{enc}L-{dec}L"


def one(flags, args, out):
    cmd = [
        sys.executable,
        "train.py",
        *flags,
        "--model",
        args.model,
        "--steps",
        str(2 * args.log_every),
        "--log-every",
        str(args.log_every),
        "--eval-every",
        "100000",
        "--eval-examples",
        "32",
        "--save-every",
        "100000",
        "--overwrite",
        "--out",
        out,
    ]
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"error: train.py failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    said = re.search(r"([\d.]+)M parameters", r.stdout)
    if said is None:
        sys.exit(f"error: train.py's output no longer says its parameters ('NM parameters'):\n{r.stdout[-2000:]}")
    params = float(said.group(1))
    with open(os.path.join(out, "log.jsonl")) as f:
        rate = [x["tokens_per_s"] for x in map(json.loads, f) if "tokens_per_s" in x][-1]
    return params, rate


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--log-every", type=int, default=4, help="steps timed: 2x this run, the second half timed")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"any of {', '.join(VARIANTS)}")
    p.add_argument("--out", default="checkpoints/pretrain-speed")
    p.add_argument("--json", default=None, help="also write the table to this file")
    args = p.parse_args()
    if args.log_every < 1 or args.repeats < 1:
        p.error(f"--log-every and --repeats must be at least 1 (got {args.log_every} and {args.repeats})")
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; pick from {list(VARIANTS)}")
    rows = {n: {"name": VARIANTS[n][0], "depths": layers(args.model, VARIANTS[n][1]), "rates": []} for n in names}
    for rep in range(args.repeats):
        for i, n in enumerate(names):
            rows[n]["params"], rate = one(VARIANTS[n][1], args, os.path.join(args.out, str(i)))
            rows[n]["rates"].append(rate)
            print(f"repeat {rep + 1}/{args.repeats}, {VARIANTS[n][0]}: {rate:,.0f} tokens/s", flush=True)
    for r in rows.values():
        r["best"] = max(r["rates"])
        r["each"] = ", ".join(f"{x / 1e3:.1f}k" for x in r["rates"])
    rows = list(rows.values())
    print("\n".join(records.markdown(COLUMNS, rows)))
    if args.json:
        records.write(
            args.json,
            ["python", "-m", "studies.pretrain_speed", *sys.argv[1:]],
            COLUMNS,
            rows,
            note=f"`{args.model}`, steps {args.log_every + 1}-{2 * args.log_every} of each run timed, "
            f"{args.repeats} runs per objective interleaved.",
        )


if __name__ == "__main__":
    main()
