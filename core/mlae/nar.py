"""Non-autoregressive generation shared by every NAR model: CMLM training batches, the
target-length predictor, and batched Mask-Predict decoding (Ghazvininejad et al. 2019,
"Mask-Predict: Parallel Decoding of Conditional Masked Language Models", sections 2-3; MLAE
section 3.4 and 4.4, where the pretrained MLAE, T5-NAR and CMLM from scratch all use it).

The model, NARModel, is the encoder-decoder of core/model.py with two changes: the decoder's
self-attention is bidirectional (every target token CONTEXT, padding unseen), and a length
predictor reads the encoder (a linear layer on the mean of the memory, trained jointly; CMLM
predicts the length from a special encoder token instead, which our encoders do not have).
T5-NAR is a checkpoint of this model pretrained by span corruption (train.py --objective t5-nar,
below; the MLAE paper, section 4.4), MLAE NAR an MLAE (b) checkpoint (its cross-attention
pretrained) or an (a) one (cross-attention copied from self-attention), CMLM from scratch a
fresh one (finetune.py --init none --arch t5 --nar). An autoregressively pretrained T5 loads
into it too (finetune.py --init T5 --nar): not the paper's T5-NAR, whose decoder was
pretrained non-autoregressively.

Training (CMLM, section 3.2 of Mask-Predict): for each target of length T (no [EOS]: the length
predictor says where it ends) k ~ Uniform{1..T} tokens are replaced by [MASK]; the loss is the
label-smoothed cross-entropy on them, plus 0.1 x the length cross-entropy (fairseq's
length_loss_factor). Which tokens are masked is drawn from a generator seeded by the batch's
contents, so a resumed run sees the masks the uninterrupted one saw.

Pretraining (T5-NAR, MLAE section 4.4): T5's span corruption (core/t5.py), with the decoder of
this model: it is fed the target with one [MASK] per masked token, sees them all (no causal
mask), predicts every masked token in parallel, and the length predictor learns the target's
length jointly. The target is T5's without its final [EOS], as in CMLM fine-tuning above, where
the length predictor says where a target ends. Its sentinels stay in the decoder input
("<s0> [M] [M] <s1> [M] [M]" for "<s0> x2 x3 <s1> x8 x9") and are not predicted: they mark which
span each [MASK] belongs to, as MLAE's decoder knows each [MASK]'s position in the text. Fed
[MASK] at the sentinels too, the decoder cannot tell a sentinel's position from a text token's
once a span's length is unknown; measured (README, "The papers' comparisons"), its text tokens
stayed above the unigram entropy after 800 steps. Two more choices of ours make it learn at all
(README, "T5-NAR"; studies/mlae_decoders.py measures each, on the word-cycle text):

  * the cross-attention's relative position bias (NARModel.cross_rel_pos): each target token's
    anchor is the source position of its span's sentinel ("x1 <s0> x4": the [MASK]s of <s0>'s span
    sit between x1 and x4), as MLAE (b)'s [MASK]s have their original positions;
  * the length predictor reads the memory detached in pretraining: span corruption makes targets
    of one length per window length, so at one --seq-len the predictor learns a single length,
    and its gradient, let into the encoder, drove the encoder's output to a constant that carried
    no source (held-out predictions identical for any source). Fine-tuning, whose lengths follow
    the source, lets it through, as CMLM does.

The reported loss is the token cross-entropy + 0.1 x len_loss; train.py prints both, and the
token cross-entropy alone as text_loss.

Decoding, Mask-Predict over this model, is in core/mlae/mask_predict.py.
"""

import hashlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..batch import Batch, flat_positions, pad_stack, source_array
from ..model import EncoderDecoder, Meta, local_rel_table, positions, select
from ..t5 import IGNORE, N_SPECIAL, span_corruption
from ..tokenizer import FIRST_SENTINEL

LENGTH_LOSS = 0.1


# -----------------------------------------------------------------------------
# the model


class NARModel(EncoderDecoder):
    """An encoder-decoder with a bidirectional decoder over [MASK]s and a length predictor.

    cross_rel_pos (T5-NAR pretraining, with cfg.rel_pos): the decoder's cross-attention adds a
    relative position bias between each target token's `anchor`, the source position of its
    span's sentinel, and each source position, from a table of its own (`cross_rel_table`), as
    MLAE (b)'s [MASK]s have one against the latents' original positions (core/mlae/model.py). Without
    it a [MASK] reaches its span's context only by matching its sentinel's content across the
    cross-attention, and T5-NAR's pretraining stays on the unigram plateau (README, "The papers'
    comparisons"). Fine-tuning has no anchors (a summary's tokens have no place in the source):
    a model built without the table drops a checkpoint's, as CMLM fine-tuning from MLAE (b) does."""

    def __init__(self, cfg, cross_rel_pos=False):
        super().__init__(cfg)
        if cfg.cross_anchor not in CROSS_ANCHORS:
            raise ValueError(f"unknown cross_anchor {cfg.cross_anchor!r}; pick one of {CROSS_ANCHORS}")
        self.length = nn.Linear(cfg.d_model, cfg.max_positions)  # class L: a target of L tokens
        nn.init.normal_(self.length.weight, std=cfg.d_model**-0.5)
        nn.init.zeros_(self.length.bias)
        keep = cross_rel_pos or cfg.cross_anchor != "none"
        self.cross_rel_table = local_rel_table(cfg) if keep and cfg.rel_pos else None
        self.register_load_state_dict_pre_hook(_drop_unused_cross_table)

    def length_logits(self, memory, src_valid):  # (B, S, C) -> (B, max_positions)
        w = src_valid[..., None].to(memory.dtype)
        return self.length((memory * w).sum(1) / w.sum(1).clamp_min(1.0))

    def decode_nar(self, tgt_in, tgt_valid, memory, src_valid, anchor=None):
        """tgt_in: (B, T) tokens ([MASK] where unknown); anchor: (B, T) long, each token's source
        position for the cross-attention's bias (used only with cross_rel_table). Returns hidden
        states (B, T, C)."""
        zero = torch.zeros_like(tgt_in)
        pos = positions(tgt_in)
        meta = Meta(zero, zero, tgt_valid)  # bidirectional
        mem_meta = self.memory_meta(src_valid)
        bias = self.rel_bias(self.dec_rel_table, pos, pos)
        cross = None
        if self.cross_rel_table is not None:
            if anchor is None and self.cfg.cross_anchor == "proportional":
                anchor = proportional_anchor(tgt_valid, src_valid)
            if anchor is None:
                raise ValueError("this NARModel has a cross-attention position bias: pass each target token's anchor")
            cross = self.rel_bias(self.cross_rel_table, anchor, positions(src_valid))
        x = self.emb(tgt_in, pos)
        for layer in self.dec_layers:
            x, _ = layer(x, meta, bias=bias, memory=memory, mem_meta=mem_meta, cross_bias=cross)
        return self.ln_dec(x)

    def forward(self, src, src_valid, tgt_in, tgt_valid, predict, anchor=None, length_grad=True):
        """Returns (logits (N, V) at the N True positions of `predict`, length logits (B, P)).
        length_grad=False: the length predictor reads the memory detached, so its loss trains
        it alone and never reaches the encoder (T5-NAR pretraining, t5_nar_loss_sums)."""
        pos = positions(src)
        memory = self.encode(src, pos, src_valid)
        h = self.decode_nar(tgt_in, tgt_valid, memory, src_valid, anchor)
        return self.head(select(h, predict)), self.length_logits(memory if length_grad else memory.detach(), src_valid)


# how a fine-tuning anchors a target token for the cross-attention's position bias, which pretraining
# (MLAE (b), T5-NAR) learnt against each [MASK]'s place in the source: a summary's tokens have no
# place there, so "none" drops the table, and "proportional" places token i of T at source position
# (i + 1/2) S / T, the summary laid evenly over its document (the T5-NAR table is kept the same way)
CROSS_ANCHORS = ("none", "proportional")


def proportional_anchor(tgt_valid, src_valid):
    """(B, T) long: target token i of a row with T valid tokens at source position
    floor((i + 1/2) S / T) of its S valid source tokens (padding: the last source position)."""
    t = tgt_valid.sum(1, keepdim=True).clamp_min(1)  # (B, 1)
    s = src_valid.sum(1, keepdim=True).clamp_min(1)
    i = torch.arange(tgt_valid.shape[1], device=tgt_valid.device)[None].expand_as(tgt_valid)
    return torch.minimum(((2 * i + 1) * s).div(2 * t, rounding_mode="floor"), s - 1)


def _drop_unused_cross_table(module, state_dict, prefix, *args):
    """A T5-NAR checkpoint's cross-attention table, loaded into a model without one (fine-tuning,
    classification), is dropped: only span corruption gives a target token a source position."""
    if module.cross_rel_table is None:
        state_dict.pop(prefix + "cross_rel_table", None)


# -----------------------------------------------------------------------------
# CMLM training batches and loss


def _batch_rng(arrays):
    digest = hashlib.sha1(b"".join(np.asarray(a, dtype=np.int64).tobytes() + b"|" for a in arrays)).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def nar_batch(pairs, tok, max_src, max_tgt, sos=False):
    """pairs: (source ids, target ids). Source = SRC + [EOS] ([SOS] first with sos; max_src tokens at most), target
    = TGT cut to max_tgt - 1 tokens (the length the [EOS] would take in an AR model), no [EOS].
    Fields: src, src_valid, tgt (the gold target), tgt_in (k of its tokens [MASK]ed), tgt_valid,
    tgt_out (the gold ids at the masked positions, IGNORE elsewhere), length. norm = masked."""
    sources = [source_array(s, tok, max_src, sos) for s, _ in pairs]
    targets = [np.array(list(t)[: max(1, max_tgt - 1)] or [tok.unk_id], dtype=np.int64) for _, t in pairs]
    rng = _batch_rng(sources + targets)
    tgt_in, tgt_out = [], []
    for t in targets:
        k = int(rng.integers(1, len(t) + 1))
        m = np.zeros(len(t), dtype=bool)
        m[rng.choice(len(t), k, replace=False)] = True
        tgt_in.append(np.where(m, tok.mask_id, t))
        tgt_out.append(np.where(m, t, IGNORE))
    src, src_valid = pad_stack(sources, tok.pad_id)
    tgt, tgt_valid = pad_stack(targets, tok.pad_id)
    tgt_in, _ = pad_stack(tgt_in, tok.pad_id)
    tgt_out, _ = pad_stack(tgt_out, IGNORE)
    length = torch.tensor([len(t) for t in targets])
    predict, predict_target = flat_positions(tgt_out != IGNORE, tgt_out)
    return Batch(
        norm=(tgt_out != IGNORE).sum(),
        n_tokens=src_valid.sum() + tgt_valid.sum(),
        src=src,
        src_valid=src_valid,
        tgt=tgt,
        tgt_in=tgt_in,
        tgt_valid=tgt_valid,
        tgt_out=tgt_out,
        length=length,
        predict=predict,
        predict_target=predict_target,
    )


def nar_loss_sums(model, batch, label_smoothing=0.1, length_grad=True):
    """Sums over the masked target tokens: loss (label-smoothed, plus LENGTH_LOSS x the length
    cross-entropy scaled to the masked count: after normalisation it is token mean + 0.1 x
    length mean), nll, hit, n; and the length's len_nll, len_hit, len_n. A batch with an
    `anchor` field (T5-NAR pretraining) passes it to the model; length_grad: NARModel.forward."""
    # the masked positions as flat indices made on the host with the batch (no host sync)
    logits, len_logits = model(
        batch.src,
        batch.src_valid,
        batch.tgt_in,
        batch.tgt_valid,
        batch.predict,
        batch.tensors.get("anchor"),
        length_grad,
    )
    logits, len_logits, target = logits.float(), len_logits.float(), batch.predict_target
    n = (batch.tgt_out != IGNORE).sum().float()
    len_ce = F.cross_entropy(len_logits, batch.length, reduction="sum")
    loss = F.cross_entropy(logits, target, reduction="sum", label_smoothing=label_smoothing)
    loss = loss + LENGTH_LOSS * len_ce * n / len(batch.length)
    return dict(
        loss=loss,
        nll=F.cross_entropy(logits.detach(), target, reduction="sum"),
        hit=(logits.argmax(-1) == target).float().sum(),
        n=n,
        len_nll=len_ce.detach(),
        len_hit=(len_logits.argmax(-1) == batch.length).float().sum(),
        len_n=torch.tensor(float(len(batch.length)), device=n.device),
    )


# -----------------------------------------------------------------------------
# T5-NAR pretraining: span corruption, every target token predicted from a [MASK]


def t5_nar_batch(stream, indices, tok, ratio=0.15, mean_span=3):
    """The examples `indices` of a TokenStream, span-corrupted as by t5_batch, in the layout of
    nar_batch: src "SRC' [EOS]", tgt the span-corruption target without its [EOS], tgt_in the
    target with every text token replaced by [MASK] and its sentinels kept ("<s0> [M] [M] <s1> [M]"),
    tgt_out the text tokens (IGNORE at the sentinels and padding), length, and anchor (B, T): the
    source position of the sentinel of each target token's span (sentinel_anchors)."""
    sources, targets, anchors = [], [], []
    for i in indices:
        window, rng = stream.window_at(i)
        src, tgt = span_corruption(window, rng, tok, ratio, mean_span)
        sources.append(src)
        targets.append(tgt[:-1])  # the [EOS]: the length predictor says where a target ends
        anchors.append(sentinel_anchors(src, tgt[:-1]))
    src, src_valid = pad_stack(sources, tok.pad_id)
    tgt, tgt_valid = pad_stack(targets, tok.pad_id)
    anchor, _ = pad_stack(anchors, 0)
    text = tgt_valid & (tgt >= tok.n_special)  # the masked tokens; the rest are sentinels
    tgt_in = tgt.masked_fill(text, tok.mask_id)
    tgt_out = tgt.masked_fill(~text, IGNORE)
    predict, predict_target = flat_positions(text, tgt_out)
    return Batch(
        norm=text.sum(),
        n_tokens=src_valid.sum() + tgt_valid.sum(),
        src=src,
        src_valid=src_valid,
        tgt=tgt,
        tgt_in=tgt_in,
        tgt_valid=tgt_valid,
        tgt_out=tgt_out,
        length=torch.tensor([len(t) for t in targets]),
        anchor=anchor,
        predict=predict,
        predict_target=predict_target,
    )


def sentinel_anchors(src, tgt):
    """(len(tgt),) int64: for each token of a span-corruption target ("<s0> x2 x3 <s1> x8"), the
    position in the source ("x1 <s0> x4 .. <s1> x10") of the sentinel that opens its span: where
    the span was cut out, between the tokens around it."""
    src, tgt = np.asarray(src), np.asarray(tgt)
    is_sentinel = lambda a: (a >= FIRST_SENTINEL) & (a < N_SPECIAL)
    where = np.zeros(N_SPECIAL, dtype=np.int64)
    where[src[is_sentinel(src)]] = np.flatnonzero(is_sentinel(src))
    opener = np.maximum.accumulate(np.where(is_sentinel(tgt), np.arange(len(tgt)), 0))  # tgt[0] is <s0>
    return where[tgt[opener]]


def t5_nar_loss_sums(model, batch, length_grad=False):
    """nar_loss_sums without label smoothing (pretraining, as T5's loss): loss (token
    cross-entropy + LENGTH_LOSS x the length cross-entropy, summed), hit, n, the length's
    len_loss, len_hit, len_n, and the token cross-entropy alone as text_loss, text_hit, text_n
    (every predicted token is text), which the plateau test reads for T5 too (core/t5.text_sums;
    core/training.per_token reports each). The length loss does not reach the encoder unless
    length_grad (the module docstring says why)."""
    sums = nar_loss_sums(model, batch, label_smoothing=0.0, length_grad=length_grad)
    sums["len_loss"] = sums.pop("len_nll")
    sums.update(text_loss=sums.pop("nll"), text_hit=sums["hit"], text_n=sums["n"])
    return sums
