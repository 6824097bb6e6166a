"""UniLMv2's pseudo-masked LM (PMLM): the input layout and the loss (sections 3.1-3.3).

One example, for the factorization order <{4,5}, {2}> of "x1 .. x6" (Figure 4):

    AE part (CONTEXT, step 0):   [SOS] x1 [M] x3 [M] [M] x6 [EOS] ...   (80/10/10 corruption)
    step 1 (appended):           x4 x5 (ORIGINAL, step 1)  [P] [P] (PSEUDO, step 1)
    step 2 (appended):           x2    (ORIGINAL, step 2)  [P]     (PSEUDO, step 2)

Each appended token has the position id and segment of the masked token it copies. The
attention rule (kernels/reference.py) then gives exactly Figure 5: context sees context only, the
[P] of step s sees the context, the originals of earlier steps and the [P]s of its own step
(docs/unilmv2.md draws it for this example from pmlm_layout: tools/layouts.py).
L_AE is the cross-entropy at the masked positions of the AE part, L_PAR at the [P] tokens.
Ablations (section 4.6): losses "ae" (no appended part), "par" (the appended part, no AE loss),
"ae+par"; "the variants use the same masking strategy". RoBERTa's MLM, the baseline of the
papers' main tables (train.py --objective mlm), is losses "ae".

Masking (section 4.1): the masked tokens of the AE part are replaced BERT's way, 80% [MASK] / 10%
random / 10% kept (keep=KEEP). The AE part is the one context every [P] attends to, so a kept
token is in view of its own [P] as it is of its own AE prediction: about 10% of each loss can be
copied. Equation 5 read strictly (the [P]s of step i see x minus M_{>=i}) would hide it; keep=0
(train.py --keep 0) does, with 90% [MASK] / 10% random. At the cpu budget that reading cost
PMLM about 0.2 nats of AE loss on the same [MASK]ed targets and 3 ROUGE-L against RoBERTa's MLM
(README, design choices), so the paper's stated 80/10/10 is the default. Held-out figures set
against the unigram entropy count the hidden targets alone (the ae_hidden_ / par_hidden_ sums):
a kept target can be copied.
"""

import numpy as np
import torch.nn.functional as F

from kernels import CONTEXT, ORIGINAL, PSEUDO
from ..batch import Batch, flat_positions, pad_stack
from ..masking import blockwise_mask, corrupt

IGNORE = -100
LOSSES = ("ae+par", "ae", "par")
KEEP = 0.1  # the share of masked tokens left as they are (section 4.1: 80/10/10)


def pretraining_sentence_pair(window, rng, sos, eos):
    """'[SOS] S1 [EOS] S2 [EOS]' from one window of the stream (section 2.2: S1 and S2 are
    contiguous texts). The window starts at a document's start (core/data.py TokenStream), and the
    cut falls at a random point inside that first document, so S2 goes on with the text S1 broke
    off; the documents that follow in S2 stay separated by their [EOS]. Every [EOS] is special:
    never masked."""
    first = np.flatnonzero(window == eos)
    k = int(first[0]) if len(first) else len(window)  # tokens of the first document in the window
    cut = int(rng.integers(1, max(2, min(k, len(window)))))
    rest = window[cut + 1 :] if window[cut] == eos else window[cut:]  # no [EOS] twice at the cut
    ids = np.concatenate([[sos], window[:cut], [eos], rest, [eos]]).astype(np.int64)
    seg = np.zeros(len(ids), dtype=np.int64)
    seg[cut + 2 :] = 1
    special = (ids == eos) | (ids == sos)
    return ids, seg, special


def pmlm_example(ids, seg, special, rng, tok, losses="ae+par", vocab_size=None, keep=KEEP):
    """Arrays of one PMLM example (see the module docstring). keep: the share of masked tokens left
    as they are (BERT's 0.1; 0 hides every target from the [P]s, equation 5 read strictly)."""
    vocab_size = vocab_size or tok.vocab_size
    blocks = blockwise_mask(~special, rng)
    masked = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)
    p_mask = 0.9 - keep  # 10% random; the kept share taken from [MASK]
    ae = corrupt(ids, masked, rng, tok.mask_id, tok.n_special, vocab_size, p_mask=p_mask)
    return pmlm_layout(ids, seg, ae, blocks, tok.pseudo_id, losses)


def pmlm_layout(ids, seg, ae, blocks, pseudo_id, losses="ae+par"):
    """The arrays of one PMLM example (tokens, pos, seg, kind, step, target), given its AE part `ae`
    (ids with the masked tokens replaced) and its factorization order `blocks` (a list of position
    arrays, one per step): the AE part, then per step its ORIGINAL tokens and as many [P]."""
    n = len(ids)
    masked = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)
    tokens, pos, segs = [ae], [np.arange(n)], [seg]
    kind, step = [np.full(n, CONTEXT)], [np.zeros(n, dtype=np.int64)]
    target = np.full(n, IGNORE, dtype=np.int64)
    if losses != "par":
        target[masked] = ids[masked]
    targets = [target]
    if losses != "ae":
        for s, block in enumerate(blocks, 1):
            m = len(block)
            tokens += [ids[block], np.full(m, pseudo_id)]
            pos += [block, block]
            segs += [seg[block], seg[block]]
            kind += [np.full(m, ORIGINAL), np.full(m, PSEUDO)]
            step += [np.full(m, s), np.full(m, s)]
            targets += [np.full(m, IGNORE), ids[block]]
    cat = lambda xs: np.concatenate(xs).astype(np.int64)
    return dict(tokens=cat(tokens), pos=cat(pos), seg=cat(segs), kind=cat(kind), step=cat(step), target=cat(targets))


def collate(examples, pad_id, losses="ae+par"):
    """Pad example dicts into a Batch (padding: pad token, CONTEXT, invalid, ignored)."""
    fill = dict(tokens=pad_id, pos=0, seg=0, kind=CONTEXT, step=0, target=IGNORE)
    out = {}
    for k, v in fill.items():
        out[k], valid = pad_stack([e[k] for e in examples], v)
    predicted = out["target"] != IGNORE
    # L_AE + L_PAR, each a mean over the masked tokens: both make one prediction per masked token
    counted = predicted & (out["kind"] == (PSEUDO if losses == "par" else CONTEXT))
    predict, predict_target = flat_positions(predicted, out["target"])
    return Batch(
        norm=counted.sum(), n_tokens=valid.sum(), valid=valid, predict=predict, predict_target=predict_target, **out
    )


def static_shapes(batch, pad_id, multiple=64, predictions=256):
    """A collate Batch (PMLM or seq2seq) in a few shapes only, for a compiled step captured as CUDA
    graphs (one graph per shape): L padded to a multiple of `multiple` as collate pads (invalid
    CONTEXT padding, ignored targets), and the predicted positions to a multiple of `predictions`
    by extra ones at position 0 whose target is IGNORE, which the losses skip."""
    B, L = batch.tokens.shape
    Lp = -(-L // multiple) * multiple
    fill = dict(tokens=pad_id, target=IGNORE, valid=False)
    out = {
        k: F.pad(v, (0, Lp - L), value=fill.get(k, 0))
        for k, v in batch.tensors.items()
        if v.dim() == 2 and v.shape == (B, L)
    }
    n = batch.predict.numel()
    extra = -n % predictions
    flat = batch.predict // L * Lp + batch.predict % L  # the same (row, column) in rows of Lp
    out["predict"] = F.pad(flat, (0, extra))
    out["predict_target"] = F.pad(batch.predict_target, (0, extra), value=IGNORE)
    return Batch(batch.norm, batch.n_tokens, **out)


def pmlm_batch(stream, indices, tok, losses="ae+par", keep=KEEP):
    """The examples `indices` of a TokenStream, masked and collated (keep: see pmlm_example)."""
    examples = []
    for i in indices:
        window, rng = stream.window_at(i)
        ids, seg, special = pretraining_sentence_pair(window, rng, tok.sos_id, tok.eos_id)
        examples.append(pmlm_example(ids, seg, special, rng, tok, losses, keep=keep))
    return collate(examples, tok.pad_id, losses)


def pmlm_loss_sums(model, batch):
    """Summed (not averaged) losses and hits, so that the caller can normalise by the count of
    predicted tokens over the whole global batch, whatever the number of processes."""
    sel, target = batch.predict, batch.predict_target  # (N,) flat positions and their targets
    logits = model(
        batch.tokens, batch.pos, batch.seg, batch.kind, batch.step, batch.valid, predict=sel
    ).float()  # (N, V)
    ce = F.cross_entropy(logits, target, reduction="none")
    ce_sum = ce.sum()
    hit = (logits.argmax(-1) == target).float()
    live = (target != IGNORE).float()  # 0 at the positions static_shapes adds
    par = (batch.kind.flatten()[sel] == PSEUDO).float() * live
    # hidden: the target is not in view at its own position of the AE part (a kept token is); every
    # token's position id indexes its sequence's AE part, so this reads the AE part for a [P] too
    hidden = (batch.tokens.gather(1, batch.pos).flatten()[sel] != target).float()
    ce, hit = ce.detach(), hit.detach()
    # every part as a masked sum: no host sync (a boolean index would read its count)
    sums = dict(loss=ce_sum)
    for name, part in (
        ("ae_", live - par),
        ("par_", par),
        ("ae_hidden_", (live - par) * hidden),
        ("par_hidden_", par * hidden),
    ):
        sums.update({name + "loss": (ce * part).sum(), name + "hit": (hit * part).sum(), name + "n": part.sum()})
    return sums
