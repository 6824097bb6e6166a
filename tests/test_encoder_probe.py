"""studies/encoder_probe.py: a linear probe of the vector a pretrained encoder's classifier reads."""

import json
import os

import pytest
import torch

import train
from conftest import TINY
from core.tasks import Examples
from studies import encoder_probe


def test_a_checkpoint_and_its_random_floor_are_probed_and_the_table_written(text_file, tmp_path, monkeypatch):
    out = str(tmp_path / "mlm")
    train.main(["--data", text_file, "--objective", "mlm", "--steps", "2", "--out", out] + TINY)
    # a small task in place of the embedded corpus's splits: two labels, 40 examples each a split
    words = ["alpha beta gamma", "delta epsilon zeta"]
    task = {
        s: Examples(
            s, [f"{w} {i}" for i in range(40) for w in words], [w.split()[0] for _ in range(40) for w in words], "test"
        )
        for s in ("train", "valid", "test")
    }
    monkeypatch.setattr(encoder_probe, "load_split", lambda t, split: task[split])
    path = tmp_path / "probe.json"
    rows = encoder_probe.main([os.path.join(out, "last.pt"), "--scratch", "--iterations", "30", "--json", str(path)])
    assert [r["run"] for r in rows] == ["mlm", "unilm with random weights"]
    assert rows[0]["step"] == 2 and rows[1]["step"] is None
    assert all(r["vector"] == "[SOS], the classifier's" for r in rows)
    assert all(r["train"] == 80 and r["l2"] in encoder_probe.L2_GRID for r in rows)
    saved = json.loads(path.read_text())
    assert saved["rows"] == rows and "encoder_probe" in saved["command"]


@pytest.mark.parametrize("arch, own", [("unilm", "first"), ("mlae-a", "last")])
def test_features_are_the_linear_layers_input(arch, own):
    """ "own" is what the classifier's linear layer reads: a unified stack's first token, an
    encoder-decoder's [EOS], the last token of each row."""
    from core.architectures import build_model
    from core.config import ModelConfig
    from core.tokenizer import Tokenizer

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=300, d_model=32, n_layers=1, n_dec_layers=1, n_heads=2, d_ff=64)
    model = build_model(arch, cfg, 3).eval()
    tok = Tokenizer.__new__(Tokenizer)
    monkey = dict(encode=lambda texts: [[5 + len(t) % 7, 9] for t in texts], sos_id=1, eos_id=2, pad_id=0)
    for k, v in monkey.items():
        setattr(tok, k, v)
    got = encoder_probe.features(model, tok, ["a", "bb", "ccc"], True, 16, 2, ("own", "first", "last"))
    from core.classify import classify_batch

    b = classify_batch(tok.encode(["a", "bb", "ccc"]), [0, 0, 0], tok, 16)
    captured = {}
    model.out.register_forward_pre_hook(lambda mod, inp: captured.setdefault("x", inp[0]))
    logits = model(b.tokens, b.valid).float()
    assert torch.allclose(got["own"], captured["x"].float()) and torch.allclose(
        model.out(got["own"]), logits, atol=1e-5
    )
    other = "last" if own == "first" else "first"
    assert torch.equal(got[own], got["own"]) and not torch.equal(got[other], got["own"])
    h = model.states(b.tokens, b.valid)
    assert torch.equal(got["last"], h[torch.arange(3), b.valid.long().sum(1) - 1].float())


def test_the_fit_separates_what_is_separable():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 8, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    wb = encoder_probe.fit(x, y, 4, 1e-4, 50)
    assert encoder_probe.accuracy(x, y, wb).mean() > 0.95
