"""MLAE: the asymmetric non-autoregressive encoder-decoder, pretrained as a masked autoencoder
("MLAE: Encoder-decoder Pretraining with Non-autoregressive Modeling", sections 3-5).

Pretraining (section 3.1, and 4.1 for the masking): 15% of the tokens of "[SOS] TEXT [EOS]" in
spans of mean length 3 (the span sampler of the T5 baseline, core/t5.span_ids; [SOS]/[EOS]
are never masked). The masked tokens are *removed* from the encoder's input, as MAE removes
patches: each example keeps its unmasked tokens with their original position ids, compacted to
the left and padded to the longest in the batch, so the encoder's cost falls with the mask
ratio. A light decoder (fewer layers than the encoder) reconstructs the masked tokens
bidirectionally, in one of two variants (sections 3.1 and 5.2.2):

    (a) self-attention only, over the full sequence: the encoder's latents put back at their
        positions, the [MASK] embedding (token + position) at the masked positions;
    (b) the [MASK] placeholders only, at the masked positions, bidirectional among themselves,
        with cross-attention to the latents (the variant the paper loads into CMLM for NAR
        generation, section 4.4, and ablates in Table 6).

    text:        [SOS] x1 x2 x3 x4 x5 x6 [EOS]      masked: x2 x3, x6
    encoder:     [SOS] x1 x4 x5 [EOS]               positions 0 1 4 5 7
    decoder (a): h0 h1 [M] [M] h4 h5 [M] h7         positions 0..7, predicts at 2, 3, 6
    decoder (b): [M] [M] [M] x-attn(h0 h1 h4 h5 h7) positions 2 3 6

(docs/mlae.md draws who attends to whom in this example, from mlae_layout: tools/layouts.py.)

The default is (b), the paper's choice for NAR generation (Table 6), with a relative position
bias in its cross-attention between a [MASK]'s position id and each latent's original position id
(MLAE.cross_rel_pos). Without that bias a [MASK] finds its neighbours only from absolute position
embeddings, which is slow to learn: on a word-cycle text at `tiny` (300 steps, README,
studies/mlae_decoders.py) (b) without it stayed at the unigram entropy, while with it (b) went
below (a), whose self-attention has always had the bias.

Loss: cross-entropy on the masked tokens only. The model reuses the T5 baseline's
EncoderDecoder (core/model.py) with its parameter names, so that seq2seq-style fine-tuning
(section 3.3) is that EncoderDecoder loaded with MLAE's weights; in variant (a) the decoder
layers have no cross-attention. The latents of (a) enter the decoder as they leave the
encoder's final LayerNorm, with no second position embedding: they already carry their
position, and the decoder's relative position bias sees the position ids.

Depths: --enc-layers / --dec-layers, defaults in core/config.py DEPTHS, which the T5, T5-NAR and
CMLM baselines share. The paper's base model is 12L-4L (3:1); at `small` the
default is 4L-2L, the encoder as deep as the MLM baseline's stack (the paper compares a 12L
RoBERTa with a 12L-4L MLAE), and 3L-3L is the symmetric ablation of Table 6 (the same number of
layers, as the paper's 8L-8L has the parameters of its 12L-4L).
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernels import CONTEXT, ORIGINAL
from ..batch import Batch, flat_positions, pad_stack
from ..kv_cache import KVCache
from ..model import EncoderDecoder, Layer, Meta, local_rel_table, positions, select, _init
from ..t5 import IGNORE, encoder_input, span_ids
from ..tokenizer import MASK

VARIANTS = ("a", "b")


def variant_of(state_dict):
    """'b' when the pretrained decoder has cross-attention, else 'a'."""
    return "b" if any(k.startswith("dec_layers.0.cross.") for k in state_dict) else "a"


# -----------------------------------------------------------------------------
# the model


class MLAE(EncoderDecoder):
    """Encoder over the unmasked tokens, light bidirectional decoder (variant a or b).

    cross_rel_pos (variant b, with cfg.rel_pos): the decoder's cross-attention adds a relative
    position bias between each [MASK]'s position id and each latent's original position id, from
    a table of its own (`cross_rel_table`, shared by the decoder's layers, as each stack shares its
    self-attention table). Its own, not the decoder self-attention's: that one relates [MASK]s to
    other [MASK]s, which sit inside the same few spans, while the cross-attention must find the
    nearest unmasked tokens around a span, at other distances and for another purpose (T5 keeps
    one table per stack for the same reason). It costs H x buckets parameters. A checkpoint
    written without it (before it existed, or trained with it off) loads with a zero table: no
    bias, exactly the function that was trained."""

    def __init__(self, cfg, variant="b", cross_rel_pos=True):
        if variant not in VARIANTS:
            raise ValueError(f"unknown MLAE decoder variant {variant!r}; pick one of {VARIANTS}")
        super().__init__(cfg)
        self.variant = variant
        if variant == "a":  # self-attention only
            self.dec_layers = nn.ModuleList(Layer(cfg) for _ in range(len(self.dec_layers)))
            self.dec_layers.apply(_init)
        self.cross_rel_table = None
        if variant == "b" and cross_rel_pos and cfg.rel_pos:
            self.cross_rel_table = local_rel_table(cfg)
            self.register_load_state_dict_pre_hook(_zero_missing_cross_table)

    def forward(self, enc_tok, enc_pos, enc_valid, dec_tok, dec_pos, dec_valid, predict=None):
        """enc_*: (B, U) the unmasked tokens, their original positions, validity. dec_*: (B, Ld)
        the decoder's input: the whole sequence with [MASK] at the masked positions for (a), the
        [MASK] placeholders alone for (b). Returns the decoder's hidden states (B, Ld, C), or the
        logits (N, V) at the N True positions of a (B, Ld) bool `predict`."""
        latents = self.encode(enc_tok, enc_pos, enc_valid)  # (B, U, C)
        h = self.decode_masked(latents, enc_pos, enc_valid, dec_tok, dec_pos, dec_valid)
        return h if predict is None else self.head(select(h, predict))

    def decode_masked(self, latents, enc_pos, enc_valid, dec_tok, dec_pos, dec_valid):
        """The pretraining decoder, bidirectional (all CONTEXT, padding keys unseen)."""
        x = self.emb(dec_tok, dec_pos)  # (B, Ld, C): [MASK] (and, for (a), the unmasked ids, replaced below)
        zero = torch.zeros_like(dec_tok)
        meta = Meta(zero, zero, dec_valid)
        bias = self.rel_bias(self.dec_rel_table, dec_pos, dec_pos)
        if self.variant == "a":
            x = place(x, latents, enc_pos, enc_valid)
            for layer in self.dec_layers:
                x, _ = layer(x, meta, bias=bias)
        else:
            mem_meta = self.memory_meta(enc_valid)
            cross = self.rel_bias(self.cross_rel_table, dec_pos, enc_pos)  # [MASK] vs latent, original positions
            for layer in self.dec_layers:
                x, _ = layer(x, meta, bias=bias, memory=latents, mem_meta=mem_meta, cross_bias=cross)
        return self.ln_dec(x)


def _zero_missing_cross_table(module, state_dict, prefix, *args):
    """A (b) state dict without the cross-attention's table loads with a zero one (no bias)."""
    key = prefix + "cross_rel_table"
    if key not in state_dict:
        state_dict[key] = torch.zeros_like(module.cross_rel_table)


def place(x, rows, index, valid):
    """x (B, L, C) with rows (B, U, C) written at positions index (B, U) where valid; autograd
    flows to both. Padding rows go to a scratch column that is dropped."""
    B, L, C = x.shape
    idx = torch.where(valid, index, L)[..., None].expand(-1, -1, C)
    out = torch.cat([x, x.new_zeros(B, 1, C)], 1).scatter(1, idx, rows)
    return out[:, :L]


# -----------------------------------------------------------------------------
# pretraining examples, batches and the loss


def mlae_example(window, rng, tok, ratio=0.15, mean_span=3):
    """One example: "[SOS] window [EOS]" with spans of the window masked. Returns a dict of
    arrays: enc_tok/enc_pos (the unmasked tokens and their positions), full_tok (the sequence
    with [MASK] at the masked positions), full_target (the masked ids there, IGNORE elsewhere),
    msk_pos/msk_target (the masked positions and ids)."""
    window = np.asarray(window, dtype=np.int64)
    ids = np.concatenate([[tok.sos_id], window, [tok.eos_id]]).astype(np.int64)
    # a document's [EOS] in the stream is never masked (as in PMLM and T5)
    span = span_ids(len(window), rng, ratio, mean_span, fixed=window == tok.eos_id)
    return mlae_layout(ids, np.concatenate([[False], span >= 0, [False]]), tok.mask_id)


def mlae_layout(ids, masked, mask_id):
    """The arrays of mlae_example for the sequence ids (n,) with the tokens `masked` (n,) bool."""
    keep = np.flatnonzero(~masked)
    where = np.flatnonzero(masked)
    return dict(
        enc_tok=ids[keep],
        enc_pos=keep,
        full_tok=np.where(masked, mask_id, ids),
        full_target=np.where(masked, ids, IGNORE),
        msk_pos=where,
        msk_target=ids[where],
    )


def collate(examples, tok):
    """Pad the example dicts into a Batch. norm = masked tokens; n_tokens = text tokens (the
    whole sequence, masked ones included, so that tokens/s compares with the MLM baseline)."""
    out = {}
    out["enc_tok"], out["enc_valid"] = pad_stack([e["enc_tok"] for e in examples], tok.pad_id)
    out["enc_pos"], _ = pad_stack([e["enc_pos"] for e in examples], 0)
    out["full_tok"], out["full_valid"] = pad_stack([e["full_tok"] for e in examples], tok.pad_id)
    out["full_target"], _ = pad_stack([e["full_target"] for e in examples], IGNORE)
    out["msk_pos"], out["msk_valid"] = pad_stack([e["msk_pos"] for e in examples], 0)
    out["msk_target"], _ = pad_stack([e["msk_target"] for e in examples], IGNORE)
    # each decoder's predicted positions as flat indices, made here on the host (no host sync)
    out["a_predict"], out["a_target"] = flat_positions(out["full_target"] != IGNORE, out["full_target"])
    out["b_predict"], out["b_target"] = flat_positions(out["msk_valid"], out["msk_target"])
    return Batch(norm=out["msk_valid"].sum(), n_tokens=out["full_valid"].sum(), **out)


def mlae_batch(stream, indices, tok, ratio=0.15, mean_span=3):
    """The examples `indices` of a TokenStream, span-masked and collated (cf. t5_batch)."""
    examples = []
    for i in indices:
        window, rng = stream.window_at(i)
        examples.append(mlae_example(window, rng, tok, ratio, mean_span))
    return collate(examples, tok)


def decoder_inputs(batch, variant, mask_id):
    """(dec_tok, dec_pos, dec_valid, predict, target) of the variant's decoder layout."""
    if variant == "a":
        pos = positions(batch.full_tok)
        return batch.full_tok, pos, batch.full_valid, batch.a_predict, batch.a_target
    dec_tok = torch.full_like(batch.msk_pos, mask_id)
    return dec_tok, batch.msk_pos, batch.msk_valid, batch.b_predict, batch.b_target


def mlae_loss_sums(model, batch, mask_id=MASK):
    """Summed cross-entropy over the masked tokens (differentiable), hits and count: keys loss,
    hit, n (cf. t5_loss_sums)."""
    variant = getattr(model, "module", model).variant  # through a DDP wrapper
    dec_tok, dec_pos, dec_valid, predict, target = decoder_inputs(batch, variant, mask_id)
    logits = model(batch.enc_tok, batch.enc_pos, batch.enc_valid, dec_tok, dec_pos, dec_valid, predict).float()
    loss = F.cross_entropy(logits, target, reduction="sum")
    hit = (logits.argmax(-1) == target).float().sum()
    return dict(loss=loss, hit=hit, n=torch.tensor(float(len(target)), device=logits.device))


# fine-tuning for understanding (section 3.2), the encoder and a linear layer on [EOS]: the
# EncoderClassifier of core/classify.py, shared with T5


# -----------------------------------------------------------------------------
# fine-tuning for generation, seq2seq-style (section 3.3, Table 5): the pretrained weights in an
# encoder-decoder whose every decoder layer has cross-attention

CROSS_INITS = ("self", "partial", "random")


def init_from_pretrained(model, state_dict, cross_init="self"):
    """Load pretrained weights into `model` (an EncoderDecoder or NARModel) for seq2seq-style
    fine-tuning. cross_init (Table 5 of the paper):
      self     every cross-attention (and its LayerNorm) that the checkpoint lacks starts as a
               copy of the same layer's self-attention (and ln1); a checkpoint that has them
               (MLAE (b), T5) keeps its pretrained ones;
      partial  the decoder's self-attention and FFN pretrained, its cross-attention random;
      random   the whole decoder random (its layers, final LayerNorm and position table).
    Weights the model has and the checkpoint lacks (a NARModel's length predictor) keep their
    fresh initialisation; weights the model has no place for (a decoder's cross-attention when
    the model has none) are dropped. A UnifiedLM's segment table is kept where the model reads its
    source in a segment (cfg.enc_segment). Returns the names of the weights left fresh."""
    if cross_init not in CROSS_INITS:
        raise ValueError(f"unknown cross_init {cross_init!r}; pick one of {CROSS_INITS}")
    sd = dict(state_dict)
    own = model.state_dict()
    if "layers.0.attn.q.weight" in sd and "enc_layers.0.attn.q.weight" in own:
        # a UnifiedLM (MLM/PMLM) into an encoder-decoder (RoBERTa-s2s): its stack is the encoder
        rename = lambda k: (
            "enc_" + k if k.startswith(("layers.", "rel_table")) else "ln_enc" + k[4:] if k.startswith("ln_f.") else k
        )
        sd = {rename(k): v for k, v in sd.items() if "emb.seg.weight" in own or not k.startswith("emb.seg.")}
    is_cross = lambda k: k.startswith("dec_layers.") and (".cross." in k or ".ln_cross." in k)
    if cross_init == "random":
        sd = {k: v for k, v in sd.items() if not k.startswith(("dec_layers.", "ln_dec.", "dec_rel_table"))}
    elif cross_init == "partial":
        sd = {k: v for k, v in sd.items() if not is_cross(k)}
    else:
        for k in model.state_dict():
            src = k.replace(".cross.", ".attn.").replace(".ln_cross.", ".ln1.")
            if is_cross(k) and k not in sd and src in sd:
                sd[k] = sd[src].clone()
    wrong = [
        f"{k} {tuple(v.shape)} (the model's {tuple(own[k].shape)})"
        for k, v in sd.items()
        if k in own and v.shape != own[k].shape
    ]
    if wrong:  # the checkpoint's weights are not those of its own config
        raise RuntimeError(f"size mismatch:\n{', '.join(wrong[:3])}")
    fresh = [k for k in own if k not in sd]
    own.update({k: v for k, v in sd.items() if k in own})
    model.load_state_dict(own)
    return fresh


# -----------------------------------------------------------------------------
# fine-tuning for generation, UniLM-style (section 3.3): the decoder's self-attention over the
# source's latents followed by the target tokens, with the seq2seq (prefix) mask


class MLAEUniLM(MLAE):
    """Encoder over "[SOS] SRC [EOS]" (cfg.enc_sos: as MLAE's pretraining laid out its text); the
    decoder stack (no cross-attention: the layers of variant (a); a (b) checkpoint's cross-attention
    is dropped) over [latents | [SOS] y_1 .. y_{T-1}]:

        kind   CONTEXT (the latents, positions 0..S-1) | ORIGINAL (targets, positions S..S+T-1)
        step   0                                       | 1 .. T

    so the source attends within itself and target token t to the source and targets <= t
    (the attention rule of kernels/reference.py). The latents enter as they leave the encoder,
    as in pretraining variant (a). Same forward signature as the T5 EncoderDecoder, so its
    batches, loss and scheduled masking serve unchanged; MLAEUniLMDecoder decodes with a cache."""

    def __init__(self, cfg):
        super().__init__(cfg, "a")

    def stack(self, x, meta, pos, k_meta, k_pos, past=None):
        """The decoder layers over queries x (B, Lq, C) against past (per layer (k, v), or None)
        plus x's own keys. Returns (x, per layer the (k, v) of x)."""
        bias = self.rel_bias(self.dec_rel_table, pos, k_pos)
        new = []
        for i, layer in enumerate(self.dec_layers):
            x, kv = layer(x, meta, k_meta, bias, past=None if past is None else past[i])
            new.append(kv)
        return x, new

    def forward(self, src, src_valid, tgt_in, tgt_valid, predict=None):
        """src (B, S), tgt_in (B, T) with validity. Returns the targets' hidden states (B, T, C),
        or the logits (N, V) at the N True positions of `predict` (B, T)."""
        S, T = src.shape[1], tgt_in.shape[1]
        src_pos = positions(src)
        latents = self.encode(src, src_pos, src_valid)  # (B, S, C)
        tgt_pos = src_valid.long().sum(1, keepdim=True) + torch.arange(T, device=src.device)  # (B, T)
        steps = torch.arange(1, T + 1, device=src.device).expand_as(tgt_in)
        meta = Meta(
            torch.cat([torch.full_like(src, CONTEXT), torch.full_like(tgt_in, ORIGINAL)], 1),
            torch.cat([torch.zeros_like(src), steps], 1),
            torch.cat([src_valid, tgt_valid], 1),
        )
        pos = torch.cat([src_pos, tgt_pos], 1)
        x = torch.cat([latents, self.emb(tgt_in, tgt_pos)], 1)  # (B, S + T, C)
        x, _ = self.stack(x, meta, pos, meta, pos)
        h = self.ln_dec(x[:, S:])
        return h if predict is None else self.head(select(h, predict))


class MLAEUniLMDecoder:
    """The IncrementalDecoder protocol of core/decoding.py for MLAEUniLM (cf. T5Decoder): the
    source is encoded and run through the decoder stack once, its keys/values cached per layer
    (core/kv_cache.py); each step feeds one target token (ORIGINAL, step t + 1, position S_b + t)
    against the cache and appends its keys/values. use_cache=False re-runs the whole forward every
    step."""

    @torch.no_grad()
    def __init__(self, model, src_ids_list, tok, use_cache=True):
        self.model, self.tok, self.use_cache = model, tok, use_cache
        self.src, self.src_valid = encoder_input(model, src_ids_list, tok)
        dev = self.src.device
        self.src_len = self.src_valid.long().sum(1)  # (N,)
        self.prefix = torch.zeros(len(src_ids_list), 0, dtype=torch.long, device=dev)
        self.rows = len(src_ids_list)
        self.cache = None
        if use_cache:
            pos = positions(self.src)
            latents = model.encode(self.src, pos, self.src_valid)
            z = torch.zeros_like(self.src)
            meta = Meta(z + CONTEXT, z, self.src_valid)
            _, kv = model.stack(latents, meta, pos, meta, pos)
            self.cache = KVCache(kv, meta, pos)

    @torch.no_grad()
    def step(self, prev=None):
        t = self.prefix.shape[1]
        tokens = (
            torch.full((self.rows,), self.tok.sos_id, device=self.src.device)
            if prev is None
            else prev.to(self.src.device, torch.long).view(self.rows)
        )
        self.prefix = torch.cat([self.prefix, tokens[:, None]], 1)  # (N, t + 1)
        pos = (self.src_len + t)[:, None]  # (N, 1)
        if int(pos.max()) >= self.model.cfg.max_positions:
            raise ValueError(
                f"decoding step {t + 1} reaches position {int(pos.max())}, past the model's "
                f"max_positions {self.model.cfg.max_positions}: shorten the source or max_len"
            )
        if not self.use_cache:
            h = self.model(self.src, self.src_valid, self.prefix, torch.ones_like(self.prefix, dtype=torch.bool))
            return F.log_softmax(self.model.head(h[:, -1]).float(), -1)
        one = torch.ones_like(pos)
        meta = Meta(one * ORIGINAL, one * (t + 1))
        k_meta, k_pos = self.cache.keys(meta.kind, meta.step, pos, one.bool())
        x, new = self.model.stack(self.model.emb(tokens[:, None], pos), meta, pos, k_meta, k_pos, self.cache.kv)
        self.cache.append(new, meta.kind, meta.step, pos, one.bool())
        return F.log_softmax(self.model.head(self.model.ln_dec(x[:, 0])).float(), -1)  # (N, V)

    @torch.no_grad()
    def reorder(self, index):
        index = index.to(self.src.device, torch.long)
        self.src, self.src_valid, self.src_len = self.src[index], self.src_valid[index], self.src_len[index]
        self.prefix = self.prefix[index]
        if self.cache is not None:
            self.cache.reorder(index)
        self.rows = len(index)


# -----------------------------------------------------------------------------
# scheduled masking (section 3.4, Algorithm 1)

SCHEDULES = ("linear", "constant", "none")


def mask_ratio(schedule, m0, step, total):
    """m_t of Algorithm 1: linear m0 - m0 * t / T, constant m0, none 0."""
    if schedule == "linear":
        return m0 - m0 * min(step, total) / max(1, total)
    if schedule == "constant":
        return m0
    if schedule == "none":
        return 0.0
    raise ValueError(f"unknown mask schedule {schedule!r}; pick one of {SCHEDULES}")


class ScheduledMasking:
    """Wraps an AR loss: while the model trains, each decoder input token (batch.tgt_in, past
    its leading [SOS]) becomes [MASK] with probability m_t, t = self.step (set by the training
    loop before each optimizer step). The draw uses the global generator, which the training
    step seeds per (step, rank), so a resumed run replays it. Evaluation sees no masks."""

    def __init__(self, loss_sums, schedule, m0, total, mask_id=MASK):
        self.loss_sums, self.schedule, self.m0, self.total, self.mask_id = loss_sums, schedule, m0, total, mask_id
        self.step = 0

    def __call__(self, model, batch):
        m = mask_ratio(self.schedule, self.m0, self.step, self.total)
        if model.training and m > 0:
            hit = torch.rand(batch.tgt_in.shape, device=batch.tgt_in.device) < m
            hit[:, 0] = False  # [SOS] stays
            tensors = dict(batch.tensors, tgt_in=batch.tgt_in.masked_fill(hit & batch.tgt_valid, self.mask_id))
            batch = Batch(batch.norm, batch.n_tokens, **tensors)
        return self.loss_sums(model, batch)
