"""A fine-tuned encoder reads its source as its pretraining showed it text: [SOS] first for MLAE and
for a PMLM/MLM stack used as an encoder (with that stack's first segment), "SRC [EOS]" for T5."""

import dataclasses

import torch

from core.config import preset
from core.architectures import build_model, seq2seq_arch, seq2seq_ops
from core.mlae.model import MLAE, init_from_pretrained, mlae_example
from core.model import UnifiedLM
from core.t5 import encoder_input
from core.tokenizer import SOS


def tiny_cfg(tokenizer):
    return dataclasses.replace(preset("tiny", vocab_size=tokenizer.vocab_size), dropout=0.0)


def fine_tuned(arch, cfg, state_dict, style=None, nar=False):
    arch, cfg = seq2seq_arch(arch, cfg, nar, style)
    model = build_model(arch, cfg)
    init_from_pretrained(model, state_dict)
    return arch, cfg, model.eval()


def test_roberta_encoder_computes_what_the_pretrained_stack_computed(tokenizer):
    """The MLM/PMLM stack as RoBERTa's encoder: on "[SOS] SRC [EOS]" its hidden states are those the
    pretrained stack gave the same tokens in segment 0, all CONTEXT (bidirectional)."""
    torch.manual_seed(0)
    cfg = tiny_cfg(tokenizer)
    stack = UnifiedLM(cfg).eval()
    arch, cfg2, model = fine_tuned("unilm", cfg, stack.state_dict(), style="seq2seq")
    assert arch == "roberta-s2s" and cfg2.enc_sos and cfg2.enc_segment
    ids = tokenizer.encode(["a library for parsing command line options"])[0]
    batch = seq2seq_ops(arch, sos=cfg2.enc_sos).batch([(ids, ids[:3])], tokenizer, 40, 8)
    src = batch.src
    assert src[0, 0].item() == SOS and src[0, -1].item() == tokenizer.eos_id
    pos = torch.arange(src.shape[1])[None]
    zero = torch.zeros_like(src)
    with torch.no_grad():
        want = stack(src, pos, zero, zero, zero, batch.src_valid)
        got = model.encode(src, pos, batch.src_valid)
    torch.testing.assert_close(got, want)
    # without the segment embedding (the old layout) the states differ: the test can fail
    model.cfg = dataclasses.replace(cfg2, enc_segment=False)
    with torch.no_grad():
        assert not torch.allclose(model.encode(src, pos, batch.src_valid), want, atol=1e-4)


def test_mlae_sources_start_with_sos_as_in_pretraining(tokenizer):
    """MLAE pretrains on "[SOS] TEXT [EOS]"; its seq2seq, UniLM-style and NAR fine-tunings, and
    their decoders, feed "[SOS] SRC [EOS]". T5's encoder never saw [SOS], and gets none."""
    import numpy as np

    cfg = tiny_cfg(tokenizer)
    ex = mlae_example(np.arange(10, 30), np.random.default_rng(0), tokenizer)
    assert ex["enc_tok"][0] == SOS and ex["enc_pos"][0] == 0  # what pretraining's encoder reads first
    mlae = MLAE(cfg, "a")
    ids = tokenizer.encode(["a small tool"])[0]
    for style, nar in ((None, False), ("unilm", False), (None, True)):
        arch, cfg2, model = fine_tuned("mlae-a", cfg, mlae.state_dict(), style=style, nar=nar)
        assert cfg2.enc_sos, arch
        src = seq2seq_ops(arch, sos=cfg2.enc_sos).batch([(ids, ids)], tokenizer, 40, 8).src
        assert src[0, 0].item() == SOS and src[0, 1 : len(ids) + 1].tolist() == list(ids), arch
        assert encoder_input(model, [ids], tokenizer)[0][0, 0].item() == SOS, arch
    t5_arch, t5_cfg = seq2seq_arch("t5", cfg, False, None)
    assert not t5_cfg.enc_sos
    assert seq2seq_ops(t5_arch).batch([(ids, ids)], tokenizer, 40, 8).src[0, 0].item() == ids[0]
