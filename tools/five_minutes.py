"""The README's five-minute path, run and timed: each command as a newcomer types it on a fresh
clone, its wall time and the last lines it prints on stdout, kept in a results folder from which the README's
block is rendered (`python -m tools.render_docs`).

    python -m tools.five_minutes --out results/five-minute --machine "one thread of ..."

The commands are STEPS below, the one list the README's block shows: the released model's summary
of a typed document, its ROUGE on a sample of the test split beside the LEAD baselines, a short
fine-tuning from the released pretraining, and a tiny pretraining. They run in the repository root,
one after the other, with the environment this command has (set OMP_NUM_THREADS for the thread
count the record names).
"""

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m tools.five_minutes ...")

from tools.release import ROOT, commit  # noqa: E402

RELEASE = "releases/pmlm-small"
DOCUMENT = (
    "GNU Wget is a free software package for retrieving files using HTTP, HTTPS and FTP, the most "
    "widely-used Internet protocols. It is a non-interactive commandline tool, so it may easily be "
    "called from scripts."
)


class Step:
    """One command of the path: what it shows, its argv, and how many of its last lines of stdout to keep
    (where the scripts print their results; progress goes to stderr)."""

    def __init__(self, shows, argv, keep):
        self.shows, self.argv, self.keep = shows, argv, keep

    @property
    def command(self):
        return "python " + " ".join(shlex.quote(a) for a in self.argv)


STEPS = [
    Step(
        "the released summarizer's one-line summary of a document typed on the command line",
        ["eval.py", f"{RELEASE}/summarize.pt.xz", "--text", DOCUMENT],
        keep=1,
    ),
    Step(
        "its ROUGE on a fixed sample of the test split, beside the LEAD baselines, with its latency",
        ["eval.py", f"{RELEASE}/summarize.pt.xz", "--limit", "200"],
        keep=5,
    ),
    Step(
        "the fine-tuning loop, from the released pretraining on a small share of the training pairs for "
        "one epoch, validated at its end on a part of the validation split",
        [
            "finetune.py",
            "--init",
            f"{RELEASE}/pretrained.pt.xz",
            "--train-share",
            "0.03",
            "--epochs",
            "1",
            "--valid-examples",
            "500",
            "--rouge-examples",
            "50",
            "--out",
            "checkpoints/five-minute",
        ],
        keep=4,
    ),
    Step(
        "the pretraining loop, UniLMv2's PMLM on the `tiny` preset (its tokenizer trained first, as on any fresh "
        "clone): its held-out loss beside the unigram entropy, which a model that has learnt is under",
        ["train.py", "--model", "tiny", "--steps", "50", "--out", "checkpoints/five-minute-pretrain"],
        keep=2,
    ),
]


def run(steps, machine, root=ROOT):
    """Run each step in ROOT; returns the record: each command, its wall seconds and its last lines."""
    record = {
        "machine": machine,
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
        "threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "steps": [],
    }
    for i, step in enumerate(steps, 1):
        print(f"[{i}/{len(steps)}] {step.command}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        done = subprocess.run([sys.executable] + step.argv, cwd=root, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"error: {step.command} exited {done.returncode}:\n{done.stderr[-2000:]}")
        lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
        record["steps"].append(
            {"command": step.command, "shows": step.shows, "seconds": round(seconds, 1), "output": lines[-step.keep :]}
        )
        print(f"      {seconds:.0f} s", file=sys.stderr, flush=True)
    return record


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m tools.five_minutes", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="results/five-minute", help="the folder that keeps run.json")
    p.add_argument("--machine", required=True, help="the machine and what else ran on it, in words")
    a = p.parse_args(argv)
    missing = [
        x for s in STEPS for x in s.argv if x.startswith("releases/") and not os.path.exists(os.path.join(ROOT, x))
    ]
    if missing:
        print(
            f"error: {', '.join(sorted(set(missing)))} not found: the path runs the released model "
            "(python -m tools.release makes it)",
            file=sys.stderr,
        )
        return 2
    record = run(STEPS, a.machine)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "run.json"), "w") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
        f.write("\n")
    total = sum(s["seconds"] for s in record["steps"])
    print(f"{a.out}/run.json: {len(STEPS)} commands in {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
