"""What finetune.py and eval.py share: which architecture a checkpoint holds, building its model,
the seq2seq operations of each architecture, generation, and the metrics.

Architectures: "unilm" (one stack; pretrained by PMLM or MLM, fine-tuned for seq2seq with pseudo
masks, UniLMv2 section 3.4), "t5" (encoder-decoder, span corruption, teacher forcing) and "elmer"
(NAR encoder-decoder with early exit, core/elmer.py; its options travel as the checkpoint's
"elmer" dict). Checkpoint kinds: pretrain/{pmlm,mlm,t5,elmer}, finetune/summarize,
finetune/classify; a fine-tuned checkpoint also records its "arch".
"""
from typing import Callable, NamedTuple

import numpy as np
import torch
from rouge_score import rouge_scorer

from . import decoding, elmer, seq2seq, t5
from .classify import Classifier
from .config import ModelConfig
from .errors import UserError
from .model import EncoderDecoder, UnifiedLM

ARCH_OF_OBJECTIVE = {"pmlm": "unilm", "mlm": "unilm", "t5": "t5", "elmer": "elmer"}


def arch_of(state, path):
    """The architecture of a checkpoint, from its kind (and its 'arch' once fine-tuned)."""
    if "arch" in state:
        return state["arch"]
    objective = str(state.get("kind", "")).split("/")[-1]
    if objective not in ARCH_OF_OBJECTIVE:
        raise UserError(f"{path}: a {state.get('kind')!r} checkpoint has no architecture this script knows")
    return ARCH_OF_OBJECTIVE[objective]


def elmer_options(arch, source, exit_mode="hard", exit_entropy=0.5, dec_len=None):
    """The options of an ELMER model being fine-tuned: the pretrained ones (decoder length,
    off-ramps) and this run's exit (section 4.3). Soft exit runs every layer at inference
    (threshold 0) unless eval.py is given one. None for other architectures."""
    if arch != "elmer":
        return None
    opts = dict(source.get("elmer") or {})
    opts.setdefault("dec_len", 32)
    if dec_len:
        opts["dec_len"] = dec_len
    opts.update(soft=exit_mode == "soft", exit_entropy=exit_entropy if exit_mode == "hard" else 0.0)
    return opts


def build_model(arch, cfg: ModelConfig, n_labels=None, elmer_opts=None):
    """A fresh model of the architecture; n_labels makes a classifier around a UnifiedLM."""
    if arch == "elmer":
        if n_labels is not None:
            raise UserError("classification fine-tunes an encoder (pmlm or mlm checkpoint), not an elmer one")
        return elmer.ELMER(cfg, **(elmer_opts or {}))
    if n_labels is not None:
        if arch != "unilm":
            raise UserError("classification fine-tunes an encoder (pmlm or mlm checkpoint), not a t5 one")
        return Classifier(UnifiedLM(cfg), n_labels, cfg.dropout)
    return EncoderDecoder(cfg) if arch == "t5" else UnifiedLM(cfg)


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


def seq2seq_ops(arch, dec_len=32):
    if arch == "elmer":
        batch = lambda pairs, tok, max_src, max_tgt: elmer.elmer_seq2seq_batch(pairs, tok, max_src, max_tgt, dec_len)
        return Seq2SeqOps(batch, elmer.elmer_seq2seq_loss_sums, None, 1)
    if arch == "t5":
        return Seq2SeqOps(t5.t5_seq2seq_batch, t5.t5_seq2seq_loss_sums, t5.T5Decoder, 1)
    batch = lambda pairs, tok, max_src, max_tgt: seq2seq.seq2seq_batch(pairs, tok, max_src - 2, max_tgt)
    return Seq2SeqOps(batch, seq2seq.seq2seq_loss_sums, seq2seq.PMLMDecoder, 2)


@torch.no_grad()
def generate(model, arch, src_ids, tok, beam=1, max_len=32, min_len=1, length_penalty=1.0,
             no_repeat_ngram=0, use_cache=True, return_scores=False):
    """Token-id lists (without [EOS]) for a batch of (already truncated) sources: greedy for
    beam 1, else beam search; with return_scores also their (B,) scores. Runs in eval mode and
    restores the model's mode afterwards. use_cache=False recomputes the whole prefix at every
    step (the reference the key/value cache is tested against)."""
    was_training = model.training
    model.eval()
    if arch == "elmer":  # one NAR pass with early exit: no beam, no length limit but dec_len
        try:
            out = elmer.generate(model, src_ids, tok)
        finally:
            model.train(was_training)
        return (out, torch.zeros(len(out))) if return_scores else out
    try:
        decoder = seq2seq_ops(arch).decoder(model, src_ids, tok, use_cache=use_cache)
        if beam == 1:
            out, scores = decoding.greedy(decoder, max_len, min_len, tok.eos_id, no_repeat_ngram)
        else:
            out, scores = decoding.beam_search(decoder, beam, max_len, min_len, length_penalty, tok.eos_id,
                                               no_repeat_ngram)
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
