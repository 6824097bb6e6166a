"""Beam search at fixed shapes, so that a GPU can replay each step as one CUDA graph: the search, and
T5's decoder in it (UniLMv2's: core/unilm/static_beam.py).

core/decoding.beam_search drives any incremental decoder with host-side bookkeeping: the cache
grows by one key a step, finished sources' rows are dropped, and the pool of finished hypotheses
is updated only when one finishes; every step then costs a few hundred launches and several host
syncs, and at batch 1 a GPU spends its time on those. Here every shape is fixed for a batch of B
sources, K beams and at most M steps:

  * the decoder's key/value cache has a slot for every key a search can make, the step's keys
    written at their index (T5: M target slots, EncoderDecoder.decode_step_into; UniLMv2: the
    source's, M target slots and the [P]'s); a slot's step hides it from the queries until it is
    written, so no mask changes shape; sources are padded to a multiple of SOURCE_BUCKET;
  * all B*K rows run from the first step: before the first token every row of a source is the
    same, and beams 2..K start at a score of -inf, so the first ranking sees one row per source,
    as beam_search's does;
  * a finished source's rows keep running (their results are ignored) and its pool is frozen; the
    pool update runs at every step under a mask; the n-gram ban reads the hypotheses up to the
    step from a (B*K, M) buffer;
  * the host reads one flag per step (whether any source is still searching) to stop.
The ranking, the pool and the stopping rule are beam_search's (its module docstring), so the
tokens and scores are the same (tests/test_static_beam.py compares them on the CPU, where the
same steps run eagerly). On CUDA, with graphs, the start and the step are each captured once per
(model, shapes, decoding settings, autocast) and replayed (core/graphs.py)."""

import weakref

import torch
import torch.nn.functional as F

import kernels
from .decoding import NEG_INF, length_norm_fn
from .graphs import capture, source_bucket, weights_version
from .kv_cache import KVCache
from .model import Meta, positions
from .t5 import encoder_input


def ban_repeated_ngrams_static(logp, hyps, t, n):
    """decoding.ban_repeated_ngrams for hypotheses held in a (N, M) buffer of which the first t
    (a 0-dim long tensor) columns are written: the same bans, at fixed shapes."""
    M = hyps.shape[1]
    if n <= 0 or M < n:
        return logp
    grams = hyps.unfold(1, n, 1)  # (N, M-n+1, n)
    j = torch.arange(grams.shape[1], device=hyps.device)
    complete = j + n <= t  # the n-gram's last token is written
    at = (t - n + 1 + torch.arange(n - 1, device=hyps.device)).clamp(0, M - 1)
    suffix = hyps[:, at]  # (N, n-1): what the next token would extend
    match = (grams[:, :, :-1] == suffix[:, None, :]).all(-1) & complete[None] & (t >= n)
    ban = torch.zeros_like(logp).scatter_add_(1, grams[:, :, -1], match.to(logp.dtype))
    return logp.masked_fill(ban > 0, NEG_INF)


class StaticBeam:
    """Beam search of size K for B sources with at most M steps, at fixed shapes. A subclass gives
    the decoder: `_setup(...)` (eager, per run: the sources into the static buffers; allocates
    `self.cache`, a core/kv_cache.KVCache of N = B*K rows at fixed shapes, its keys and values
    reordered with the beams), `_clear()` (the
    decoder's part of the start) and `_logits()` (one decoder step of every row, at self.t, fed
    self.prev). run(...) -> (list of B token lists, (B,) scores)."""

    def __init__(self, model, B, K, M, min_len, length_penalty, length_norm, no_repeat_ngram, tok, graphs):
        p = next(model.parameters())
        dev = p.device
        if K < 1 or M < 1:
            raise ValueError(f"beam and max_len must be >= 1, got {K} and {M}")
        if 2 * K > model.cfg.vocab_size:
            raise ValueError(
                f"the static beam search needs a vocabulary of at least 2 * beam tokens, got "
                f"{model.cfg.vocab_size} for beam {K}"
            )
        self.model, self.B, self.K, self.M, self.tok = model, B, K, M, tok
        self.min_len, self.lp, self.n = min_len, length_norm_fn(length_norm, length_penalty), no_repeat_ngram
        self.eos, self.sos = tok.eos_id, tok.sos_id
        self.graphs = graphs and p.is_cuda
        N = B * K
        self.t = torch.zeros((), dtype=torch.long, device=dev)
        self.prev = torch.zeros(N, dtype=torch.long, device=dev)
        self.sums = torch.zeros(N, device=dev)
        # a source's first ranking sees its first row only (the others are the same row): as beam_search's
        self.sums0 = torch.tensor([0.0] + [NEG_INF] * (K - 1), device=dev).repeat(B)
        self.hyps = torch.zeros(N, M, dtype=torch.long, device=dev)
        self.alive = torch.ones(B, dtype=torch.bool, device=dev)
        self.anyone = torch.ones((), dtype=torch.bool, device=dev)
        self.fin_score = torch.full((B, K), NEG_INF, device=dev)
        self.fin_tok = torch.zeros(B, K, M, dtype=torch.long, device=dev)
        self.fin_len = torch.zeros(B, K, dtype=torch.long, device=dev)
        self.cache = None
        self._graphs, self.version = None, None

    # -- the steps ------------------------------------------------------------------------------------
    def _start(self):
        self.t.zero_()
        self.prev.fill_(self.sos)
        self.sums.copy_(self.sums0)
        self.hyps.zero_()
        self.alive.fill_(True)
        self.anyone.fill_(True)
        self.fin_score.fill_(NEG_INF)
        self.fin_tok.zero_()
        self.fin_len.zero_()
        self._clear()

    def _step(self):
        B, K, M = self.B, self.K, self.M
        t, dev = self.t, self.t.device
        logp = F.log_softmax(self._logits().float(), -1)
        V = logp.shape[1]
        logp = torch.where((torch.arange(V, device=dev) == self.eos) & (t < self.min_len), NEG_INF, logp)
        logp = ban_repeated_ngrams_static(logp, self.hyps, t, self.n)
        cand = (self.sums[:, None] + logp).view(B, K * V)
        top, idx = cand.topk(2 * K, dim=1)  # (B, C), best first
        C = top.shape[1]
        parent = torch.arange(B, device=dev)[:, None] * K + idx // V
        tok = idx % V
        is_eos = tok == self.eos
        last = t == M - 1
        rank = torch.arange(C, device=dev)[None, :]

        # finished hypotheses: EOS among the first K (every one of the first K at the last step)
        finishing = (rank < K) & (is_eos | last) & self.alive[:, None]
        lp = self.lp((t + 1).double()).float()  # as beam_search's Python float
        new_score = torch.where(finishing, top / lp, NEG_INF)
        cols = torch.arange(M, device=dev)
        new_tok = torch.where(cols < t, self.hyps[parent], 0)  # (B, C, M)
        new_tok = torch.where(cols == t, torch.where(is_eos, 0, tok)[:, :, None], new_tok)
        new_len = t + (~is_eos).long()
        pool_score = torch.cat([self.fin_score, new_score], 1)
        best_score, best = pool_score.topk(K, dim=1)
        keep = self.alive[:, None]  # a finished source's pool stays as it was
        self.fin_tok.copy_(
            torch.where(
                keep[:, :, None],
                torch.cat([self.fin_tok, new_tok], 1).gather(1, best[:, :, None].expand(-1, -1, M)),
                self.fin_tok,
            )
        )
        self.fin_len.copy_(torch.where(keep, torch.cat([self.fin_len, new_len], 1).gather(1, best), self.fin_len))
        self.fin_score.copy_(torch.where(keep, best_score, self.fin_score))

        # the new live beams: the first K non-EOS candidates, in rank order
        order = (is_eos.long() * C + rank).argsort(dim=1)[:, :K]
        live_parent, live_tok = parent.gather(1, order), tok.gather(1, order)
        live_sum = top.gather(1, order).masked_fill(is_eos.gather(1, order), NEG_INF)
        done = self.fin_score[:, K - 1] >= live_sum[:, 0] / lp
        self.alive.copy_(self.alive & ~done & ~last)
        self.anyone.copy_(self.alive.any())
        rows = live_parent.reshape(-1)
        for k, v in self.cache.kv:
            k.copy_(k.index_select(0, rows))
            v.copy_(v.index_select(0, rows))
        self.hyps.copy_(torch.where(cols == t, live_tok.reshape(-1, 1), self.hyps[rows]))
        self.sums.copy_(live_sum.reshape(-1))
        self.prev.copy_(live_tok.reshape(-1))
        self.t.add_(1)

    # -- running ------------------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, *inputs):
        self._setup(*inputs)
        if self.graphs:
            version = weights_version(self.model)
            if self._graphs is None or version != self.version:
                self._graphs, self.version = capture([self._start, self._step], self.model), version
            start, step = self._graphs[0].replay, self._graphs[1].replay
        else:
            start, step = self._start, self._step
        start()
        for _ in range(self.M):
            step()
            if not bool(self.anyone):  # the one host sync of a step
                break
        lens, toks = self.fin_len[:, 0].tolist(), self.fin_tok[:, 0].tolist()
        return [toks[b][: lens[b]] for b in range(self.B)], self.fin_score[:, 0].cpu()


def zero_pairs(n_layers, N, H, L, D, dtype, device):
    """A (keys, values) pair of zeros (N, H, L, D) per layer: a cache's buffers at fixed shapes."""
    return [
        (torch.zeros(N, H, L, D, dtype=dtype, device=device), torch.zeros(N, H, L, D, dtype=dtype, device=device))
        for _ in range(n_layers)
    ]


class StaticBeamT5(StaticBeam):
    """T5 (core/model.EncoderDecoder): sources of at most S tokens, the self-attention cache of M
    slots written at the step's index (EncoderDecoder.decode_step_into)."""

    def __init__(self, model, B, S, K, M, *settings):
        super().__init__(model, B, K, M, *settings)
        N, dev = B * K, self.t.device
        self.S = S
        self.pos = torch.zeros(N, 1, dtype=torch.long, device=dev)
        self.src_valid = torch.zeros(N, S, dtype=torch.bool, device=dev)
        self.k_pos = torch.arange(M, device=dev).expand(N, M)
        orig = torch.full((N, M), kernels.ORIGINAL, dtype=torch.long, device=dev)
        self.k_meta = Meta(orig, self.k_pos)  # slot j: step j (causal: the slots past the step are hidden)
        self.meta = Meta(orig[:, :1], self.pos)
        zero = torch.zeros(N, S, dtype=torch.long, device=dev)
        self.mem_meta = Meta(zero, zero, self.src_valid)

    def _setup(self, memory, src_valid):
        """memory: (B, S', C) the encoder's output, src_valid (B, S') bool, S' <= S."""
        K, S = self.K, memory.shape[1]
        mem_kv = self.model.cross_kv(memory)  # per layer (B, H, S', D)
        if self.cache is None:
            _, H, _, D = mem_kv[0][0].shape
            dt, dev, L = mem_kv[0][0].dtype, memory.device, len(mem_kv)
            self.cache = KVCache(
                zero_pairs(L, self.B * K, H, self.M, D, dt, dev),
                self.k_meta,
                self.k_pos,
                zero_pairs(L, self.B * K, H, self.S, D, dt, dev),
                self.mem_meta,
                self.t.view(1),
            )
        for (k, v), (mk, mv) in zip(mem_kv, self.cache.cross):
            mk.zero_()
            mv.zero_()
            mk[:, :, :S].copy_(k.repeat_interleave(K, 0))
            mv[:, :, :S].copy_(v.repeat_interleave(K, 0))
        self.src_valid.zero_()
        self.src_valid[:, :S].copy_(src_valid.repeat_interleave(K, 0))
        self.mem_meta.cache.clear()  # the padding is new: the cross-attention's codes are made again

    def _clear(self):
        self.pos.zero_()
        for k, v in self.cache.kv:
            k.zero_()
            v.zero_()

    def _logits(self):
        self.meta.cache.clear()  # the queries' codes depend on the step: made anew inside the graph
        out = self.model.decode_step_into(self.prev, self.pos, self.meta, self.cache)  # writes at slot self.t
        self.pos.add_(1)
        return out


_BEAMS = weakref.WeakKeyDictionary()  # model -> {shapes and settings: its StaticBeam}


def kept(model, key, make):
    """The StaticBeam of these shapes and settings (under this autocast), made once and kept with
    its graphs."""
    dev = next(model.parameters()).device.type
    key = key + (torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev),)
    beams = _BEAMS.setdefault(model, {})
    if key not in beams:
        beams[key] = make()
    return beams[key]


def static_beam_t5(
    model, src_ids, tok, beam, max_len, min_len=1, length_penalty=0.6, length_norm="wu", no_repeat_ngram=0, graphs=True
):
    """Beam search of a T5 model (core/model.EncoderDecoder) over a batch of sources, at fixed shapes
    (CUDA graphs on a GPU): the tokens and scores of decoding.beam_search over T5Decoder."""
    src, valid = encoder_input(model, src_ids, tok)
    B, S = src.shape
    S_pad = source_bucket(S)
    settings = (min_len, length_penalty, length_norm, no_repeat_ngram, tok, graphs)
    search = kept(
        model,
        ("t5", B, S_pad, beam, max_len) + settings,
        lambda: StaticBeamT5(model, B, S_pad, beam, max_len, *settings),
    )
    with torch.no_grad():
        memory = model.encode(src, positions(src), valid)
    return search.run(memory, valid)
