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
    kernels.attention applies the rule (SPEC "The attention mask as data").
  * The output softmax is tied to the token embedding, after a dense+GELU+LN transform (BERT).
  * Dropout on embeddings and residual branches; none on attention probabilities (the fused
    kernel has none).
No distributed code lives here.
"""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels
from .config import ModelConfig


@dataclass
class Meta:
    """Per-token attention metadata, each (B, L): kind, step, valid (bool), seq (packing, optional)."""
    kind: torch.Tensor
    step: torch.Tensor
    valid: Optional[torch.Tensor] = None
    seq: Optional[torch.Tensor] = None


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

    def split(self, x):  # (B, L, C) -> (B, H, L, D)
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d).transpose(1, 2)

    def keys_values(self, kv):  # (B, Lk, C) -> k, v, each (B, H, Lk, D)
        return self.split(self.k(kv)), self.split(self.v(kv))

    def forward(self, x, q_meta, kv, k_meta, bias=None, past=None):
        """x: (B, Lq, C) queries; kv: (B, Lk, C) the tokens providing keys and values.
        past: optional cached (k, v), each (B, H, Lp, D), placed before the new keys (k_meta must
        describe past + new keys). kv=None: no new keys, `past` holds them all (a cross-attention
        against a memory projected once by keys_values). Returns (out (B, Lq, C), (k, v) of the
        new keys only)."""
        q = self.split(self.q(x))
        if kv is None:
            k, v = new = past
        else:
            k, v = new = self.keys_values(kv)
            if past is not None:
                k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        y = kernels.attention(q, k, v, q_meta.kind, q_meta.step, k_meta.kind, k_meta.step,
                              k_valid=k_meta.valid, q_seq=q_meta.seq, k_seq=k_meta.seq, bias=bias)
        B, H, Lq, D = y.shape
        return self.o(y.transpose(1, 2).reshape(B, Lq, H * D)), new


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

    def forward(self, x, meta, k_meta=None, bias=None, context=None, memory=None, mem_meta=None, past=None,
                mem_kv=None):
        """x: (B, Lq, C). context: (B, Lk, C) hidden states that serve as keys/values when the
        queries are a subset of the tokens (default: x itself); memory: (B, Lm, C) encoder output
        for cross-attention, or instead mem_kv: its (k, v) from self.cross.keys_values(memory),
        computed once per source when decoding. Returns (x, (k, v) of this call's self-attention
        keys)."""
        h = self.ln1(x)
        hk = h if context is None else self.ln1(context)
        a, kv = self.attn(h, meta, hk, k_meta or meta, bias, past)
        x = x + self.drop(a)
        if self.cross is not None:
            mem = memory if mem_kv is None else None
            x = x + self.drop(self.cross(self.ln_cross(x), _unmasked(meta), mem, mem_meta, past=mem_kv)[0])
        return x + self.drop(self.ffn(self.ln2(x))), kv


def _unmasked(meta):
    """Queries of a cross-attention: plain CONTEXT (they see every valid memory key)."""
    z = torch.zeros_like(meta.kind)
    return Meta(z, z, seq=meta.seq)


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


class UnifiedLM(nn.Module):
    """One stack of self-attention layers used as a bidirectional encoder, a prefix-LM or a
    pseudo-masked LM, depending only on the per-token (kind, step) it is given (UniLMv2)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.emb = Embeddings(cfg)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.rel_table = nn.Parameter(torch.zeros(cfg.n_heads, cfg.rel_buckets)) if cfg.rel_pos else None
        self.head = LMHead(cfg, self.emb.tok)
        self.apply(_init)

    def rel_bias(self, q_pos, k_pos):
        if self.rel_table is None:
            return None
        return kernels.rel_pos_bias(self.rel_table, q_pos, k_pos, self.cfg.rel_max_distance)

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
        return h if predict is None else self.head(h[predict])

    def lm_logits(self, h):
        return self.head(h)


def _init(m):
    """BERT's initialisation: N(0, 0.02) weights, zero biases."""
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())
