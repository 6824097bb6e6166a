"""The T5 baseline: span-corruption pretraining, seq2seq fine-tuning with teacher forcing, and an
incremental decoder with a key/value cache (Raffel et al. 2020, "Exploring the Limits of Transfer
Learning with a Unified Text-to-Text Transformer"). The model is core.model.EncoderDecoder.

Span corruption (section 3.1.4, and 3.3.4 for the span length): 15% of the tokens, in spans of
mean length 3, each span replaced by one sentinel in the input; the target lists the sentinels
in order, each followed by the tokens it replaced:

    original:  x1 x2 x3 x4 x5 x6 x7 x8 x9 x10
    source:    x1 <s0> x4 x5 x6 x7 <s1> x10 [EOS]
    target:    <s0> x2 x3 <s1> x8 x9 [EOS]

As in T5's random_spans_noise_mask, the number of corrupted tokens is round(ratio * n) and the
number of spans round(corrupted / mean_span); both the corrupted tokens and the kept ones are
split into spans by a uniformly random composition, so spans never touch. One departure: T5's code
always begins with a kept run and ends with a corrupted span (its last token is always corrupted);
here the kept runs before the first span and after the last may be empty, so the corruption is
uniform over all layouts with that many corrupted tokens in that many spans.
Both sides end with [EOS], as T5's inputs and targets do.
"""

import numpy as np
import torch
import torch.nn.functional as F

from .batch import Batch, flat_positions, pad_stack, source_array
from .kv_cache import KVCache
from .model import positions
from .tokenizer import FIRST_SENTINEL, N_SENTINELS

N_SPECIAL = FIRST_SENTINEL + N_SENTINELS  # ids under it are control symbols: [EOS], the sentinels, ...

IGNORE = -100


# -----------------------------------------------------------------------------
# span corruption


def _composition(total, parts, rng):
    """`parts` positive integers summing to `total`, uniformly among all such compositions."""
    if parts == 1:
        return np.array([total], dtype=np.int64)
    cuts = np.sort(rng.choice(total - 1, parts - 1, replace=False)) + 1  # distinct, in 1..total-1
    return np.diff(np.concatenate([[0], cuts, [total]])).astype(np.int64)


def _span_counts(n, ratio, mean_span):
    """(corrupted tokens, spans) of a sequence of n tokens."""
    n_noise = min(max(1, round(n * ratio)), n - 1)
    n_spans = max(1, min(round(n_noise / mean_span), N_SENTINELS, n - n_noise + 1))
    return n_noise, n_spans


def noise_spans(n, rng, ratio=0.15, mean_span=3, over=None):
    """(starts, lengths) of the corrupted spans of a sequence of n tokens, in order. With `over`,
    the counts are those of n tokens, laid out over the first `over` positions (span_ids)."""
    n_noise, n_spans = _span_counts(n, ratio, mean_span)
    if n_noise <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    n_keep = (n if over is None else over) - n_noise
    noise = _composition(n_noise, n_spans, rng)
    # n_spans + 1 kept runs, the inner ones >= 1 token, the outer two possibly empty
    keep = _composition(n_keep + 2, n_spans + 1, rng)
    keep[0] -= 1
    keep[-1] -= 1
    starts = np.cumsum(keep[:-1]) + np.concatenate([[0], np.cumsum(noise)[:-1]])
    return starts.astype(np.int64), noise


def span_ids(n, rng, ratio=0.15, mean_span=3, fixed=None):
    """(n,) int64: the span each token is corrupted into (0, 1, ...), -1 for a kept token.
    `fixed` (bool, n) marks tokens never corrupted, the [EOS] that ends a document in the
    pretraining stream: the spans have the counts of n tokens (so a window's corrupted lengths
    depend on n alone) and are laid out over the other tokens; a span that reaches a fixed token
    goes on after it (the token stays in the source, after the span's sentinel)."""
    free = np.arange(n) if fixed is None else np.flatnonzero(~np.asarray(fixed, dtype=bool))
    n_noise, n_spans = _span_counts(n, ratio, mean_span)
    if len(free) - n_noise + 1 < n_spans or len(free) <= n_noise:
        free = np.arange(n)  # a window of little but separators: they may be corrupted
    out = np.full(n, -1, dtype=np.int64)
    for i, (s, m) in enumerate(zip(*noise_spans(n, rng, ratio, mean_span, over=len(free)))):
        out[free[s : s + m]] = i
    return out


def corrupted_lengths(n, ratio=0.15, mean_span=3):
    """(source length, target length) that span corruption makes of n tokens, both with [EOS]:
    they depend on n alone (the counts are fixed, only the places are random)."""
    n_noise, n_spans = _span_counts(n, ratio, mean_span)
    return n - n_noise + n_spans + 1, n_noise + n_spans + 1


def window_for(seq_len, ratio=0.15, mean_span=3):
    """The longest window whose corrupted source fits seq_len tokens: the encoder then trains
    every position 0..seq_len-1 that fine-tuning may use (a window of seq_len - 3, the PMLM's,
    would leave the last ~10% of them untrained)."""
    n = 2
    while corrupted_lengths(n + 1, ratio, mean_span)[0] <= seq_len:
        n += 1
    return n


def span_corruption(ids, rng, tok, ratio=0.15, mean_span=3):
    """ids: 1-D token ids. Returns (source, target), int64 arrays (see the module docstring).
    An [EOS] in ids (a document boundary of the pretraining stream) is never corrupted, so the
    target never teaches [EOS] inside a span (span_ids)."""
    ids = np.asarray(ids, dtype=np.int64)
    span = span_ids(len(ids), rng, ratio, mean_span, fixed=ids == tok.eos_id)
    src, tgt, last = [], [], -1
    for x, i in zip(ids, span):
        if i < 0:
            src.append(x)
            continue
        if i != last:  # a new span: its sentinel in both (a span resumes after a fixed token)
            src.append(tok.sentinel(i))
            tgt.append(tok.sentinel(i))
            last = i
        tgt.append(x)
    src.append(tok.eos_id)
    tgt.append(tok.eos_id)
    return np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)


# -----------------------------------------------------------------------------
# batches and losses


def collate(sources, targets, tok):
    """Pad (source, target) arrays into a Batch: src, src_valid, tgt_in ([SOS] + target[:-1]),
    tgt_out (target, IGNORE at padding), tgt_valid. norm = target tokens, n_tokens = source +
    target tokens."""
    src, src_valid = pad_stack(sources, tok.pad_id)
    tgt_in, tgt_valid = pad_stack([np.concatenate([[tok.sos_id], t[:-1]]) for t in targets], tok.pad_id)
    tgt_out, _ = pad_stack(targets, IGNORE)
    predict, predict_target = flat_positions(tgt_valid, tgt_out)
    return Batch(
        norm=tgt_valid.sum(),
        n_tokens=src_valid.sum() + tgt_valid.sum(),
        src=src,
        src_valid=src_valid,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        tgt_valid=tgt_valid,
        predict=predict,
        predict_target=predict_target,
    )


def t5_batch(stream, indices, tok, ratio=0.15, mean_span=3):
    """The examples `indices` of a TokenStream, span-corrupted and collated (cf. pmlm_batch)."""
    sources, targets = [], []
    for i in indices:
        window, rng = stream.window_at(i)
        s, t = span_corruption(window, rng, tok, ratio, mean_span)
        sources.append(s)
        targets.append(t)
    return collate(sources, targets, tok)


def _logits(model, batch):
    """(logits (N, V), targets (N,)) at the target tokens, read by the positions collate made."""
    logits = model(batch.src, batch.src_valid, batch.tgt_in, batch.tgt_valid, predict=batch.predict)
    return logits.float(), batch.predict_target


def text_sums(logits, target):
    """The cross-entropy, hits and count of the target tokens that are text (not a sentinel, not
    [EOS]): keys text_loss, text_hit, text_n. A span-corruption target is one sentinel per span
    plus [EOS], about 1 token in 5, and those are easy (the sentinels come in order): its loss
    over every token falls under the unigram entropy of the text while the text tokens are still
    predicted from their frequencies. The plateau test reads text_loss (reproduce/report.py)."""
    text = (target >= N_SPECIAL).float()  # masked sums: a boolean index would read its count (a host sync)
    logits = logits.detach()
    nll = (F.cross_entropy(logits, target, reduction="none") * text).sum()
    hit = ((logits.argmax(-1) == target).float() * text).sum()
    return dict(text_loss=nll, text_hit=hit, text_n=text.sum())


def t5_loss_sums(model, batch):
    """Summed cross-entropy over the target tokens (differentiable), with the hits and the count
    (cf. pmlm_loss_sums): keys loss, hit, n; and text_sums of the text tokens."""
    logits, target = _logits(model, batch)
    loss = F.cross_entropy(logits, target, reduction="sum")
    hit = (logits.argmax(-1) == target).float().sum()
    return dict(
        loss=loss, hit=hit, n=torch.tensor(float(len(target)), device=logits.device), **text_sums(logits, target)
    )


def t5_seq2seq_batch(pairs, tok, max_src, max_tgt, sos=False):
    """pairs: list of (source ids, target ids). Source = SRC + [EOS] ([SOS] first with sos; at most
    max_src tokens), decoder input [SOS] + TGT, output TGT + [EOS] (at most max_tgt tokens); longer
    ones are cut."""
    sources = [source_array(s, tok, max_src, sos) for s, _ in pairs]
    targets = [np.array(list(t)[: max_tgt - 1] + [tok.eos_id], dtype=np.int64) for _, t in pairs]
    return collate(sources, targets, tok)


def t5_seq2seq_loss_sums(model, batch, label_smoothing=0.1):
    """Teacher-forced fine-tuning: loss (label-smoothed cross-entropy, summed, differentiable),
    nll (plain cross-entropy, summed), hit, n."""
    logits, target = _logits(model, batch)
    loss = F.cross_entropy(logits, target, reduction="sum", label_smoothing=label_smoothing)
    nll = F.cross_entropy(logits.detach(), target, reduction="sum")
    hit = (logits.argmax(-1) == target).float().sum()
    return dict(loss=loss, nll=nll, hit=hit, n=torch.tensor(float(len(target)), device=logits.device))


# -----------------------------------------------------------------------------
# incremental decoding


def encoder_input(model, src_ids_list, tok):
    """ "SRC [EOS]" of each source ("[SOS] SRC [EOS]" where the model's encoder was pretrained so:
    cfg.enc_sos), cut to the model's positions, padded: (src (N, S) long, valid (N, S) bool) on
    the model's device."""
    dev = next(model.parameters()).device
    sources = [source_array(s, tok, model.cfg.max_positions, model.cfg.enc_sos) for s in src_ids_list]
    src, valid = pad_stack(sources, tok.pad_id)
    return src.to(dev), valid.to(dev)


class T5Decoder:
    """Step-by-step decoding of a batch of sources, the protocol the beam search drives:

        dec = T5Decoder(model, [src_ids, ...], tok)
        logp = dec.step(None)        # (N, V) log-probabilities of the first token ([SOS] fed)
        dec.reorder(index)           # keep rows `index` in that order (beam reorder, or expand
                                     # B sources to B*K beams with arange(B).repeat_interleave(K))
        logp = dec.step(chosen)      # chosen: (N,) long, the tokens picked at the last step

    `rows` is the current number of rows N. Each source gets [EOS] appended (and is cut to fit
    the position table); they are padded and encoded once. With use_cache (default) the
    cross-attention keys/values of the memory are projected once per decoder layer, and each step
    runs the one new token against the cached self-attention keys/values (core/kv_cache.py: the
    cache holds both); use_cache=False
    re-decodes the whole prefix every step (the reference the cache is tested against). Runs
    without gradients; put the model in eval mode first.
    """

    @torch.no_grad()
    def __init__(self, model, src_ids_list, tok, use_cache=True):
        self.model, self.tok, self.use_cache = model, tok, use_cache
        src, self.src_valid = encoder_input(model, src_ids_list, tok)
        dev = src.device
        pos = positions(src)
        memory = model.encode(src, pos, self.src_valid)  # (N, S, C)
        self.memory = None if use_cache else memory
        self.cache = (
            KVCache.empty(len(src_ids_list), dev, model.cross_kv(memory), model.memory_meta(self.src_valid))
            if use_cache
            else None
        )
        self.prefix = torch.zeros(len(src_ids_list), 0, dtype=torch.long, device=dev)  # decoder inputs so far
        self.rows = len(src_ids_list)

    @torch.no_grad()
    def step(self, prev=None):
        t = self.prefix.shape[1]
        if (prev is None) != (t == 0):
            raise ValueError("T5Decoder.step: prev must be None on the first call only")
        if prev is None:
            tokens = torch.full((self.rows,), self.tok.sos_id, dtype=torch.long, device=self.prefix.device)
        else:
            tokens = prev.to(self.prefix.device, torch.long).view(self.rows)
        self.prefix = torch.cat([self.prefix, tokens[:, None]], 1)  # (N, t + 1)
        if self.use_cache:
            logits = self.model.decode_step(tokens, self.cache)
        else:
            pos = torch.arange(t + 1, device=tokens.device).expand_as(self.prefix)
            h = self.model.decode(
                self.prefix, pos, torch.ones_like(self.prefix, dtype=torch.bool), self.memory, self.src_valid
            )
            logits = self.model.head(h[:, -1])
        return F.log_softmax(logits.float(), -1)  # (N, V)

    @torch.no_grad()
    def reorder(self, index):
        index = index.to(self.prefix.device, torch.long)
        self.src_valid = self.src_valid.index_select(0, index)
        self.prefix = self.prefix.index_select(0, index)
        if self.memory is not None:
            self.memory = self.memory.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)
        self.rows = len(index)
