"""The released models' card (releases/README.md): what each packed checkpoint is, drawn from the
record tools/release.py keeps in results/release-NAME/ (its logs, its test evaluation, run.json)."""

import json
import os

from tools.figures import ROOT, _jsonl, held_out


def release(path):
    """results/release-NAME/run.json: one row per released file (what it is, how it was made, what it
    measured), then the commands, machine, commit and date of the runs."""
    folder = os.path.dirname(os.path.join(ROOT, path))
    with open(os.path.join(ROOT, path)) as f:
        run = json.load(f)
    with open(os.path.join(folder, "eval.json")) as f:
        ev = json.load(f)
    evals, key = held_out(os.path.join(folder, "pretrain-log.jsonl"))
    last, ent = evals[-1], evals[-1]["unigram_entropy"]
    tuned = [r for r in _jsonl(os.path.join(folder, "finetune-log.jsonl")) if "valid_loss" in r]
    best = min(tuned, key=lambda r: r["valid_loss"])
    pre_file, ft_file = sorted(run["files"], key=lambda p: not p.endswith("pretrained.pt.xz"))
    scores = (
        "ROUGE-1/2/L {rouge1:.2f} / {rouge2:.2f} / {rougeL:.2f}".format(**ev)
        if "rougeL" in ev
        else f"accuracy {ev['accuracy']:.2f}"
    )
    size = {f: f"{n / 2**20:.1f} MiB" for f, n in run["files"].items()}
    rows = [
        "| file | what it is | size |",
        "|---|---|---|",
        f"| `{pre_file}` | pretrained for {last['step']} steps; held-out {key[6:]} {last[key]:.3f}, "
        f"{ent - last[key]:.2f} nats under the unigram entropy {ent:.3f} | {size[pre_file]} |",
        f"| `{ft_file}` | fine-tuned from it ({ev['task']}); lowest validation loss {best['valid_loss']:.3f} at step "
        f"{best['step']}; test split ({ev['n']} examples, {ev['decoding']}): {scores} | {size[ft_file]} |",
    ]
    order = ("pretrain-log.jsonl", "finetune-log.jsonl", "eval.log")  # as they ran, then any other
    parts = sorted(
        (order.index(k) if k in order else len(order), k)
        for k, v in run.items()
        if isinstance(v, dict) and "command" in v
    )
    made = [f"* `{run[k]['command']}` ({made_in(run[k])})" for _, k in parts]
    return (
        "\n".join(rows)
        + "\n\nMade at commit "
        + run["commit"]
        + f" on {run['date']}, {run['machine']}:\n\n"
        + "\n".join(made)
        + "\n"
    )


def examples(path):
    """results/release-NAME/examples.jsonl: each test example as the model saw it, the reference and the
    model's output (with its ROUGE-L)."""
    out = []
    for r in _jsonl(os.path.join(ROOT, path)):
        score = f" (ROUGE-L {r['rougeL']:.1f})" if "rougeL" in r else ""
        out += [
            f"> {r['source']}",
            "",
            f"* reference: *{r['reference']}*",
            f"* the model: *{r['prediction']}*{score}",
            "",
        ]
    return "\n".join(out)


def made_in(part):
    """A run's wall time, or where it ran in pieces (stopped and continued with --resume), how many and
    the time of those whose clock was kept."""
    if "pieces" not in part:
        return took(part["seconds"])
    kept = [p for p in part["pieces"] if p is not None]
    return f"in {len(part['pieces'])} pieces continued with --resume; the {len(kept)} timed took {took(sum(kept))}"


def took(secs):
    """N s, or N min S s."""
    return f"{secs // 60:.0f} min {secs % 60:.0f} s" if secs >= 60 else f"{secs:.0f} s"


def five_minutes(path):
    """results/five-minute/run.json (tools/five_minutes.py): each command of the path, what it shows,
    its wall time and the last lines it printed; then the whole path's time and where it ran."""
    with open(os.path.join(ROOT, path)) as f:
        run = json.load(f)
    out = []
    for i, step in enumerate(run["steps"], 1):
        out += [
            f"{i}. {step['shows'][0].upper()}{step['shows'][1:]} ({took(step['seconds'])}):",
            "",
            "   ```bash",
            f"   {step['command']}",
            "   ```",
            "",
            "   ```",
        ]
        out += [f"   {line}" for line in step["output"]] + ["   ```", ""]
    total = sum(step["seconds"] for step in run["steps"])
    return (
        "\n".join(out) + f"\nIn all {took(total)}, at {run['commit']} on {run['date']} ({run['machine']}, "
        f"OMP_NUM_THREADS={run['threads']}).\n"
    )
