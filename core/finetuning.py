"""What finetune.py and eval.py share: which architecture a checkpoint holds, building its model,
the seq2seq operations of each architecture, generation, and the metrics.

Architectures: "unilm" (one stack; pretrained by PMLM or MLM, fine-tuned for seq2seq with pseudo
masks, UniLMv2 section 3.4), "t5" (encoder-decoder, span corruption, teacher forcing), "t5-nar"
(pretrained by span corruption with a NAR decoder, core/nar.py: fine-tuned with --nar), "mlae-a" /
"mlae-b" (a pretrained MLAE of either decoder variant: classification uses its encoder),
"mlae-s2s" (MLAE fine-tuned seq2seq-style: an encoder-decoder with the T5 operations),
"mlae-unilm" (MLAE fine-tuned UniLM-style: latents + target in one decoder stack),
"roberta-s2s" (an MLM/PMLM stack as encoder, a random decoder: the paper's RoBERTa baseline), "nar"
(core/nar.py: T5-NAR, MLAE NAR or CMLM, decoded by Mask-Predict, core/mask_predict.py) and "elmer" (NAR encoder-decoder
with early exit, core/elmer.py; its options travel as the checkpoint's "elmer" dict).
Checkpoint kinds: pretrain/{pmlm,mlm,t5,t5-nar,mlae,elmer}, finetune/summarize, finetune/classify; a
fine-tuned checkpoint also records its "arch".
"""
import dataclasses
import functools
from typing import Callable, NamedTuple

import numpy as np
import torch

from . import decoding, elmer, exit_decode, exit_measures, mask_predict, nar, seq2seq, t5
from .classify import Classifier, EncoderClassifier
from .config import ModelConfig, decoder_depth
from .errors import UserError
from .mlae import MLAE, MLAEUniLM, MLAEUniLMDecoder, ScheduledMasking, variant_of
from .model import EncoderDecoder, UnifiedLM

ARCH_OF_OBJECTIVE = {"pmlm": "unilm", "mlm": "unilm", "t5": "t5", "t5-nar": "t5-nar", "elmer": "elmer"}
T5_LIKE = ("t5", "t5-nar")  # span-corruption pretraining: encoder and decoder positions apart


def arch_of(state, path):
    """The architecture of a checkpoint, from its kind (and its 'arch' once fine-tuned)."""
    if "arch" in state:
        return state["arch"]
    objective = str(state.get("kind", "")).split("/")[-1]
    if objective == "mlae":
        return "mlae-" + variant_of(state["model"])
    if objective not in ARCH_OF_OBJECTIVE:
        raise UserError(f"{path}: a {state.get('kind')!r} checkpoint has no architecture this script knows")
    return ARCH_OF_OBJECTIVE[objective]


def seq2seq_arch(arch, cfg, nar_flag, style):
    """(architecture, config) a pretrained one is fine-tuned into for generation: "nar" with
    --nar (from t5 or mlae); MLAE's "mlae-s2s" (default) or "mlae-unilm" by style; "roberta-s2s"
    for a unilm (MLM/PMLM) checkpoint with style seq2seq: its stack as the encoder of an
    encoder-decoder whose decoder is random (the paper's RoBERTa baseline for generation, a
    decoder as deep as MLAE's at that encoder depth: 12L-4L, 4L-2L, 2L-1L). Fine-tuned
    architectures come back as they are (resuming)."""
    if nar_flag and arch != "nar":
        if arch in ("unilm", "roberta-s2s"):
            raise UserError("--nar needs an encoder-decoder checkpoint (t5, t5-nar or mlae), or --init none --arch t5")
        return "nar", dataclasses.replace(cfg, enc_sos=arch in ("mlae-a", "mlae-b"))
    if arch == "t5-nar":
        raise UserError("a t5-nar checkpoint's decoder was pretrained non-autoregressively: fine-tune it with --nar "
                        "(or use a t5 checkpoint for autoregressive generation)")
    if arch in ("mlae-a", "mlae-b"):  # MLAE's encoder was pretrained on "[SOS] TEXT [EOS]"
        return ("mlae-unilm" if style == "unilm" else "mlae-s2s"), dataclasses.replace(cfg, enc_sos=True)
    if arch == "unilm" and style == "seq2seq":  # and the PMLM/MLM stack on "[SOS] S1 [EOS] ..." in segment 0
        return "roberta-s2s", dataclasses.replace(cfg, n_dec_layers=decoder_depth(cfg.n_layers), enc_sos=True,
                                                  enc_segment=True)
    return arch, cfg


def scheduled_loss(loss_fn, arch, args):
    """The AR loss with scheduled masking of the decoder inputs (MLAE Algorithm 1) for the
    encoder-decoder architectures; --mask-schedule defaults to linear for MLAE, none otherwise
    (args.mask_schedule is resolved in place, so the checkpoint records it)."""
    if args.mask_schedule is None:
        args.mask_schedule = "linear" if arch.startswith("mlae-") else "none"
    if arch in ("unilm", "nar"):
        if args.mask_schedule != "none":
            raise UserError(f"--mask-schedule {args.mask_schedule} masks decoder inputs: the {arch} architecture "
                            "has none to mask (use an encoder-decoder: t5, mlae, or --style seq2seq)")
        return loss_fn
    return ScheduledMasking(loss_fn, args.mask_schedule, args.mask_init, args.steps)


def elmer_options(arch, source, exit_mode="hard", exit_measure=None, exit_threshold=None, dec_len=None,
                  exit_train="hard"):
    """The options of an ELMER model being fine-tuned: the pretrained ones (decoder length,
    off-ramps) and this run's exit (section 4.3): the measure and threshold generate uses, and
    how training treats exits. Soft exit runs every layer at inference (entropy threshold 0)
    unless eval.py is given a threshold. None for other architectures; the exit flags of another
    architecture are refused."""
    if arch != "elmer":
        if exit_measure is not None or exit_threshold is not None:
            raise UserError(f"--exit-measure / --exit-threshold / --exit-entropy apply to elmer only, not {arch}")
        return None
    opts = dict(source.get("elmer") or {})
    if "exit_entropy" in opts:  # options written before exit measures
        e = opts.pop("exit_entropy")
        opts.setdefault("exit_measure", "entropy")
        opts.setdefault("exit_threshold", e)
    opts.setdefault("dec_len", 32)
    if dec_len is not None:
        opts["dec_len"] = dec_len
    measure = exit_measure or "entropy"
    exit_measures.check_threshold(measure, exit_threshold)
    if exit_threshold is None:
        exit_threshold = exit_measures.DEFAULT_THRESHOLD[measure]
    if exit_mode == "soft" and measure == "entropy":
        exit_threshold = 0.0
    opts.update(soft=exit_mode == "soft", exit_measure=measure, exit_threshold=exit_threshold,
                exit_train=exit_train)
    return opts


def build_model(arch, cfg: ModelConfig, n_labels=None, elmer_opts=None):
    """A fresh model of the architecture; n_labels makes a classifier around an encoder."""
    if arch == "elmer":
        if n_labels is not None:
            raise UserError("classification fine-tunes an encoder (pmlm, mlm or mlae checkpoint), not an elmer one")
        return elmer.ELMER(cfg, **(elmer_opts or {}))
    if n_labels is not None:
        encoders = {"mlae-a": lambda: MLAE(cfg, "a"), "mlae-b": lambda: MLAE(cfg, "b"),
                    "t5": lambda: EncoderDecoder(cfg), "t5-nar": lambda: nar.NARModel(cfg)}
        if arch in encoders:  # an encoder-decoder's encoder, a linear layer on [EOS]
            return EncoderClassifier(encoders[arch](), n_labels, cfg.dropout)
        if arch != "unilm":
            raise UserError(f"classification fine-tunes a pretrained encoder (pmlm, mlm, mlae, t5 or t5-nar "
                            f"checkpoint), not a {arch} one")
        return Classifier(UnifiedLM(cfg), n_labels, cfg.dropout)
    if arch in ("nar", "t5-nar"):
        return nar.NARModel(cfg)
    if arch == "mlae-unilm":
        return MLAEUniLM(cfg)
    if arch in ("mlae-a", "mlae-b"):
        return MLAE(cfg, arch[-1])
    return EncoderDecoder(cfg) if arch in ("t5", "mlae-s2s", "roberta-s2s") else UnifiedLM(cfg)


# -----------------------------------------------------------------------------
# positions: fine-tuning stays within the position ids that pretraining trained

DEFAULT_MAX_SRC = 80  # the source length of the README's measured recipe


def pretraining_window(objective, seq_len):
    """Tokens per pretraining window: seq_len less [SOS] and two [EOS] for the PMLM; for T5 the
    window whose corrupted source is seq_len tokens long (core/t5.py window_for)."""
    return t5.window_for(seq_len) if objective in T5_LIKE else seq_len - 3


def trained_positions(objective, seq_len):
    """How many position ids (0..N-1) a pretraining run trains, recorded in its checkpoints: the
    PMLM's one stack {"total": seq_len}; MLAE's "[SOS] window [EOS]", one token shorter than
    seq_len (its window is the PMLM's, without the PMLM's second [EOS]); T5's {"encoder": ..,
    "decoder": ..}, the lengths that span corruption makes of its windows (T5-NAR's decoder: the
    target without its [EOS])."""
    if objective == "mlae":
        return dict(total=pretraining_window(objective, seq_len) + 2)
    if objective not in T5_LIKE:
        return dict(total=seq_len)
    encoder, decoder = t5.corrupted_lengths(pretraining_window(objective, seq_len))
    return dict(encoder=encoder, decoder=decoder - (objective == "t5-nar"))


def positions_of(state):
    """The trained positions of a pretraining checkpoint; one written before they were recorded
    gets them from its --seq-len (T5 then used windows of seq_len - 3). MLAE's come from its
    --seq-len always: its older records counted one position more than it trains."""
    seq_len = int(state["args"]["seq_len"]) if "args" in state else None
    if str(state.get("kind", "")) == "pretrain/mlae" and seq_len is not None:
        return trained_positions("mlae", seq_len)
    if "positions" in state:
        return dict(state["positions"])
    if arch_of(state, "") == "t5":
        encoder, decoder = t5.corrupted_lengths(seq_len - 3)
        return dict(encoder=encoder, decoder=decoder)
    return dict(total=seq_len)


def fit_lengths(arch, positions, max_src, max_tgt):
    """max_src for fine-tuning: the given one, or (None) DEFAULT_MAX_SRC cut to what the
    checkpoint trained. A layout past the trained positions would put targets and [P]s on
    position embeddings that never received a gradient: refused, with the numbers and the fix."""
    if arch in T5_LIKE:
        src_room, tgt_room = positions["encoder"], positions["decoder"]
        what = f"its encoder trained positions 0..{src_room - 1}, its decoder 0..{tgt_room - 1}"
        # a NAR target has no [EOS]: max_tgt - 1 tokens (core/nar.nar_batch)
        tgt_room += arch == "t5-nar"
    else:
        src_room = positions["total"] - max_tgt
        what = f"it trained positions 0..{positions['total'] - 1} for source and target together"
    if max_src is None:
        max_src = min(DEFAULT_MAX_SRC, src_room)
        if max_src < 8:
            raise UserError(f"--max-tgt {max_tgt} leaves no room for a source in the checkpoint's positions "
                            f"({what}): lower --max-tgt")
    if arch in T5_LIKE and (max_src > src_room or max_tgt > tgt_room):
        raise UserError(f"--max-src {max_src} / --max-tgt {max_tgt} exceed the positions the checkpoint was "
                        f"pretrained on ({what}): use --max-src <= {src_room} and --max-tgt <= {tgt_room}, "
                        f"or pretrain with a longer --seq-len")
    if arch not in T5_LIKE and max_src + max_tgt > positions["total"]:
        raise UserError(f"--max-src {max_src} + --max-tgt {max_tgt} = {max_src + max_tgt} exceed the positions the "
                        f"checkpoint was pretrained on ({what}): use --max-src <= {src_room} (or a smaller "
                        f"--max-tgt), or pretrain with --seq-len {max_src + max_tgt}")
    return max_src


# -----------------------------------------------------------------------------
# seq2seq: one set of operations per architecture

class Seq2SeqOps(NamedTuple):
    """The seq2seq operations of one architecture. max_src counts every source token, the
    special ones included: "[SOS] SRC [EOS]" for unilm and for an encoder pretrained after [SOS]
    (cfg.enc_sos), "SRC [EOS]" for t5."""
    batch: Callable    # (pairs of id lists, tok, max_src, max_tgt) -> Batch
    loss_sums: Callable  # (model, batch, label_smoothing) -> dict of sums
    decoder: Callable  # (model, source id lists, tok) -> an IncrementalDecoder
    n_special: int     # special tokens around a source

    def truncate(self, ids, max_src):
        return list(ids)[:max_src - self.n_special]


def seq2seq_ops(arch, dec_len=32, sos=False):
    """The operations of `arch`; sos: its encoder reads "[SOS] SRC [EOS]" (cfg.enc_sos)."""
    if arch == "elmer":
        batch = lambda pairs, tok, max_src, max_tgt: elmer.elmer_seq2seq_batch(pairs, tok, max_src, max_tgt, dec_len)
        return Seq2SeqOps(batch, elmer.elmer_seq2seq_loss_sums, None, 1)
    with_sos = lambda fn: functools.partial(fn, sos=sos)
    if arch == "nar":
        return Seq2SeqOps(with_sos(nar.nar_batch), nar.nar_loss_sums, mask_predict.NARDecoder, 1 + sos)
    if arch == "mlae-unilm":
        return Seq2SeqOps(with_sos(t5.t5_seq2seq_batch), t5.t5_seq2seq_loss_sums, MLAEUniLMDecoder, 1 + sos)
    if arch in ("t5", "mlae-s2s", "roberta-s2s"):
        return Seq2SeqOps(with_sos(t5.t5_seq2seq_batch), t5.t5_seq2seq_loss_sums, t5.T5Decoder, 1 + sos)
    batch = lambda pairs, tok, max_src, max_tgt: seq2seq.seq2seq_batch(pairs, tok, max_src - 2, max_tgt)
    return Seq2SeqOps(batch, seq2seq.seq2seq_loss_sums, seq2seq.PMLMDecoder, 2)


@torch.no_grad()
def generate(model, arch, src_ids, tok, beam=1, max_len=32, min_len=1, length_penalty=0.6,
             no_repeat_ngram=0, use_cache=True, return_scores=False, length_norm="wu", length_beam=3, iterations=10,
             stats=None, adaptive_stop=False):
    """Token-id lists (without [EOS]) for a batch of (already truncated) sources: greedy for
    beam 1, else beam search; with return_scores also their (B,) scores. The length penalty
    defaults to UniLMv2's (Table 10: Wu et al.'s ((5 + len) / 6) ** 0.6; core/decoding.py). Runs in eval mode and
    restores the model's mode afterwards. use_cache=False recomputes the whole prefix at every
    step (the reference the key/value cache is tested against). A "nar" model decodes with
    Mask-Predict instead (length_beam lengths, `iterations` passes, fewer with adaptive_stop;
    max_len - 1 tokens at most, the budget an AR model spends one of on [EOS]); a `stats` dict then accumulates the
    model calls its outputs took ("iterations") and their count ("n")."""
    was_training = model.training
    model.eval()
    if arch == "elmer":  # one NAR pass with early exit: no beam, no length limit but dec_len
        try:
            out = elmer.generate(model, src_ids, tok)
        finally:
            model.train(was_training)
        return (out, torch.zeros(len(out))) if return_scores else out
    try:
        if arch == "nar":
            out, det = mask_predict.mask_predict(mask_predict.NARDecoder(model, src_ids, tok), tok.mask_id, length_beam, iterations,
                                        max(1, max_len - 1), tok.pad_id, tok.eos_id, return_details=True,
                                        adaptive_stop=adaptive_stop)
            scores = det["score"]
            if stats is not None:
                stats["iterations"] = stats.get("iterations", 0) + int(det["iterations"].sum())
                stats["n"] = stats.get("n", 0) + len(out)
            return (out, scores) if return_scores else out
        decoder = seq2seq_ops(arch, sos=model.cfg.enc_sos).decoder(model, src_ids, tok, use_cache=use_cache)
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
    ops, out = seq2seq_ops(arch, sos=model.cfg.enc_sos), []
    for i in range(0, len(sources), batch_size):
        ids = [ops.truncate(s, max_src) for s in tok.encode(sources[i:i + batch_size])]
        texts = [tok.decode(t) for t in generate(model, arch, ids, tok, **gen)]
        out += [exit_decode.merge_words(t) for t in texts] if arch == "elmer" else texts
        if progress:
            progress(len(out), len(sources))
    return out


# -----------------------------------------------------------------------------
# metrics

def rouge(predictions, references):
    """ROUGE-1/2/L F1 (x100) with stemming, averaged over examples (rouge-score). Imported here,
    where it is used: training, the kernels and the benchmarks run without it."""
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise UserError("ROUGE needs the rouge-score package (pip install rouge-score); without it, "
                        "fine-tune with --rouge-examples 0") from None
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    totals = np.zeros(3)
    for p, r in zip(predictions, references):
        s = scorer.score(r, p)
        totals += [s["rouge1"].fmeasure, s["rouge2"].fmeasure, s["rougeL"].fmeasure]
    r1, r2, rl = 100 * totals / max(1, len(predictions))
    return dict(rouge1=float(r1), rouge2=float(r2), rougeL=float(rl))
