"""LPLM's pretraining data (ELMER section 4.2, "Pre-training Tasks", after BART): sentence
shuffling and text infilling of the encoder input, and k exit-layer assignments per sequence."""

import numpy as np
import torch

from ..batch import Batch, pad_stack

IGNORE = -100


def full_stop_ids(tok):
    """Ids of the pieces that end a sentence (the paper splits sentences at full stops)."""
    if not hasattr(tok, "_full_stops"):
        tok._full_stops = {i for i in range(tok.vocab_size) if tok.sp.id_to_piece(i).endswith((".", "!", "?"))}
    return tok._full_stops


def sentence_shuffle(ids, stops, rng, eos_id=None):
    """Split after every full stop and permute the sentences, within each document: an [EOS]
    (`eos_id`, the end of a document in the pretraining stream) stays where it is."""
    out, doc = [], []

    def flush():
        sentences, cur = [], []
        for t in doc:
            cur.append(t)
            if t in stops:
                sentences.append(cur)
                cur = []
        if cur:
            sentences.append(cur)
        out.extend(t for i in rng.permutation(len(sentences)) for t in sentences[i])
        doc.clear()

    for t in ids:
        if int(t) == eos_id:
            flush()
            out.append(int(t))
        else:
            doc.append(int(t))
    flush()
    return out


def infilling_spans(n, rng, ratio=0.15, lam=3.0, fixed=()):
    """(start, length) of spans covering round(ratio * n) tokens, lengths ~ Poisson(lam) (zeros
    redrawn: BART also inserts a [MASK] for a zero-length span, which we leave out), the last
    one cut to hit the count; spans neither overlap nor touch, so each one becomes its own [MASK];
    positions in `fixed` (a document's [EOS]) are never covered."""
    budget = max(1, round(ratio * n))
    taken = np.zeros(n + 2, dtype=bool)  # guard cells at both ends
    taken[np.asarray(fixed, dtype=np.int64) + 1] = True
    spans = []
    for _ in range(100 * budget):
        if budget == 0:
            break
        m = 0
        while m == 0:
            m = int(rng.poisson(lam))
        m = min(m, budget)
        s = int(rng.integers(0, n - m + 1))
        if taken[s : s + m + 2].any():  # cells s-1 .. s+m in guard coordinates
            continue
        taken[s + 1 : s + m + 1] = True
        spans.append((s, m))
        budget -= m
    return sorted(spans)


def lplm_corrupt(ids, tok, rng, ratio=0.15, lam=3.0):
    """Encoder input of LPLM: sentence shuffling, then text infilling with one [MASK] per span;
    a document's [EOS] is neither moved nor masked."""
    shuffled = sentence_shuffle(ids, full_stop_ids(tok), rng, tok.eos_id)
    fixed = [i for i, t in enumerate(shuffled) if t == tok.eos_id]
    out, at = [], 0
    for s, m in infilling_spans(len(shuffled), rng, ratio, lam, fixed):
        out += shuffled[at:s] + [tok.mask_id]
        at = s + m
    return out + shuffled[at:]


def lplm_batch(stream, indices, tok, n_layers, k):
    """Examples `indices` of a TokenStream: source corrupt(x) + [EOS], target x + [EOS] (the
    decoder is fed [MASK] x len(target)), and k exit-layer assignments per sequence, every
    token's layer uniform in 1..n_layers, drawn by the example's own generator."""
    sources, targets, layers = [], [], []
    for i in indices:
        window, rng = stream.window_at(i)
        sources.append(np.array(lplm_corrupt(window, tok, rng) + [tok.eos_id], dtype=np.int64))
        targets.append(np.array(list(window) + [tok.eos_id], dtype=np.int64))
        layers.append(rng.integers(1, n_layers + 1, (k, len(targets[-1]))))
    src, src_valid = pad_stack(sources, tok.pad_id)
    tgt, _ = pad_stack(targets, IGNORE)
    T = tgt.shape[1]
    exit_layers = torch.stack(
        [torch.as_tensor(np.pad(l, ((0, 0), (0, T - l.shape[1])), constant_values=1)) for l in layers]
    )  # (B, k, T)
    n = int((tgt != IGNORE).sum())
    return Batch(
        norm=n, n_tokens=int(src_valid.sum()) + n, src=src, src_valid=src_valid, tgt_out=tgt, exit_layers=exit_layers
    )
