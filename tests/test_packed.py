"""Packed checkpoints (core/checkpoint.py): the weights the repository keeps, bf16 and
xz-compressed, read back by every script as a checkpoint whose weights bf16 rounded."""

import os

import pytest
import torch

from core import checkpoint
from core.errors import UserError


def a_state():
    g = torch.Generator().manual_seed(0)
    model = {"w": torch.randn(64, 48, generator=g), "ids": torch.arange(5)}
    return dict(
        kind="pretrain/pmlm",
        model=model,
        model_config={},
        args={"steps": 3},
        step=3,
        tokenizer=torch.zeros(4, dtype=torch.uint8),
        optimizer={"state": {}},
        rng={"torch": torch.zeros(2)},
        data={"pos": 7},
    )


def test_packed_weights_are_the_rounded_weights(tmp_path):
    path = str(tmp_path / "pre.pt.xz")
    size = checkpoint.save_packed(path, a_state())
    assert size == os.path.getsize(path) and size < 64 * 48 * 2 + 4096
    state = checkpoint._read(path)
    w = a_state()["model"]["w"]
    assert state["model"]["w"].dtype == torch.float32
    assert torch.equal(state["model"]["w"], w.to(torch.bfloat16).float())
    assert not torch.equal(state["model"]["w"], w)  # rounded, not the original
    assert torch.equal(state["model"]["ids"], torch.arange(5))
    assert "optimizer" not in state and "rng" not in state and "data" not in state
    assert state["step"] == 3 and state["packed"]["dtype"] == "bfloat16"
    # rounded() gives what a run reads from the packed copy, keeping what a resume needs
    r = checkpoint.rounded(a_state())
    assert torch.equal(r["model"]["w"], state["model"]["w"]) and r["optimizer"] == {"state": {}}


def test_packed_bytes_are_the_same_for_the_same_state(tmp_path):
    a, b = (checkpoint.packed_bytes(checkpoint.pack(a_state())) for _ in range(2))
    assert a == b
    # packing the rounded copy again gives the same bytes: an archive saved twice writes nothing
    assert checkpoint.packed_bytes(checkpoint.pack(checkpoint.rounded(a_state()))) == a


def test_a_packed_checkpoint_cannot_be_resumed(tmp_path):
    path = str(tmp_path / "pre.pt.xz")
    checkpoint.save_packed(path, a_state())
    with pytest.raises(UserError, match="packed checkpoint .* cannot resume"):
        checkpoint.check_keys(path, checkpoint._read(path), need=("optimizer",))


def test_a_damaged_packed_checkpoint_says_so(tmp_path):
    path = str(tmp_path / "pre.pt.xz")
    with open(path, "wb") as f:
        f.write(b"\xfd7zXZ\x00garbage")
    with pytest.raises(UserError, match="not a readable checkpoint"):
        checkpoint.load(path)
