"""What finetune.py and eval.py share: which architecture a checkpoint holds, building its model,
the seq2seq operations of each architecture, generation, and the metrics.

Architectures: "unilm" (one stack; pretrained by PMLM or MLM, fine-tuned for seq2seq with pseudo
masks, UniLMv2 section 3.4) and "t5" (encoder-decoder, span corruption, teacher forcing).
Checkpoint kinds: pretrain/{pmlm,mlm,t5}, finetune/summarize, finetune/classify; a fine-tuned
checkpoint also records its "arch".
"""
from typing import Callable, NamedTuple

import numpy as np
import torch
from rouge_score import rouge_scorer

from . import decoding, seq2seq, t5
from .classify import Classifier
from .config import ModelConfig
from .errors import UserError
from .model import EncoderDecoder, UnifiedLM

ARCH_OF_OBJECTIVE = {"pmlm": "unilm", "mlm": "unilm", "t5": "t5"}


def arch_of(state, path):
    """The architecture of a checkpoint, from its kind (and its 'arch' once fine-tuned)."""
    if "arch" in state:
        return state["arch"]
    objective = str(state.get("kind", "")).split("/")[-1]
    if objective not in ARCH_OF_OBJECTIVE:
        raise UserError(f"{path}: a {state.get('kind')!r} checkpoint has no architecture this script knows")
    return ARCH_OF_OBJECTIVE[objective]


def build_model(arch, cfg: ModelConfig, n_labels=None):
    """A fresh model of the architecture; n_labels makes a classifier around a UnifiedLM."""
    if n_labels is not None:
        if arch != "unilm":
            raise UserError("classification fine-tunes an encoder (pmlm or mlm checkpoint), not a t5 one")
        return Classifier(UnifiedLM(cfg), n_labels, cfg.dropout)
    return EncoderDecoder(cfg) if arch == "t5" else UnifiedLM(cfg)


# -----------------------------------------------------------------------------
# positions: fine-tuning stays within the position ids that pretraining trained

DEFAULT_MAX_SRC = 80  # the source length of the README's measured recipe


def pretraining_window(objective, seq_len):
    """Tokens per pretraining window: seq_len less [SOS] and two [EOS] for the PMLM; for T5 the
    window whose corrupted source is seq_len tokens long (core/t5.py window_for)."""
    return t5.window_for(seq_len) if objective == "t5" else seq_len - 3


def trained_positions(objective, seq_len):
    """How many position ids (0..N-1) a pretraining run trains, recorded in its checkpoints: the
    PMLM's one stack {"total": seq_len}; T5's {"encoder": .., "decoder": ..}, the lengths that
    span corruption makes of its windows."""
    if objective != "t5":
        return dict(total=seq_len)
    encoder, decoder = t5.corrupted_lengths(pretraining_window(objective, seq_len))
    return dict(encoder=encoder, decoder=decoder)


def positions_of(state):
    """The trained positions of a pretraining checkpoint; one written before they were recorded
    gets them from its --seq-len (T5 then used windows of seq_len - 3)."""
    if "positions" in state:
        return dict(state["positions"])
    seq_len = int(state["args"]["seq_len"])
    if arch_of(state, "") == "t5":
        encoder, decoder = t5.corrupted_lengths(seq_len - 3)
        return dict(encoder=encoder, decoder=decoder)
    return dict(total=seq_len)


def fit_lengths(arch, positions, max_src, max_tgt):
    """max_src for fine-tuning: the given one, or (None) DEFAULT_MAX_SRC cut to what the
    checkpoint trained. A layout past the trained positions would put targets and [P]s on
    position embeddings that never received a gradient: refused, with the numbers and the fix."""
    if arch == "t5":
        src_room, tgt_room = positions["encoder"], positions["decoder"]
        what = f"its encoder trained positions 0..{src_room - 1}, its decoder 0..{tgt_room - 1}"
    else:
        src_room = positions["total"] - max_tgt
        what = f"it trained positions 0..{positions['total'] - 1} for source and target together"
    if max_src is None:
        max_src = min(DEFAULT_MAX_SRC, src_room)
        if max_src < 8:
            raise UserError(f"--max-tgt {max_tgt} leaves no room for a source in the checkpoint's positions "
                            f"({what}): lower --max-tgt")
    if arch == "t5" and (max_src > src_room or max_tgt > tgt_room):
        raise UserError(f"--max-src {max_src} / --max-tgt {max_tgt} exceed the positions the checkpoint was "
                        f"pretrained on ({what}): use --max-src <= {src_room} and --max-tgt <= {tgt_room}, "
                        f"or pretrain with a longer --seq-len")
    if arch != "t5" and max_src + max_tgt > positions["total"]:
        raise UserError(f"--max-src {max_src} + --max-tgt {max_tgt} = {max_src + max_tgt} exceed the positions the "
                        f"checkpoint was pretrained on ({what}): use --max-src <= {src_room} (or a smaller "
                        f"--max-tgt), or pretrain with --seq-len {max_src + max_tgt}")
    return max_src


# -----------------------------------------------------------------------------
# seq2seq: one set of operations per architecture

class Seq2SeqOps(NamedTuple):
    """The seq2seq operations of one architecture. max_src counts every source token, the
    special ones included: "[SOS] SRC [EOS]" for unilm, "SRC [EOS]" for t5."""
    batch: Callable    # (pairs of id lists, tok, max_src, max_tgt) -> Batch
    loss_sums: Callable  # (model, batch, label_smoothing) -> dict of sums
    decoder: Callable  # (model, source id lists, tok) -> an IncrementalDecoder
    n_special: int     # special tokens around a source

    def truncate(self, ids, max_src):
        return list(ids)[:max_src - self.n_special]


def seq2seq_ops(arch):
    if arch == "t5":
        return Seq2SeqOps(t5.t5_seq2seq_batch, t5.t5_seq2seq_loss_sums, t5.T5Decoder, 1)
    batch = lambda pairs, tok, max_src, max_tgt: seq2seq.seq2seq_batch(pairs, tok, max_src - 2, max_tgt)
    return Seq2SeqOps(batch, seq2seq.seq2seq_loss_sums, seq2seq.PMLMDecoder, 2)


@torch.no_grad()
def generate(model, arch, src_ids, tok, beam=1, max_len=32, min_len=1, length_penalty=0.6,
             no_repeat_ngram=0, use_cache=True, return_scores=False, length_norm="wu"):
    """Token-id lists (without [EOS]) for a batch of (already truncated) sources: greedy for
    beam 1, else beam search; with return_scores also their (B,) scores. The length penalty
    defaults to UniLMv2's (Table 10: Wu et al.'s ((5 + len) / 6) ** 0.6; core/decoding.py). Runs in eval mode and
    restores the model's mode afterwards. use_cache=False recomputes the whole prefix at every
    step (the reference the key/value cache is tested against)."""
    was_training = model.training
    model.eval()
    try:
        decoder = seq2seq_ops(arch).decoder(model, src_ids, tok, use_cache=use_cache)
        if beam == 1:
            out, scores = decoding.greedy(decoder, max_len, min_len, tok.eos_id, no_repeat_ngram)
        else:
            out, scores = decoding.beam_search(decoder, beam, max_len, min_len, length_penalty, tok.eos_id,
                                               no_repeat_ngram, length_norm)
    finally:
        model.train(was_training)
    return (out, scores) if return_scores else out


def summarize(model, arch, tok, sources, max_src, batch_size=64, progress=None, **gen):
    """Generated summaries (strings) for a list of source texts, in batches."""
    ops, out = seq2seq_ops(arch), []
    for i in range(0, len(sources), batch_size):
        ids = [ops.truncate(s, max_src) for s in tok.encode(sources[i:i + batch_size])]
        out += [tok.decode(t) for t in generate(model, arch, ids, tok, **gen)]
        if progress:
            progress(len(out), len(sources))
    return out


# -----------------------------------------------------------------------------
# metrics

def rouge(predictions, references):
    """ROUGE-1/2/L F1 (x100) with stemming, averaged over examples (rouge-score)."""
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    totals = np.zeros(3)
    for p, r in zip(predictions, references):
        s = scorer.score(r, p)
        totals += [s["rouge1"].fmeasure, s["rouge2"].fmeasure, s["rougeL"].fmeasure]
    r1, r2, rl = 100 * totals / max(1, len(predictions))
    return dict(rouge1=float(r1), rouge2=float(r2), rougeL=float(rl))
