"""studies/ae_probe.py: the AE loss of a PMLM or MLM checkpoint, split by what each target's input shows."""

import os
import sys

import train
from conftest import ROOT, TINY

sys.path.insert(0, os.path.join(ROOT, "studies"))
import ae_probe  # noqa: E402


def test_probe_splits_the_targets_by_what_the_input_shows(text_file, tmp_path):
    out = str(tmp_path / "mlm")
    train.main(["--data", text_file, "--objective", "mlm", "--steps", "2", "--out", out] + TINY)
    label, res = ae_probe.probe(os.path.join(out, "last.pt"), 16, 8)
    assert "pretrain/mlm" in label and set(res) == set(ae_probe.CORRUPTIONS)
    for name, sums in res.items():
        n = {k: c for k, (_, c) in sums.items()}
        assert n["all"] > 100 and n["[MASK]"] + n["random"] + n["kept"] == n["all"], (name, n)
        # the loss over every target is the count-weighted mean of its parts
        parts = sum(sums[k][0] for k in ("[MASK]", "random", "kept"))
        assert abs(parts - sums["all"][0]) < 1e-3 * sums["all"][0]
    kept = lambda name: res[name]["kept"][1] / res[name]["all"][1]
    assert 0.03 < kept("80/10/10") < 0.2  # BERT's 10% kept
    assert kept("90/10 (--keep 0)") < 0.02  # none kept (a random token may draw the original)
