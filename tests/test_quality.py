"""The defaults that would silently cost quality: what [P] may see, positions, document
boundaries, validation samples, the length penalty, the tokenizer."""
import numpy as np

from core.pmlm import pmlm_example, pretraining_sentence_pair
from kernels import CONTEXT, PSEUDO


def _visible_targets(tok, losses, n_examples=300):
    """Share of the masked positions whose original token stays in the AE context."""
    rng = np.random.default_rng(0)
    seen = total = 0
    for _ in range(n_examples):
        window = rng.integers(tok.n_special, tok.vocab_size, 120)
        ids, seg, special = pretraining_sentence_pair(window, rng, tok.sos_id, tok.eos_id)
        ex = pmlm_example(ids, seg, special, rng, tok, losses)
        n = len(ids)
        masked = np.flatnonzero((ex["target"][:n] >= 0) | np.isin(np.arange(n), ex["pos"][n:]))
        seen += int((ex["tokens"][:n][masked] == ids[masked]).sum())
        total += len(masked)
    return seen / total


def test_pseudo_never_sees_its_target(tokenizer):
    """UniLMv2 equation 5: a [P] predicts x_{M_i} from x minus M_{>=i}, so the AE context (which
    every [P] sees) must not keep the original of a masked token; the AE-only baseline keeps
    BERT's 80/10/10."""
    assert _visible_targets(tokenizer, "ae+par") < 0.01  # only a random draw equal to the original
    assert _visible_targets(tokenizer, "par") < 0.01
    assert 0.08 < _visible_targets(tokenizer, "ae") < 0.12
