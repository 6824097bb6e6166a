"""Corruption policies, one function each, all driven by a numpy Generator for exact replay.

blockwise_mask: UniLMv2 Algorithm 1 (section 3.1.2): factorization steps of 1 token, or with
probability 0.4 a block of 2..6 tokens, sampled until >= 15% of the maskable tokens are masked.
corrupt: BERT's 80% [MASK] / 10% random / 10% kept replacement (UniLMv2 section 4.1).
"""

import math

import numpy as np


def blockwise_mask(maskable, rng, ratio=0.15, p_block=0.4, max_block=6):
    """maskable: (n,) bool, False at special tokens. Returns the factorization order: a list of
    position arrays, one per step, in the order sampled. Blocks never overlap and never touch a
    special token; a block reaching past the end is resampled, as in the paper."""
    n = len(maskable)
    goal = max(1, math.ceil(ratio * int(maskable.sum())))
    if not maskable.any():
        return []
    taken = np.zeros(n, dtype=bool)
    blocks, count = [], 0
    for _ in range(100 * n):  # bounded: enough to reach the goal on any realistic input
        if count >= goal:
            break
        p = int(rng.integers(0, n))
        length = int(rng.integers(2, max_block + 1)) if rng.random() < p_block else 1
        span = slice(p, p + length)
        if p + length > n or not maskable[span].all() or taken[span].any():
            continue
        taken[span] = True
        blocks.append(np.arange(p, p + length))
        count += length
    return blocks


def corrupt(ids, positions, rng, mask_id, vocab_lo, vocab_hi, p_mask=0.8, p_random=0.1):
    """Copy of ids with `positions` replaced: p_mask -> [MASK], p_random -> a random ordinary token
    in [vocab_lo, vocab_hi), the rest kept as they are."""
    out = ids.copy()
    u = rng.random(len(positions))
    random_ids = rng.integers(vocab_lo, vocab_hi, len(positions))
    out[positions] = np.where(u < p_mask, mask_id, np.where(u < p_mask + p_random, random_ids, ids[positions]))
    return out
