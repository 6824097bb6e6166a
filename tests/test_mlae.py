"""MLAE (core/mlae.py): the encoder sees only the unmasked tokens, the decoder variants see what
they should, and the pipelines run end to end on the tiny preset."""
import os

import numpy as np
import pytest
import torch

import train
from conftest import TINY, read_log
from core.config import preset
from core.mlae import MLAE, decoder_inputs, mlae_example, collate
from core.t5 import IGNORE
from core.tokenizer import MASK

V = 120


class Tok:  # the reserved ids the examples need
    sos_id, eos_id, mask_id, pad_id = 2, 3, MASK, 0


def tiny_model(variant, seed=0):
    torch.manual_seed(seed)
    cfg = preset("tiny", vocab_size=V, n_dec_layers=1, dropout=0.0)
    return MLAE(cfg, variant).eval()


def batch_of(windows, seed=0):
    examples = [mlae_example(w, np.random.default_rng([seed, i]), Tok) for i, w in enumerate(windows)]
    return collate(examples, Tok), examples


def windows(n=3, length=(30, 41, 23), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(70, V, length[i % len(length)]) for i in range(n)]


def test_encoder_input_is_the_unmasked_tokens():
    ws = windows()
    batch, examples = batch_of(ws)
    for b, (w, e) in enumerate(zip(ws, examples)):
        n = len(w) + 2
        masked = (batch.full_target[b] != IGNORE).sum().item()
        assert masked == round(0.15 * len(w))  # 15% of the maskable tokens
        assert batch.enc_valid[b].sum().item() == n - masked  # the encoder's input length
        assert batch.msk_valid[b].sum().item() == masked
        pos = batch.enc_pos[b, :n - masked]
        assert torch.equal(batch.full_tok[b, pos], batch.enc_tok[b, :n - masked])  # original positions
        assert MASK not in batch.enc_tok[b].tolist()
        assert batch.full_tok[b, 0] == Tok.sos_id and batch.full_tok[b, n - 1] == Tok.eos_id


@pytest.mark.parametrize("variant", ["a", "b"])
def test_masked_ids_change_nothing(variant):
    """A masked token's id reaches neither the encoder nor the decoder: the examples rebuilt with
    other ids at the masked positions (same masks) give the same encoder and decoder outputs."""
    ws = windows()
    batch, _ = batch_of(ws)
    changed = []
    for b, w in enumerate(ws):
        w = w.copy()
        hidden = (batch.full_target[b, 1:len(w) + 1] != IGNORE).numpy()
        w[hidden] = 7 + (w[hidden] - 7 + 5) % (V - 7)
        changed.append(w)
    other, _ = batch_of(changed)
    assert not torch.equal(batch.msk_target, other.msk_target)
    model = tiny_model(variant)
    outs = []
    for bt in (batch, other):
        enc = model.encode(bt.enc_tok, bt.enc_pos, bt.enc_valid)
        dec = model(bt.enc_tok, bt.enc_pos, bt.enc_valid, *decoder_inputs(bt, variant, MASK)[:3])
        outs.append((enc[bt.enc_valid], dec))
    assert torch.equal(outs[0][0], outs[1][0])
    assert torch.equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("variant", ["a", "b"])
def test_every_mask_output_depends_on_every_latent(variant):
    batch, _ = batch_of(windows())
    model = tiny_model(variant)
    latents = model.encode(batch.enc_tok, batch.enc_pos, batch.enc_valid).detach().requires_grad_(True)
    dec_tok, dec_pos, dec_valid, predict, _ = decoder_inputs(batch, variant, MASK)
    h = model.decode_masked(latents, batch.enc_pos, batch.enc_valid, dec_tok, dec_pos, dec_valid)
    B, r = h.shape[0], torch.randn(h.shape[-1])  # (a plain sum of a LayerNorm's output is constant)
    for b in range(B):
        for j in predict[b].nonzero()[:, 0].tolist()[:3]:
            g, = torch.autograd.grad(h[b, j] @ r, latents, retain_graph=True)
            seen = g[b].abs().sum(-1) > 0  # (U,)
            assert torch.equal(seen, batch.enc_valid[b]), (variant, b, j)  # every latent, no padding
            assert g[[i for i in range(B) if i != b]].abs().sum() == 0  # and no other example's


def test_variant_b_placeholders_see_no_masked_token():
    """(b)'s decoder input is [MASK] at the masked positions and nothing else of the text."""
    batch, _ = batch_of(windows())
    dec_tok, dec_pos, dec_valid, predict, target = decoder_inputs(batch, "b", MASK)
    assert (dec_tok == MASK).all() and torch.equal(predict, dec_valid)
    assert torch.equal(dec_pos[dec_valid], (batch.full_target != IGNORE).nonzero()[:, 1])
    assert torch.equal(target, batch.full_target[batch.full_target != IGNORE])


def test_decoder_variants_have_the_right_layers():
    assert tiny_model("b").dec_layers[0].cross is not None
    assert tiny_model("a").dec_layers[0].cross is None


@pytest.fixture(scope="module")
def mlae_checkpoint(text_file, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("mlae"))
    train.main(["--data", text_file, "--objective", "mlae", "--steps", "4", "--out", out] + TINY)
    return out


def test_pretraining_runs(mlae_checkpoint):
    log = read_log(mlae_checkpoint)
    assert len([r for r in log if "loss" in r]) == 4
    assert all(np.isfinite(r["loss"]) for r in log if "loss" in r)
    assert [r for r in log if "valid_loss" in r]
    state = torch.load(os.path.join(mlae_checkpoint, "last.pt"), weights_only=True)
    assert state["kind"] == "pretrain/mlae"
    assert state["model_config"]["n_layers"] == 2 and state["model_config"]["n_dec_layers"] == 1  # tiny's 2L-1L
