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
    scores = ("ROUGE-1/2/L {rouge1:.2f} / {rouge2:.2f} / {rougeL:.2f}".format(**ev) if "rougeL" in ev
              else f"accuracy {ev['accuracy']:.2f}")
    size = {f: f"{n / 2 ** 20:.1f} MiB" for f, n in run["files"].items()}
    rows = [
        "| file | what it is | size |", "|---|---|---|",
        f"| `{pre_file}` | pretrained for {last['step']} steps; held-out {key[6:]} {last[key]:.3f}, "
        f"{ent - last[key]:.2f} nats under the unigram entropy {ent:.3f} | {size[pre_file]} |",
        f"| `{ft_file}` | fine-tuned from it ({ev['task']}); lowest validation loss {best['valid_loss']:.3f} at step "
        f"{best['step']}; test split ({ev['n']} examples, {ev['decoding']}): {scores} | {size[ft_file]} |",
    ]
    made = [f"* `{part['command']}` ({part['seconds'] / 60:.0f} min)" for name, part in sorted(run.items())
            if isinstance(part, dict) and "command" in part]
    return ("\n".join(rows) + "\n\nMade at commit " + run["commit"] + f" on {run['date']}, {run['machine']}:\n\n"
            + "\n".join(made) + "\n")


def examples(path):
    """results/release-NAME/examples.jsonl: each test example as the model saw it, the reference and the
    model's output (with its ROUGE-L)."""
    out = []
    for r in _jsonl(os.path.join(ROOT, path)):
        score = f" (ROUGE-L {r['rougeL']:.1f})" if "rougeL" in r else ""
        out += [f"> {r['source']}", "", f"* reference: *{r['reference']}*", f"* the model: *{r['prediction']}*{score}",
                ""]
    return "\n".join(out)
