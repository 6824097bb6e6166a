"""Classification fine-tuning (UniLMv2 section 4.2, as BERT): the final vector of [SOS] of a
bidirectional pass (every token CONTEXT), a fresh linear layer, cross-entropy.

Input: "[SOS] TEXT [EOS]", truncated to max_len tokens.
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

    def forward(self, tokens, valid):  # (B, L) -> (B, n_labels)
        z = torch.zeros_like(tokens)
        pos = positions(tokens)
        h = self.encoder(tokens, pos, z, z + CONTEXT, z, valid)  # (B, L, C)
        return self.out(self.drop(h[:, 0]))


def classify_batch(texts_ids, labels, tok, max_len):
    """texts_ids: list of token-id lists; labels: list of ints (-1 for a label unseen in training)."""
    seqs = [np.array([tok.sos_id] + list(ids[:max_len - 2]) + [tok.eos_id]) for ids in texts_ids]
    tokens, valid = pad_stack(seqs, tok.pad_id)
    return Batch(norm=len(seqs), n_tokens=valid.sum(), tokens=tokens, valid=valid,
                 label=torch.as_tensor(labels, dtype=torch.long))


def classify_loss_sums(model, batch):
    logits = model(batch.tokens, batch.valid).float()
    known = batch.label >= 0
    ce = F.cross_entropy(logits[known], batch.label[known], reduction="sum")
    hit = (logits.argmax(-1) == batch.label).float().sum()
    return dict(loss=ce, nll=ce.detach(), hit=hit, n=torch.tensor(float(len(batch.label)), device=logits.device))


@torch.no_grad()
def predict(model, batch):
    return model(batch.tokens, batch.valid).argmax(-1)


def macro_f1(pred, gold, n_labels):
    """Mean over the labels that occur in gold or pred of the per-label F1."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    scores = []
    for c in range(n_labels):
        tp = np.sum((pred == c) & (gold == c))
        fp, fn = np.sum((pred == c) & (gold != c)), np.sum((pred != c) & (gold == c))
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0
