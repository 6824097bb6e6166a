"""Batched greedy and beam search over any incremental decoder (the search knows no model).

The protocol, `IncrementalDecoder` (duck-typed; PMLMDecoder in core/unilm/seq2seq.py and the T5
adapter implement it):

    decoder.rows          int, the current number of hypothesis rows N. At the start it is B,
                          one row per source, and the search reads B from it.
    decoder.step(prev)    prev is None on the first call, else a (N,) long tensor: the token
                          chosen for each row at the previous step. Feeds them and returns (N, V)
                          float log-probabilities of the next token of each row.
    decoder.reorder(idx)  idx: (N',) long. From now on row i of the decoder is old row idx[i]
                          (its cache and whatever else it keeps per row). N' may differ from N:
                          the search expands B sources into B*K beams with it after the first
                          step, reorders beams, and drops the rows of finished sources so that
                          no step is spent on them.
All rows advance in lockstep: after t calls of step, every row holds t tokens.

Definitions shared by both searches:
  * A hypothesis ends when it emits `eos_id`; the token lists returned never contain that EOS.
  * max_len: at most max_len calls of step, so at most max_len tokens counting the EOS. A
    hypothesis that has not ended by then is finished as it is (max_len tokens, no EOS).
  * min_len: EOS is forbidden while a hypothesis has fewer than min_len tokens (so every
    returned list has at least min(min_len, max_len) tokens).
  * no_repeat_ngram = n > 0: a token that would complete an n-gram already present in the
    hypothesis gets log-probability -inf (fairseq's rule), computed with tensor ops on the
    decoder's device (see `ban_repeated_ngrams`).
  * Scores. greedy returns the summed log-probability of the tokens (EOS included when
    emitted). beam_search returns sum / lp(len), len the number of tokens counting the EOS and
    alpha = length_penalty, with lp (`length_norm`) either
        "pow": len ** alpha                  (fairseq's normalisation), or
        "wu":  ((5 + len) / 6) ** alpha      (Wu et al. 2016, section 7; UniLMv2 decodes with it,
                                              alpha 0.6 and beam 5 on XSum: its Table 10).
    alpha = 0 gives the plain sum under both; alpha > 0 favours longer outputs.

Beam search (section 3.4 of UniLMv2 decodes with beam search; the bookkeeping is fairseq's):
each step ranks the K*V extensions of a source's K live beams by summed log-probability and keeps
the best 2K. An EOS candidate ranked among the first K moves to the source's pool of finished
hypotheses (the best K are kept); the first K non-EOS candidates are the new live beams (there are
always K of them: each of the K rows contributes at most one EOS candidate).

Stopping criterion: a source is finished when its pool holds K hypotheses and the best live beam,
normalised at its current length, scores no better than the worst of them. With
length_penalty = 0 this is exact (a log-probability is <= 0, so extending a beam never raises its
sum); with length_penalty > 0 it is the usual heuristic (that of fairseq and of Hugging Face's
default), which ignores that a longer hypothesis is divided by a larger number. Rows of finished
sources are dropped at once, and the search returns as soon as every source is finished or after
max_len steps. With K = 1 every step keeps exactly the argmax, and the first EOS chosen ends the
source: beam search of size 1 returns greedy's tokens for any length_penalty (and its scores
for length_penalty = 0).
"""

import torch

NEG_INF = float("-inf")
LENGTH_NORMS = ("wu", "pow")


def length_norm_fn(length_norm, alpha):
    """lp(len) of the module docstring: the divisor of a hypothesis' summed log-probability."""
    if length_norm == "wu":
        return lambda length: ((5 + length) / 6) ** alpha
    if length_norm == "pow":
        return lambda length: length**alpha
    raise ValueError(f"length_norm must be one of {LENGTH_NORMS}, got {length_norm!r}")


def ban_repeated_ngrams(logp, hyps, n):
    """Return logp with -inf as the log-probability of every token that would repeat an n-gram.

    logp: (N, V) float; hyps: (N, t) long, the tokens generated so far. No Python loop: the
    hypotheses' n-grams come from one `unfold`, the ones whose first n-1 tokens equal the current
    (n-1)-token suffix mark their last token, and a scatter turns the marks into a (N, V) ban."""
    t = hyps.shape[1]
    if n <= 0 or t < n:
        return logp
    grams = hyps.unfold(1, n, 1)  # (N, t-n+1, n): every n-gram so far
    suffix = hyps[:, t - n + 1 :]  # (N, n-1): what the next token would extend
    match = (grams[:, :, :-1] == suffix[:, None, :]).all(-1)  # (N, t-n+1)
    # scatter_add, not scatter_: duplicate indices with different values are then well defined
    ban = torch.zeros_like(logp).scatter_add_(1, grams[:, :, -1], match.to(logp.dtype))
    return logp.masked_fill(ban > 0, NEG_INF)


def _constrain(logp, hyps, t, min_len, eos_id, no_repeat_ngram):
    """The decoder's (N, V) log-probabilities with min_len and no-repeat-ngram applied (out of
    place: a decoder may hand out a tensor it keeps)."""
    if logp.shape[0] != hyps.shape[0]:
        raise ValueError(f"decoder.step returned {logp.shape[0]} rows, the search holds {hyps.shape[0]}")
    if t < min_len:
        logp = logp.index_fill(1, torch.tensor([eos_id], device=logp.device), NEG_INF)
    return ban_repeated_ngrams(logp, hyps, no_repeat_ngram)


# -----------------------------------------------------------------------------
# greedy


@torch.no_grad()
def greedy(decoder, max_len, min_len=0, eos_id=3, no_repeat_ngram=0):
    """Greedy decoding of the decoder's B rows. Returns (list of B token lists without the EOS,
    (B,) float tensor of summed log-probabilities)."""
    B = decoder.rows
    out, scores = [None] * B, torch.zeros(B)
    if max_len <= 0:
        return [[] for _ in range(B)], scores
    src = torch.arange(B)  # the source each live row decodes (on the CPU: bookkeeping only)
    hyps, sums, prev = None, None, None
    for t in range(max_len):
        logp = decoder.step(prev).float()  # (N, V)
        if hyps is None:
            hyps = torch.zeros(B, 0, dtype=torch.long, device=logp.device)
            sums = torch.zeros(B, device=logp.device)
        logp = _constrain(logp, hyps, t, min_len, eos_id, no_repeat_ngram)
        cand = sums[:, None] + logp  # (N, V), ranked exactly as beam search ranks them
        sums, tok = cand.max(-1)
        ended = tok == eos_id
        if t == max_len - 1:
            ended = torch.ones_like(ended)
        hyps = torch.cat([hyps, tok[:, None]], 1)
        if ended.any():
            for r in ended.nonzero()[:, 0].tolist():  # once per finished hypothesis
                keep = hyps.shape[1] - int(tok[r] == eos_id)
                out[src[r]] = hyps[r, :keep].tolist()
                scores[src[r]] = float(sums[r])
            alive = (~ended).nonzero()[:, 0]
            if alive.numel() == 0:
                break
            decoder.reorder(alive)
            src, hyps, sums, tok = src[alive.cpu()], hyps[alive], sums[alive], tok[alive]
        prev = tok
    return out, scores


# -----------------------------------------------------------------------------
# beam search


@torch.no_grad()
def beam_search(decoder, beam, max_len, min_len=0, length_penalty=1.0, eos_id=3, no_repeat_ngram=0, length_norm="pow"):
    """Beam search of size `beam` for each of the decoder's B rows (see the module docstring for
    the scores and the stopping criterion). Returns (list of B token lists without the EOS,
    (B,) float tensor of the best hypothesis' score)."""
    B, K = decoder.rows, beam
    lp = length_norm_fn(length_norm, length_penalty)
    if K < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    if max_len <= 0:
        return [[] for _ in range(B)], torch.zeros(B)
    fin_score = fin_tok = fin_len = None  # (B, K), (B, K, max_len), (B, K): the finished pools
    src = None  # (A,) the active sources, on the decoder's device
    hyps = sums = prev = None  # (A*R, t), (A*R,): R = 1 row per source at first, K afterwards
    for t in range(max_len):
        logp = decoder.step(prev).float()  # (A*R, V)
        if hyps is None:
            dev = logp.device
            hyps, sums = torch.zeros(B, 0, dtype=torch.long, device=dev), torch.zeros(B, device=dev)
            src = torch.arange(B, device=dev)
            fin_score = torch.full((B, K), NEG_INF, device=dev)
            fin_tok = torch.zeros(B, K, max_len, dtype=torch.long, device=dev)
            fin_len = torch.zeros(B, K, dtype=torch.long, device=dev)
        logp = _constrain(logp, hyps, t, min_len, eos_id, no_repeat_ngram)
        A = src.numel()
        R, V = hyps.shape[0] // A, logp.shape[1]
        cand = (sums[:, None] + logp).view(A, R * V)
        top, idx = cand.topk(min(2 * K, R * V), dim=1)  # (A, C), sorted best first
        C = top.shape[1]
        parent = torch.arange(A, device=dev)[:, None] * R + idx // V  # (A, C) rows of hyps
        tok = idx % V
        is_eos = tok == eos_id
        last = t == max_len - 1

        # --- finished hypotheses: EOS among the first K (every one of the first K at the end)
        rank = torch.arange(C, device=dev)[None, :]
        finishing = (rank < K) & (is_eos | last)  # (A, C)
        if finishing.any():
            length = t + 1  # tokens counting the EOS (or the forced end at max_len)
            new_score = torch.where(finishing, top / lp(length), NEG_INF)
            new_tok = torch.zeros(A, C, max_len, dtype=torch.long, device=dev)
            new_tok[:, :, :t] = hyps[parent]
            new_tok[:, :, t] = torch.where(is_eos, 0, tok)
            new_len = torch.full((A, C), t, device=dev) + (~is_eos).long()
            pool_score = torch.cat([fin_score[src], new_score], 1)  # (A, K + C)
            pool_tok = torch.cat([fin_tok[src], new_tok], 1)
            pool_len = torch.cat([fin_len[src], new_len], 1)
            best_score, best = pool_score.topk(K, dim=1)
            fin_score[src] = best_score
            fin_tok[src] = pool_tok.gather(1, best[:, :, None].expand(-1, -1, max_len))
            fin_len[src] = pool_len.gather(1, best)
        if last:
            break

        # --- the new live beams: the first K non-EOS candidates, in rank order
        order = (is_eos.long() * C + rank).argsort(dim=1)[:, :K]  # (A, K)
        live_parent, live_tok = parent.gather(1, order), tok.gather(1, order)
        # (with fewer than 2K candidates, e.g. V <= K, an EOS may fill a slot: it stays dead)
        live_sum = top.gather(1, order).masked_fill(is_eos.gather(1, order), NEG_INF)
        best_live = live_sum[:, 0] / lp(t + 1)
        done = fin_score[src, K - 1] >= best_live  # -inf while the pool is not full
        if done.all():
            break
        keep = (~done).nonzero()[:, 0]
        rows = live_parent[keep].reshape(-1)  # (A'*K,)
        decoder.reorder(rows)
        hyps = torch.cat([hyps[rows], live_tok[keep].reshape(-1, 1)], 1)
        sums, src, prev = live_sum[keep].reshape(-1), src[keep], live_tok[keep].reshape(-1)
    lens = fin_len[:, 0].tolist()
    best_tok = fin_tok[:, 0].tolist()
    return [best_tok[b][: lens[b]] for b in range(B)], fin_score[:, 0].cpu()
