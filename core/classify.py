"""Classification fine-tuning: a fresh linear layer on one vector of a pretrained encoder,
cross-entropy.

  * A unified (PMLM / MLM) stack, as BERT and UniLMv2 (section 4.2): the final vector of [SOS] of
    a bidirectional pass (every token CONTEXT); input "[SOS] TEXT [EOS]".
  * The encoder of an encoder-decoder (MLAE, T5, T5-NAR): the vector of [EOS], the last token (the
    MLAE paper, section 3.2; its Table 1 compares this "T5 encoder + task layer" with RoBERTa
    and MLAE). The input is what the encoder saw in pretraining: "[SOS] TEXT [EOS]" for MLAE,
    "TEXT [EOS]" for T5 and T5-NAR, whose span-corrupted sources have no [SOS].
`finetune.py --cls-vector first|last` reads the other end instead (the checkpoint records which).
Texts are truncated to max_len tokens, the special ones included.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernels import CONTEXT
from .batch import Batch, pad_stack
from .model import positions


class Classifier(nn.Module):
    """A pretrained UnifiedLM and a linear layer on its [SOS] vector. The vocabulary head of the
    encoder stays in the state dict (unused), so a classifier loads as a UnifiedLM too."""

    unused_parameters = True  # the encoder's LM head (MLAE's decoder): DDP must not wait for them

    def __init__(self, encoder, n_labels, dropout=0.1):
        super().__init__()
        self.encoder = encoder
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(encoder.cfg.d_model, n_labels)
        nn.init.normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)

    reads = "first"  # the token whose vector the linear layer reads: [SOS]

    def states(self, tokens, valid):  # (B, L) -> (B, L, C): a bidirectional pass, every token CONTEXT
        z = torch.zeros_like(tokens)
        return self.encoder(tokens, positions(tokens), z, z + CONTEXT, z, valid)

    def forward(self, tokens, valid):  # (B, L) -> (B, n_labels)
        return self.out(self.drop(token_vector(self.states(tokens, valid), valid, self.reads)))


class EncoderClassifier(Classifier):
    """The encoder of a pretrained encoder-decoder (`encoder`: the whole model, an MLAE,
    EncoderDecoder or NARModel) and a linear layer on the vector of [EOS], the last valid token.
    The decoder stays in the state dict, unused, so that the checkpoint loads as its model."""

    reads = "last"

    def states(self, tokens, valid):  # (B, L) -> (B, L, C): the encoder's outputs
        return self.encoder.encode(tokens, positions(tokens), valid)


def token_vector(h, valid, which):
    """(B, C): each row's vector at its first token, or at its last valid one ([EOS])."""
    at = torch.zeros(len(h), dtype=torch.long, device=h.device) if which == "first" else valid.long().sum(1) - 1
    return h[torch.arange(len(h), device=h.device), at]


def classify_batch(texts_ids, labels, tok, max_len, sos=True):
    """texts_ids: list of token-id lists; labels: list of ints (-1 for a label unseen in training).
    Rows are "[SOS] TEXT [EOS]", or "TEXT [EOS]" without sos."""
    head = [tok.sos_id] if sos else []
    seqs = [np.array(head + list(ids[: max_len - 1 - len(head)]) + [tok.eos_id]) for ids in texts_ids]
    tokens, valid = pad_stack(seqs, tok.pad_id)
    return Batch(
        norm=len(seqs),
        n_tokens=valid.sum(),
        tokens=tokens,
        valid=valid,
        label=torch.as_tensor(labels, dtype=torch.long),
    )


def classify_loss_sums(model, batch):
    logits = model(batch.tokens, batch.valid).float()
    known = batch.label >= 0
    ce = F.cross_entropy(logits[known], batch.label[known], reduction="sum")
    hit = (logits.argmax(-1) == batch.label).float().sum()
    return dict(loss=ce, nll=ce.detach(), hit=hit, n=torch.tensor(float(len(batch.label)), device=logits.device))


@torch.no_grad()
def predict(model, batch):
    return model(batch.tokens, batch.valid).argmax(-1)


def classifier(model, tok, max_len, batch_size, device, sos=True):
    """run(text id lists, progress=None) -> their predicted label ids, in batches."""

    def run(texts_ids, progress=None):
        out = []
        for i in range(0, len(texts_ids), batch_size):
            chunk = texts_ids[i : i + batch_size]
            b = classify_batch(chunk, [0] * len(chunk), tok, max_len, sos=sos)
            with torch.no_grad():
                out += predict(model, b.to(device)).tolist()
        return out

    return run
