"""Package a pretraining and its fine-tuning as a released model: each checkpoint packed (weights
only, bf16, xz: core/checkpoint.py), and the run's record (logs, test evaluation, commands and
times) copied into a results folder, from which releases/README.md's card is rendered
(`python -m tools.render_docs`).

    python -m tools.release --pretrained checkpoints/pretrain/last.pt \\
        --finetuned checkpoints/finetune/best.pt --name pmlm-small --run-json run.json

writes releases/NAME/pretrained.pt.xz and summarize.pt.xz (classify.pt.xz for a classifier), and
results/release-NAME/ (pretrain-log.jsonl, finetune-log.jsonl, the evaluation's eval-*.json of the
fine-tuned checkpoint, examples.jsonl: the first test examples with its outputs, run.json: each
command, its time, the machine, the commit). Both load as
any checkpoint: `python eval.py releases/NAME/summarize.pt.xz --text "..."`, `python finetune.py
--init releases/NAME/pretrained.pt.xz`.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m tools.release ...")

from core import checkpoint  # noqa: E402
from core.errors import UserError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit():
    """The commit of the tree this runs in ('unknown' outside git)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


EXAMPLES = 3  # the test split's first examples, shown as they come (not chosen)


def write_examples(outputs, path, n=EXAMPLES):
    """The first N rows of an evaluation's outputs (document, reference, the model's output), each with
    its ROUGE-L F1 (x100) where it is a summary: the worked example a card shows."""
    rows = []
    with open(outputs, encoding="utf-8") as f:
        for line in f:
            if line.strip() and len(rows) < n:
                rows.append(json.loads(line))
    if rows and rows[0].get("task") != "classify":
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
        for r in rows:
            r["rougeL"] = 100 * scorer.score(r["reference"], r["prediction"])["rougeL"].fmeasure
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def release(pretrained, finetuned, name, run_json=None, evaluation=None, root=ROOT):
    """Pack both checkpoints into ROOT/releases/NAME and copy their record into ROOT/results/release-NAME
    (EVALUATION: the fine-tuned checkpoint's eval-*.json, by default its whole test split's);
    returns {file: bytes} of the packed checkpoints."""
    pre = checkpoint.load(pretrained, kinds=("pretrain/",))
    ft = checkpoint.load(finetuned, kinds=("finetune/",))
    started = (ft.get("digests") or {}).get("init")  # the SHA-1 of the --init file the fine-tuning read
    if not ft["tokenizer"].equal(pre["tokenizer"]) or (started and started != checkpoint.digest(pretrained)):
        raise UserError(f"{finetuned} was not fine-tuned from {pretrained} (another --init file)")
    task = ft["kind"].split("/", 1)[1]
    base = os.path.splitext(os.path.basename(finetuned))[0]
    evaluation = evaluation or os.path.join(os.path.dirname(os.path.abspath(finetuned)), f"eval-{base}-test.json")
    if not os.path.exists(evaluation):
        raise UserError(f"no evaluation {evaluation}: run python eval.py {finetuned} first (the whole test split)")
    log = os.path.join(os.path.dirname(os.path.abspath(evaluation)), "eval.log")  # its table, where it was kept
    dest, record = os.path.join(root, "releases", name), os.path.join(root, "results", f"release-{name}")
    os.makedirs(record, exist_ok=True)
    for src, base in ((pretrained, "pretrain-log.jsonl"), (finetuned, "finetune-log.jsonl")):
        shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(src)), "log.jsonl"), os.path.join(record, base))
    shutil.copyfile(evaluation, os.path.join(record, "eval.json"))
    outputs = os.path.join(os.path.dirname(evaluation), "outputs-" + os.path.basename(evaluation)[5:-5] + ".jsonl")
    if os.path.exists(outputs):
        write_examples(outputs, os.path.join(record, "examples.jsonl"))
    if os.path.exists(log):
        shutil.copyfile(log, os.path.join(record, "eval.log"))
    run = {}
    if run_json:
        with open(run_json) as f:
            run = json.load(f)
    run["commit"] = run.get("commit") or commit()
    sizes = {}
    for state, base in ((pre, "pretrained"), (ft, task)):
        path = os.path.join(dest, base + checkpoint.PACKED)
        sizes[os.path.relpath(path, root)] = checkpoint.save_packed(path, state)
    run["files"] = sizes
    with open(os.path.join(record, "run.json"), "w") as f:
        json.dump(run, f, indent=1, sort_keys=True)
        f.write("\n")
    return sizes


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m tools.release", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--pretrained", required=True, help="train.py's last.pt")
    p.add_argument("--finetuned", required=True, help="finetune.py's best.pt, evaluated on the test split")
    p.add_argument("--name", required=True, help="the release's folder under releases/")
    p.add_argument(
        "--eval",
        default=None,
        help="the fine-tuned checkpoint's eval-*.json (default: its whole test split's, beside it); an "
        "eval.log beside it (eval.py's table) is kept too",
    )
    p.add_argument(
        "--run-json",
        default=None,
        help="a JSON file of how the runs ran (commands, seconds, machine), kept as the record's run.json",
    )
    a = p.parse_args(argv)
    try:
        sizes = release(a.pretrained, a.finetuned, a.name, a.run_json, a.eval)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path, n in sizes.items():
        print(f"{path}: {n / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
