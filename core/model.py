"""The transformer core shared by every objective.

Choices, and why:
  * Pre-LN (LayerNorm before each sublayer, one more at the top). UniLMv2 and BERT are post-LN;
    pre-LN trains stably at small sizes and short warmups, which is what a CPU demo needs, and
    makes "a layer that runs on a subset of tokens" simple: keys/values come from LN(all tokens),
    queries from LN(the subset) (ELMER's early exit).
  * Token + absolute position + segment embeddings, an optional T5-style relative position bias
    (UniLMv2 section 4.1): one (heads, buckets) table shared by all layers, buckets over the
    distance of *position ids*, so appended [P]/ORIGINAL copies are at their masked token's place.
  * Attention masks are never tensors: every token carries (kind, step) and a validity bit and
    kernels.attention applies the rule (UniLMv2 section 3.2, Figure 5; kernels/reference.py).
  * The output softmax is tied to the token embedding, after a dense+GELU+LN transform (BERT).
  * Dropout on embeddings and residual branches; none on attention probabilities (the fused
    kernel has none).
No distributed code lives here.
"""

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels
from .config import ModelConfig


# The relative position bias is REL_SCALE x its learnt table. Adam changes a parameter by about one
# learning rate per step, and moving one head's attention from uniform over L keys onto a neighbour
# takes a bias of about log(L), several units: at a learning rate of 1e-3 that is thousands of
# steps from a zero table. Scaling the table makes it move REL_SCALE times faster (a copy task, same
# seed, was learnt in about half the steps); its zero initialisation, the T5 one, is unchanged.
REL_SCALE = 16.0


def local_rel_table(cfg: ModelConfig):
    """A relative-bias table that starts attention local: head h adds -slope_h * log(1 + |distance|),
    slopes spread from 2 down to 0, so one head is nearly a neighbour lookup and the last one
    attends uniformly as a zero table would. From a zero table every head starts uniform over the
    window and must learn the same shape by updates of about one learning rate each. Measured
    alone on the small PMLM it changed the held-out loss by no more than seed noise (README).
    The table stays learnt; this is only its starting point (divided by REL_SCALE)."""
    distance = torch.arange(-cfg.rel_max_distance, cfg.rel_max_distance + 1)
    buckets = kernels.t5_bucket(distance, cfg.rel_buckets, cfg.rel_max_distance)
    nearest = torch.full((cfg.rel_buckets,), float(cfg.rel_max_distance))
    nearest.scatter_reduce_(0, buckets, distance.abs().float(), reduce="amin")
    slopes = torch.linspace(2.0, 0.0, cfg.n_heads) if cfg.n_heads > 1 else torch.ones(1)
    return nn.Parameter(-slopes[:, None] * torch.log1p(nearest)[None] / REL_SCALE)


@dataclass(eq=False)
class Meta:
    """Per-token attention metadata, each (B, L): kind, step, valid (bool), seq (packing, optional).
    One Meta serves every layer of a forward; `cache` holds what is derived from it once, not once
    per layer: the Triton kernel's tile map per key metadata (tile_cache), the cross-attention's
    query metadata (_unmasked). Build a new Meta when the tensors change."""

    kind: torch.Tensor
    step: torch.Tensor
    valid: Optional[torch.Tensor] = None
    seq: Optional[torch.Tensor] = None
    cache: dict = field(default_factory=dict, repr=False)


def mask_meta(q_meta: Meta, k_meta: Meta):
    """The kernels.MaskMeta of a (query, key) metadata pair: what kernels.attention derives the mask from."""
    return kernels.MaskMeta(q_meta.kind, q_meta.step, k_meta.kind, k_meta.step, k_meta.valid, q_meta.seq, k_meta.seq)


def tile_cache(q_meta: Meta, k_meta: Meta):
    """The dict in which kernels.attention keeps the tile map of this (query, key) metadata pair."""
    entry = q_meta.cache.get(id(k_meta))
    if entry is None or entry[0] is not k_meta:  # an id can be reused once its Meta is gone
        entry = q_meta.cache[id(k_meta)] = (k_meta, {})
    return entry[1]


# -----------------------------------------------------------------------------
# blocks


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.h, self.d = cfg.n_heads, cfg.head_dim
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.v = nn.Linear(cfg.d_model, cfg.d_model)
        self.o = nn.Linear(cfg.d_model, cfg.d_model)
        self.tuning = None  # the Triton attention's launch (kernels/attention_plan.Tuning; None: the default)

    def split(self, x):  # (B, L, C) -> (B, H, L, D)
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d).transpose(1, 2)

    def keys_values(self, kv):  # (B, Lk, C) -> k, v, each (B, H, Lk, D)
        return self.split(self.k(kv)), self.split(self.v(kv))

    def forward(self, x, q_meta, kv, k_meta, bias=None, past=None, write_at=None):
        """x: (B, Lq, C) queries; kv: (B, Lk, C) the tokens providing keys and values.
        past: optional cached (k, v), each (B, H, Lp, D), placed before the new keys (k_meta must
        describe past + new keys). kv=None: no new keys, `past` holds them all (a cross-attention
        against a memory projected once by keys_values). write_at: a (Lk,) long tensor: the new
        keys are written into `past` at those indices, which then holds every key (a static cache,
        core/static_beam.py). Returns (out (B, Lq, C), (k, v) of the new keys only)."""
        q = self.split(self.q(x))
        if kv is None:
            k, v = new = past
        else:
            k, v = new = self.keys_values(kv)
            if write_at is not None:
                past[0].index_copy_(2, write_at, k)
                past[1].index_copy_(2, write_at, v)
                k, v = past
            elif past is not None:
                k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        y = kernels.attention(
            q, k, v, mask_meta(q_meta, k_meta), bias=bias, cache=tile_cache(q_meta, k_meta), tuning=self.tuning
        )
        B, H, Lq, D = y.shape
        return self.o(y.transpose(1, 2).reshape(B, Lq, H * D)), new


def tune_attention(model, tuning):
    """Launch the Triton attention of every Attention in `model` as `tuning` says (an
    attention_plan.Tuning; None: the default): a benchmark's blocks, carried by the model that runs
    them. Returns the model."""
    for m in model.modules():
        if isinstance(m, Attention):
            m.tuning = tuning
    return model


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_ff)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Layer(nn.Module):
    """Pre-LN layer: self-attention, optional cross-attention, feed-forward."""

    def __init__(self, cfg: ModelConfig, cross=False):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.d_model), Attention(cfg)
        self.ln_cross = nn.LayerNorm(cfg.d_model) if cross else None
        self.cross = Attention(cfg) if cross else None
        self.ln2, self.ffn = nn.LayerNorm(cfg.d_model), FeedForward(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x,
        meta,
        k_meta=None,
        bias=None,
        context=None,
        memory=None,
        mem_meta=None,
        past=None,
        mem_kv=None,
        cross_bias=None,
        write_at=None,
    ):
        """x: (B, Lq, C). context: (B, Lk, C) hidden states that serve as keys/values when the
        queries are a subset of the tokens (default: x itself); memory: (B, Lm, C) encoder output
        for cross-attention, or instead mem_kv: its (k, v) from self.cross.keys_values(memory),
        computed once per source when decoding. cross_bias: the cross-attention's bias (None: none,
        as in T5; MLAE's decoder (b) gives a RelPosBias). write_at: see Attention.forward. Returns
        (x, (k, v) of this call's self-attention keys)."""
        h = self.ln1(x)
        hk = h if context is None else self.ln1(context)
        a, kv = self.attn(h, meta, hk, k_meta or meta, bias, past, write_at)
        x = x + self.drop(a)
        if self.cross is not None:
            mem = memory if mem_kv is None else None
            x = x + self.drop(self.cross(self.ln_cross(x), _unmasked(meta), mem, mem_meta, cross_bias, mem_kv)[0])
        return x + self.drop(self.ffn(self.ln2(x))), kv


def _unmasked(meta):
    """Queries of a cross-attention: plain CONTEXT (they see every valid memory key). Made once per
    Meta, so that every decoder layer shares it and its tile map."""
    if "unmasked" not in meta.cache:
        z = torch.zeros_like(meta.kind)
        meta.cache["unmasked"] = Meta(z, z, seq=meta.seq)
    return meta.cache["unmasked"]


# -----------------------------------------------------------------------------
# the model


class Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.seg = nn.Embedding(cfg.n_segments, cfg.d_model)
        self.ln = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, tokens, pos, seg=None):  # (B, L) ids -> (B, L, C)
        x = self.tok(tokens) + self.pos(pos)
        if seg is not None:
            x = x + self.seg(seg)
        return self.drop(self.ln(x))


class LMHead(nn.Module):
    """dense + GELU + LN, then the tied token embedding and an output bias."""

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding):
        super().__init__()
        self.dense, self.ln = nn.Linear(cfg.d_model, cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.embedding = embedding
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, h):  # (..., C) -> (..., V)
        return F.linear(self.ln(F.gelu(self.dense(h))), self.embedding.weight, self.bias)

    @torch.no_grad()
    def init_bias(self, counts):
        """Start the output bias at the log unigram frequencies of the training text (add-one
        smoothed), so that the first step already predicts as well as the token frequencies.
        From zero, Adam moves the bias by about one learning rate per step, and a model spends
        its first hundreds of steps learning the unigram prior before it learns the context."""
        counts = torch.as_tensor(counts, dtype=torch.float64) + 1.0
        self.bias.copy_((counts / counts.sum()).log().to(self.bias.dtype))


class UnifiedLM(nn.Module):
    """One stack of self-attention layers used as a bidirectional encoder, a prefix-LM or a
    pseudo-masked LM, depending only on the per-token (kind, step) it is given (UniLMv2)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.emb = Embeddings(cfg)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.rel_table = local_rel_table(cfg) if cfg.rel_pos else None
        self.head = LMHead(cfg, self.emb.tok)
        self.apply(_init)

    def rel_bias(self, q_pos, k_pos):
        if self.rel_table is None:
            return None
        return kernels.rel_pos_bias(self.rel_table * REL_SCALE, q_pos, k_pos, self.cfg.rel_max_distance)

    def forward(self, tokens, pos, seg, kind, step, valid=None, predict=None):
        """All (B, L). Returns the final hidden states (B, L, C), or, given a (B, L) bool
        `predict`, the logits (N, V) at its N True positions only (the vocabulary projection is
        the costliest matmul of a small model: it runs only where there is something to predict).
        Computing them inside forward keeps every parameter under DistributedDataParallel."""
        meta = Meta(kind, step, valid)
        bias = self.rel_bias(pos, pos)
        x = self.emb(tokens, pos, seg)
        for layer in self.layers:
            x, _ = layer(x, meta, bias=bias)
        h = self.ln_f(x)
        return h if predict is None else self.head(select(h, predict))

    def lm_logits(self, h):
        return self.head(h)


def _init(m):
    """Linear weights N(0, 1/fan_in), embeddings N(0, 0.02), zero biases.

    BERT's N(0, 0.02) everywhere suits its width of 768 (0.02 is about 0.55/sqrt(768)); scaling by
    fan-in keeps the attention logits and activations at the same scale at every preset width."""
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=m.in_features**-0.5)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


# -----------------------------------------------------------------------------
# the encoder-decoder (the T5 baseline)


class EncoderDecoder(nn.Module):
    """T5-style autoregressive encoder-decoder (Raffel et al. 2020, section 3.1.1), built from the
    same Layer/Attention/kernels.attention as UnifiedLM; used with span corruption (core/t5.py).

    Choices, and why:
      * One Embeddings module (token, absolute position, LN) serves both sides, and its token
        table is also the tied output softmax, as T5 shares one embedding matrix between encoder,
        decoder and output layer. Positions restart at 0 on each side; there is no segment
        embedding (seg=None), except for an encoder loaded from a PMLM/MLM stack (cfg.enc_segment):
        its source is in that stack's first segment, as in its pretraining.
      * cfg.n_layers encoder layers (self-attention) and cfg.n_dec_layers decoder layers
        (self-attention, cross-attention, FFN); cfg.n_dec_layers == 0 means "as many as the
        encoder". train.py and finetune.py give the T5 baseline MLAE's depths (core/config.py
        DEPTHS: 12L-4L at base, as the MLAE paper's T5, section 4.1), not T5's own 12L-12L.
      * Pre-LN, with a final LayerNorm per stack (as in T5; see the module docstring for why).
      * With cfg.rel_pos, one relative position table per stack, shared by that stack's layers
        (T5 keeps separate encoder and decoder tables). The buckets are the bidirectional ones of
        kernels.t5_bucket on both sides; in the causal decoder the "future" half is never used.
        Cross-attention has no position bias, as in T5.
      * Masks as data: the encoder is all CONTEXT with key padding; the decoder's self-attention
        is all ORIGINAL with step = target index (causal); the cross-attention's queries are
        CONTEXT against the memory, whose padding keys are invalid.
    Decoding with a key/value cache (core/kv_cache.py): cross_kv projects the memory once for every
    decoder layer; decode_step runs one new target token against the cached self-attention keys.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        n_dec = cfg.n_dec_layers or cfg.n_layers
        self.emb = Embeddings(cfg)
        if not cfg.enc_segment:  # no segments: a table that no forward uses would stall DDP's gradient sync
            self.emb.seg = None
        self.enc_layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.dec_layers = nn.ModuleList(Layer(cfg, cross=True) for _ in range(n_dec))
        self.ln_enc, self.ln_dec = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        if cfg.rel_pos:
            self.enc_rel_table, self.dec_rel_table = local_rel_table(cfg), local_rel_table(cfg)
        else:
            self.enc_rel_table = self.dec_rel_table = None
        self.head = LMHead(cfg, self.emb.tok)
        self.apply(_init)

    def rel_bias(self, table, q_pos, k_pos):
        if table is None:
            return None
        return kernels.rel_pos_bias(table * REL_SCALE, q_pos, k_pos, self.cfg.rel_max_distance)

    def encode(self, src, src_pos, src_valid):
        """src, src_pos: (B, S) long; src_valid: (B, S) bool. Returns the memory (B, S, C)."""
        zero = torch.zeros_like(src)
        meta = Meta(zero, zero, src_valid)  # all CONTEXT: bidirectional, padding keys unseen
        bias = self.rel_bias(self.enc_rel_table, src_pos, src_pos)
        x = self.emb(src, src_pos, zero if self.cfg.enc_segment else None)  # a PMLM/MLM stack's first segment
        for layer in self.enc_layers:
            x, _ = layer(x, meta, bias=bias)
        return self.ln_enc(x)

    def memory_meta(self, src_valid):
        """The memory's keys as a cross-attention reads them: CONTEXT, the padding invalid."""
        zero = torch.zeros(src_valid.shape, dtype=torch.long, device=src_valid.device)
        return Meta(zero, zero, src_valid)

    def decode(self, tgt_in, tgt_pos, tgt_valid, memory, src_valid, predict=None):
        """tgt_in, tgt_pos: (B, T) long; tgt_valid: (B, T) bool; memory: (B, S, C); src_valid:
        (B, S) bool. Returns the decoder's final hidden states (B, T, C), or, given a (B, T) bool
        `predict`, the logits (N, V) at its N True positions (see UnifiedLM.forward)."""
        meta = Meta(torch.full_like(tgt_in, kernels.ORIGINAL), tgt_pos, tgt_valid)  # causal: step = index
        mem_meta = self.memory_meta(src_valid)
        bias = self.rel_bias(self.dec_rel_table, tgt_pos, tgt_pos)
        x = self.emb(tgt_in, tgt_pos)
        for layer in self.dec_layers:
            x, _ = layer(x, meta, bias=bias, memory=memory, mem_meta=mem_meta)
        h = self.ln_dec(x)
        return h if predict is None else self.head(select(h, predict))

    def forward(self, src, src_valid, tgt_in, tgt_valid, predict=None):
        """Encode and decode in one call, so that DistributedDataParallel sees one forward.
        src: (B, S), tgt_in: (B, T) long, with their (B, S), (B, T) bool validity. Returns what
        decode returns."""
        memory = self.encode(src, positions(src), src_valid)
        return self.decode(tgt_in, positions(tgt_in), tgt_valid, memory, src_valid, predict)

    # --- incremental decoding -------------------------------------------------------------------
    def cross_kv(self, memory):
        """Per decoder layer the cross-attention (k, v) of the memory (B, S, C), each
        (B, H, S, D): computed once per source, reused at every decoding step."""
        return [layer.cross.keys_values(memory) for layer in self.dec_layers]

    def decode_step(self, tokens, cache):
        """One decoding step for every row: tokens (N,) long, the decoder input at target index
        t = cache.length, against cache (core/kv_cache.KVCache: the self-attention keys of indices
        0..t-1 and the memory's cross-attention keys, from cross_kv), to which this step's keys are
        appended. Returns the logits (N, V)."""
        N, dev, t = tokens.shape[0], tokens.device, cache.length
        pos = torch.full((N, 1), t, dtype=torch.long, device=dev)
        meta = Meta(torch.full((N, 1), kernels.ORIGINAL, dtype=torch.long, device=dev), pos)
        k_meta, k_pos = cache.keys(meta.kind, pos, pos)  # causal: a key's step is its index
        bias = self.rel_bias(self.dec_rel_table, pos, k_pos)
        x = self.emb(tokens[:, None], pos)  # (N, 1, C)
        new = []
        for i, layer in enumerate(self.dec_layers):
            x, kv = layer(x, meta, k_meta, bias, past=cache.past(i), mem_kv=cache.cross[i], mem_meta=cache.cross_meta)
            new.append(kv)
        cache.append(new, meta.kind, pos, pos)
        return self.head(self.ln_dec(x[:, 0]))

    def decode_step_into(self, tokens, pos, meta, cache):
        """decode_step at fixed shapes: tokens (N,) at positions pos (N, 1), with their Meta; the
        new self-attention keys and values are written into the cache's slots (per decoder layer
        (k, v), each (N, H, M, D)) at cache.write_at ((1,) long), and the queries attend to all M
        slots: cache.meta gives slot j step j, so the causal rule hides the slots past the step.
        Returns the logits (N, V)."""
        bias = self.rel_bias(self.dec_rel_table, pos, cache.pos)
        x = self.emb(tokens[:, None], pos)
        for i, layer in enumerate(self.dec_layers):
            x, _ = layer(
                x,
                meta,
                cache.meta,
                bias,
                past=cache.kv[i],
                mem_kv=cache.cross[i],
                mem_meta=cache.cross_meta,
                write_at=cache.write_at,
            )
        return self.head(self.ln_dec(x[:, 0]))


def select(h, predict):
    """The rows of h (B, L, C) that `predict` names: a (B, L) bool mask, or the (N,) flat indices of
    those positions made with the batch on the host (no host sync: a mask's count must be read)."""
    return h[predict] if predict.dtype == torch.bool else h.flatten(0, 1).index_select(0, predict)


def positions(tokens):  # (B, L) -> (B, L) position ids 0..L-1
    return torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
