"""tools/release.py and tools/render_release.py: a fine-tuned pair packed as the repository keeps
a release, and the card (releases/README.md) rendered from its record."""

import json
import os

import pytest
import torch

import eval as evaluate_script
from core.results import result_names


def test_a_release_packs_both_checkpoints_and_its_card_reads_their_record(
    finetuned, pretrained, task_files, tmp_path, capsys
):
    """tools/release.py: the pretraining and its fine-tuning packed (bf16, xz), their logs and test
    evaluation kept; the card renders from that record; the packed fine-tuned checkpoint answers
    --text as the checkpoint it came from, rounded, would."""
    from core import checkpoint
    from tools import release, render_release

    ckpt = finetuned["unilm"]
    with pytest.raises(release.UserError, match="no evaluation .*eval-best-test.json"):
        release.release(pretrained["pmlm"], ckpt, "tiny", root=str(tmp_path))
    row = evaluate_script.main([ckpt, "--data", task_files["test"], "--latency-samples", "1"])[0]
    args = evaluate_script.get_args([ckpt, "--data", task_files["test"]])
    evaluation = result_names(ckpt, args)[0]
    with pytest.raises(release.UserError, match="another --init file"):
        release.release(pretrained["t5"], ckpt, "tiny", evaluation=evaluation, root=str(tmp_path))
    run = tmp_path / "run.json"
    run.write_text(
        json.dumps(
            {
                "machine": "a test",
                "date": "today",
                "pretrain-log.jsonl": {"command": "python train.py", "seconds": 60.0},
                "finetune-log.jsonl": {"command": "python finetune.py", "pieces": [30.0, None, 90.0]},
            }
        )
    )
    sizes = release.release(pretrained["pmlm"], ckpt, "tiny", str(run), evaluation, root=str(tmp_path))
    assert sorted(sizes) == ["releases/tiny/pretrained.pt.xz", "releases/tiny/summarize.pt.xz"]
    assert all(os.path.getsize(tmp_path / f) == n for f, n in sizes.items())
    card = render_release.release(str(tmp_path / "results" / "release-tiny" / "run.json"))
    assert "`releases/tiny/pretrained.pt.xz` | pretrained for 4 steps" in card
    assert f"{row['rougeL']:.2f} |" in card and f"test split ({row['n']} examples" in card
    assert (
        "* `python train.py` (1 min 0 s)\n* `python finetune.py` (in 3 pieces continued with --resume; the 2 "
        "timed took 2 min 0 s)" in card
    )
    shown = render_release.examples(str(tmp_path / "results" / "release-tiny" / "examples.jsonl"))
    outputs = os.path.join(os.path.dirname(evaluation), "outputs-" + os.path.basename(evaluation)[5:-5] + ".jsonl")
    first = json.loads(open(outputs).readline())
    assert shown.startswith(f"> {first['source']}\n") and f"* the model: *{first['prediction']}* (ROUGE-L" in shown
    packed = str(tmp_path / "releases" / "tiny" / "summarize.pt.xz")
    rounded = tmp_path / "rounded.pt"
    torch.save(checkpoint.rounded(torch.load(ckpt, weights_only=True)), rounded)
    doc = "a library for reading and writing compressed archives in many formats"
    capsys.readouterr()
    assert evaluate_script.main([packed, "--text", doc]) == evaluate_script.main([str(rounded), "--text", doc])
