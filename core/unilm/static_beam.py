"""UniLMv2's seq2seq decoder (core/unilm/seq2seq.py PMLMDecoder) in the beam search at fixed shapes
of core/static_beam.py, so that a GPU can replay each step as one CUDA graph (UniLMv2 section 3.4:
the [P] of each step predicts its token)."""

import torch

import kernels
from ..graphs import source_bucket
from ..kv_cache import KVCache
from ..model import Meta
from ..static_beam import StaticBeam, kept, zero_pairs
from .seq2seq import PMLMDecoder


class StaticBeamPMLM(StaticBeam):
    """UniLMv2's seq2seq decoder (PMLMDecoder) at fixed shapes. Keys: S source slots (CONTEXT, step 0,
    the padding invalid), M target slots (slot j holds y_{j+1}: ORIGINAL, step j+1, position S_b + j)
    and one [P] slot (PSEUDO, rewritten each step: step t+1, position S_b + t).
    Queries at step t: y_t (ORIGINAL, step t) and [P] (PSEUDO, step t+1), as PMLMDecoder's; before
    the first step y_t is a stand-in whose key goes to the last target slot, which no step reads."""

    def __init__(self, model, B, S, K, M, *settings):
        super().__init__(model, B, K, M, *settings)
        N, dev = B * K, self.t.device
        self.S = S
        full = lambda n, v: torch.full((N, n), v, dtype=torch.long, device=dev)  # noqa: E731
        self.k_kind = torch.cat([full(S, kernels.CONTEXT), full(M, kernels.ORIGINAL), full(1, kernels.PSEUDO)], 1)
        self.k_step = torch.cat([full(S, 0), torch.arange(1, M + 1, device=dev).expand(N, M), full(1, 0)], 1)
        self.k_pos = full(S + M + 1, 0)
        self.k_valid = torch.ones(N, S + M + 1, dtype=torch.bool, device=dev)
        self.k_meta = Meta(self.k_kind, self.k_step, self.k_valid)
        self.q_step, self.q_pos, self.q_tok = full(2, 0), full(2, 0), full(2, 0)
        self.meta = Meta(
            torch.tensor([kernels.ORIGINAL, kernels.PSEUDO], device=dev).expand(N, 2).contiguous(), self.q_step
        )
        self.src_len = torch.zeros(N, dtype=torch.long, device=dev)
        self.pseudo = full(1, self.tok.pseudo_id)[:, 0]

    def _setup(self, src_ids, max_src):
        """The sources encoded by PMLMDecoder itself (the same tokens, positions and cache)."""
        dec = PMLMDecoder(self.model, src_ids, self.tok, max_src=max_src)
        K, S, M = self.K, dec.cache.length, self.M
        limit = self.model.cfg.max_positions
        if int(dec.src_len.max()) + M - 1 >= limit:
            raise ValueError(
                f"decoding {M} steps reaches position {int(dec.src_len.max()) + M - 1}, past the "
                f"model's max_positions {limit}: shorten the source or max_len"
            )
        if self.cache is None:
            _, H, _, D = dec.cache.kv[0][0].shape
            kv = zero_pairs(
                len(dec.cache.kv), self.B * K, H, self.S + M + 1, D, dec.cache.kv[0][0].dtype, self.t.device
            )
            self.cache = KVCache(kv, self.k_meta, self.k_pos)  # a step writes at its own slots (_logits)
        for (k, v), (ck, cv) in zip(dec.cache.kv, self.cache.kv):
            ck[:, :, :S].copy_(k.repeat_interleave(K, 0))
            cv[:, :, :S].copy_(v.repeat_interleave(K, 0))
        self.src_len.copy_(dec.src_len.repeat_interleave(K, 0))
        self.k_valid[:, : self.S].zero_()
        self.k_valid[:, :S].copy_(dec.cache.meta.valid.repeat_interleave(K, 0))
        self.k_pos[:, : self.S].zero_()
        self.k_pos[:, :S].copy_(dec.cache.pos.repeat_interleave(K, 0))
        self.k_pos[:, self.S : self.S + M].copy_(self.src_len[:, None] + torch.arange(M, device=self.t.device))

    def _clear(self):
        for k, v in self.cache.kv:  # the target and [P] slots; the source's stay
            k[:, :, self.S :].zero_()
            v[:, :, self.S :].zero_()

    def _logits(self):
        m, S, M, t = self.model, self.S, self.M, self.t
        p = self.src_len + t  # the [P]'s position
        self.q_pos.copy_(torch.stack([p - 1, p], 1))
        self.q_step.copy_(torch.stack([t, t + 1])[None].expand_as(self.q_step))
        self.q_tok.copy_(torch.stack([self.prev, self.pseudo], 1))
        self.k_step[:, -1] = t + 1
        self.k_pos[:, -1] = p
        at = torch.stack([torch.where(t == 0, S + M - 1, S + t - 1), torch.full_like(t, S + M)])
        self.meta.cache.clear()  # the step's codes and tile maps: made anew inside the graph
        bias = m.rel_bias(self.q_pos, self.cache.pos)
        x = m.emb(self.q_tok, self.q_pos, torch.ones_like(self.q_tok))
        for i, layer in enumerate(m.layers):
            x, _ = layer(x, self.meta, k_meta=self.cache.meta, bias=bias, past=self.cache.kv[i], write_at=at)
        return m.head(m.ln_f(x[:, -1]))


def static_beam_pmlm(
    model,
    src_ids,
    tok,
    beam,
    max_len,
    min_len=1,
    length_penalty=0.6,
    length_norm="wu",
    no_repeat_ngram=0,
    max_src=None,
    graphs=True,
):
    """Beam search of a UniLMv2 seq2seq model (core/model.UnifiedLM) over a batch of sources, at fixed
    shapes (CUDA graphs on a GPU): the tokens and scores of decoding.beam_search over PMLMDecoder."""
    longest = max(len(list(s)[:max_src]) for s in src_ids) + 2  # [SOS] ... [EOS]
    S_pad = source_bucket(longest)
    settings = (min_len, length_penalty, length_norm, no_repeat_ngram, tok, graphs)
    search = kept(
        model,
        ("pmlm", len(src_ids), S_pad, beam, max_len) + settings,
        lambda: StaticBeamPMLM(model, len(src_ids), S_pad, beam, max_len, *settings),
    )
    return search.run(src_ids, max_src)
