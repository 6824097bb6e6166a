"""Mask-Predict decoding (Ghazvininejad et al. 2019, "Mask-Predict: Parallel Decoding of
Conditional Masked Language Models", section 3) for every NAR model of core/mlae/nar.py (the MLAE
paper's MLAE NAR, T5-NAR and CMLM all decode with it, its section 4.4).

mask_predict: the top `length_beam` lengths of the predictor (never the gold length), all
candidates of all sources in one batch. Iteration 0 predicts every token from all [MASK]s;
iteration t = 1..I-1 re-masks the n = max(1, floor(L (I - t) / I)) least confident tokens of a
candidate of length L and predicts them again (a token's confidence is its probability when it
was last predicted). Every candidate runs all I iterations, as published (Mask-Predict section
3.1: n = N (T - t) / T; at least one token, so that no iteration of a short target is empty).
With adaptive_stop, fairseq's behaviour (its iterative refinement generator unless
--iter-decode-force-max-iter): a candidate stops when the masked state it would feed the next
iteration equals the one it fed this one, for that iteration would only repeat this one. The
candidate with the best mean log-probability wins; consecutive duplicate tokens are then merged
(Mask-Predict section 3.3; the typical NAR repetition).

Without adaptive_stop a decoding makes no host sync after its first call (the longest candidate's
length), and every call has the shape of the first. NARDecoder(static=True) fixes that shape
across decodings too (candidates padded to max_len, sources to a multiple of 64) and runs the I
iterations, re-masking included, as one call on fixed buffers (StaticDecode); NARDecoder(graphs=True)
replays that call as one CUDA graph: at batch 1 a GPU runs a small decoder faster than the host
can launch its ~100 kernels a layer, and the re-masking between two model calls (a sort, a
comparison, two selects) would otherwise be launched from the host each iteration.
bench/bench_decoders.py times both against the eager path.
"""

import weakref

import torch
import torch.nn.functional as F

from ..batch import pad_stack, source_array
from ..graphs import capture, source_bucket, weights_version
from ..model import positions

# -----------------------------------------------------------------------------
# Mask-Predict


class NARDecoder:
    """What mask_predict asks of a model (a toy one in the tests implements the same two calls):

        length_logp()                    (B, P) log-probabilities of the target lengths 0..P-1
        predict(rows, tokens, valid)     rows (N,) long: the source of each candidate; tokens,
                                         valid (N, T): the decoder input. Returns (N, T, V)
                                         log-probabilities.
    and, optionally, predict_max(rows, tokens, valid), the (confidence, token) pair of predict's
    max, and `static` (take every candidate at max_len positions). The sources are encoded once;
    put the model in eval mode first."""

    @torch.no_grad()
    def __init__(self, model, src_ids_list, tok, static=False, graphs=False):
        """static: every model call at fixed shapes (the candidates padded to mask_predict's max_len,
        the sources to a multiple of SOURCE_BUCKET), through a StaticDecode, a whole decoding without
        adaptive stop as one call; graphs: and on CUDA each call one replay of a CUDA graph
        captured once per shape (implies static). The tokens are the same either way
        (tests/test_nar.py)."""
        self.model, self.tok = model, tok
        self.graphs = graphs
        self.static = static or graphs
        dev = next(model.parameters()).device
        sources = [source_array(s, tok, model.cfg.max_positions, model.cfg.enc_sos) for s in src_ids_list]
        src, valid = pad_stack(sources, tok.pad_id)
        self.src_valid = valid.to(dev)
        src = src.to(dev)
        self.memory = model.encode(src, positions(src), self.src_valid)
        self.rows = len(sources)

    @torch.no_grad()
    def length_logp(self):
        return F.log_softmax(self.model.length_logits(self.memory, self.src_valid).float(), -1)

    @torch.no_grad()
    def predict(self, rows, tokens, valid):
        h = self.model.decode_nar(tokens, valid, self.memory[rows], self.src_valid[rows])
        return F.log_softmax(self.model.head(h).float(), -1)

    @torch.no_grad()
    def predict_max(self, rows, tokens, valid):
        """(confidence, token) of every position: the max of predict's log-probabilities."""
        if not self.static:
            return self.predict(rows, tokens, valid).max(-1)
        return self._static(rows, tokens.shape, None).run(self.memory[rows], self.src_valid[rows], tokens, valid)

    @torch.no_grad()
    def iterate(self, rows, inp, valid, lengths, iterations, mask_id, pad_id):
        """Static decoders only: mask_predict's I iterations (without adaptive stop) as one call,
        on a GPU with graphs one replay. Returns (tokens, confidences), each (N, T)."""
        return self._static(rows, inp.shape, (iterations, mask_id, pad_id)).run(
            self.memory[rows], self.src_valid[rows], inp, valid, lengths
        )

    def _static(self, rows, shape, loop):
        S = source_bucket(self.src_valid.shape[1])
        return static_decode(self.model, *shape, S, self.memory.dtype, self.graphs, loop)


class StaticDecode:
    """Mask-Predict's model calls for N candidates of T positions against S source positions, on
    buffers of fixed shape. With loop = None, one call (decoder, LM head, log-softmax, max over the
    vocabulary): predict_max. With loop = (iterations, mask_id, pad_id), a whole decoding without
    adaptive stop: every iteration's call and the re-masking between them (_iterate, the code the
    eager path runs). run() copies its inputs in (a shorter source padded, its padding invalid) and
    computes; on CUDA with graphs it replays a CUDA graph captured at the first run (the attention's
    codes and tile maps are built inside it, from the buffers). Kept per (model, shapes, loop) by
    static_decode and captured again when the model's parameters change."""

    def __init__(self, model, N, T, S, dtype, graphs, loop=None):
        p = next(model.parameters())
        self.model, self.loop = model, loop
        self.graphs = graphs and p.is_cuda
        self.memory = torch.zeros(N, S, model.cfg.d_model, dtype=dtype, device=p.device)
        self.src_valid = torch.zeros(N, S, dtype=torch.bool, device=p.device)
        self.tokens = torch.zeros(N, T, dtype=torch.long, device=p.device)
        self.valid = torch.zeros(N, T, dtype=torch.bool, device=p.device)
        self.lengths = torch.ones(N, dtype=torch.long, device=p.device)
        self.conf = torch.zeros(N, T, device=p.device)
        self.best = torch.zeros(N, T, dtype=torch.long, device=p.device)
        self.captured, self.version = None, None

    def _call(self, tokens):
        h = self.model.decode_nar(tokens, self.valid, self.memory, self.src_valid)
        return F.log_softmax(self.model.head(h).float(), -1).max(-1)

    def _step(self):
        if self.loop is None:
            conf, best = self._call(self.tokens)
        else:
            iterations, mask_id, pad_id = self.loop
            best, conf = _iterate(self._call, self.tokens, self.valid, self.lengths, iterations, mask_id, pad_id)
        self.conf.copy_(conf)
        self.best.copy_(best)

    @torch.no_grad()
    def run(self, memory, src_valid, tokens, valid, lengths=None):
        S = src_valid.shape[1]
        self.memory[:, S:].zero_()
        self.memory[:, :S].copy_(memory)
        self.src_valid[:, S:].fill_(False)
        self.src_valid[:, :S].copy_(src_valid)
        self.tokens.copy_(tokens)
        self.valid.copy_(valid)
        if lengths is not None:
            self.lengths.copy_(lengths)
        if self.graphs:
            version = weights_version(self.model)
            if self.captured is None or version != self.version:
                self.captured, self.version = capture([self._step], self.model), version  # (its graph, and the casts)
            self.captured[0].replay()
        else:
            self._step()
        if self.loop is None:
            return self.conf.clone(), self.best.clone()
        return self.best.clone(), self.conf.clone()


_STEPS = weakref.WeakKeyDictionary()  # model -> {(N, T, S, dtype, graphs, autocast, loop): StaticDecode}


def static_decode(model, N, T, S, dtype, graphs, loop=None):
    """The StaticDecode of these shapes, made once and kept (with its graph)."""
    dev = next(model.parameters()).device.type
    key = (N, T, S, dtype, graphs, torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev), loop)
    steps = _STEPS.setdefault(model, {})
    if key not in steps:
        steps[key] = StaticDecode(model, N, T, S, dtype, graphs, loop)
    return steps[key]


def _predict_max(decoder, rows, tokens, valid):
    if hasattr(decoder, "predict_max"):
        return decoder.predict_max(rows, tokens, valid)
    return decoder.predict(rows, tokens, valid).max(-1)


def _remask(conf, lengths, t, iterations):
    """(N, T) bool: the n = max(1, floor(L (I - t) / I)) least confident tokens of each candidate
    (padding has confidence +inf: never re-masked), ties to the earlier position. A token's rank
    (0 = least confident) is the number of tokens before it in that order: conf.argsort(stable)'s
    inverse, by T x T comparisons instead of two sorts (T is a summary's length)."""
    n = ((lengths * (iterations - t)) // iterations).clamp_min(1)
    other, this = conf[:, None, :], conf[:, :, None]  # (N, T, T): [n, i, j] compares token j with token i
    pos = torch.arange(conf.shape[1], device=conf.device)
    before = (other < this) | ((other == this) & (pos[None, :] < pos[:, None]))
    return before.sum(-1) < n[:, None]


def _iterate(call, inp, valid, lengths, iterations, mask_id, pad_id):
    """Every iteration of every candidate (no adaptive stop), at one shape and with no host sync:
    call(tokens) -> (confidence, token) of each position. Returns (tokens, confidences)."""
    conf, tokens = call(inp)
    tokens = tokens.masked_fill(~valid, pad_id)
    conf = conf.masked_fill(~valid, float("inf"))  # padding is never re-masked
    for t in range(1, iterations):
        remask = _remask(conf, lengths, t, iterations)
        new_conf, new_tok = call(tokens.masked_fill(remask, mask_id))  # the masked state fed to iteration t
        tokens = torch.where(remask, new_tok, tokens)
        conf = torch.where(remask, new_conf, conf)
    return tokens, conf


def merge_repeats(ids):
    """Consecutive duplicates merged: [5, 5, 6, 5] -> [5, 6, 5]."""
    return [t for i, t in enumerate(ids) if i == 0 or t != ids[i - 1]]


@torch.no_grad()
def mask_predict(
    decoder,
    mask_id,
    length_beam=3,
    iterations=10,
    max_len=32,
    pad_id=0,
    eos_id=3,
    return_details=False,
    adaptive_stop=False,
):
    """Batched Mask-Predict (see the module docstring). Returns a list of B token lists (cut at
    an [EOS] if one is predicted, consecutive duplicates merged); with return_details also a
    dict of (B,) tensors: score (mean log-probability of the chosen candidate), length, and
    iterations (model calls the chosen candidate took: `iterations` unless adaptive_stop)."""
    if length_beam < 1 or iterations < 1:
        raise ValueError(f"length_beam {length_beam} and iterations {iterations} must be >= 1")
    lp = decoder.length_logp()  # (B, P)
    B, P = lp.shape
    dev = lp.device
    allowed = torch.arange(P, device=dev)
    lp = lp.masked_fill((allowed < 1) | (allowed > max_len), float("-inf"))  # 1 <= L <= max_len
    K = min(length_beam, max(1, min(P - 1, max_len)))
    lengths = lp.topk(K, dim=1).indices.reshape(-1)  # (N,) N = B*K, source-major
    rows = torch.arange(B, device=dev).repeat_interleave(K)
    # a static decoder takes every candidate at max_len positions, the rest padding: one shape
    static = getattr(decoder, "static", False)
    T = min(max_len, P - 1) if static else int(lengths.max())
    valid = torch.arange(T, device=dev)[None] < lengths[:, None]  # (N, T)
    inp = torch.full((B * K, T), mask_id, dtype=torch.long, device=dev).masked_fill(~valid, pad_id)
    used = torch.full((B * K,), iterations, dtype=torch.long, device=dev)
    if not adaptive_stop:  # every candidate runs every iteration: no host sync, every call at one shape
        if static and hasattr(decoder, "iterate"):
            tokens, conf = decoder.iterate(rows, inp, valid, lengths, iterations, mask_id, pad_id)
        else:
            tokens, conf = _iterate(
                lambda x: _predict_max(decoder, rows, x, valid), inp, valid, lengths, iterations, mask_id, pad_id
            )
    else:
        conf, tokens = _predict_max(decoder, rows, inp, valid)
        tokens = tokens.masked_fill(~valid, pad_id)
        conf = conf.masked_fill(~valid, float("inf"))
        used.fill_(1)
        live = torch.ones(B * K, dtype=torch.bool, device=dev)
        for t in range(1, iterations):
            remask = _remask(conf, lengths, t, iterations)
            nxt = tokens.masked_fill(remask, mask_id)  # the masked state fed to iteration t
            live &= (nxt != inp).any(1)  # the state repeats: iteration t would repeat iteration t - 1
            if not live.any():
                break
            act = live.nonzero()[:, 0]
            inp = nxt
            new_conf, new_tok = _predict_max(decoder, rows[act], inp[act], valid[act])
            hit = remask[act]
            tokens[act] = torch.where(hit, new_tok, tokens[act])
            conf[act] = torch.where(hit, new_conf, conf[act])
            used[act] += 1
    score = conf.masked_fill(~valid, 0.0).sum(1) / lengths  # (N,) mean log-probability
    best = score.view(B, K).argmax(1)  # (B,)
    pick = torch.arange(B, device=dev) * K + best
    out = []
    for r, L in zip(pick.tolist(), lengths[pick].tolist()):
        ids = tokens[r, :L].tolist()
        ids = ids[: ids.index(eos_id)] if eos_id in ids else ids
        out.append(merge_repeats(ids))
    if not return_details:
        return out
    return out, dict(score=score[pick].cpu(), length=lengths[pick].cpu(), iterations=used[pick].cpu())
