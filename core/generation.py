"""Generation from a fine-tuned model of any architecture, and the metric it is scored by: greedy or
beam search over the architecture's step decoder (core/decoding.py), Mask-Predict for a CMLM, one
pass with early exit for ELMER (ARCHS[arch].decode says which); ROUGE-1/2/L F1."""
import numpy as np
import torch

from . import decoding, elmer, exit_decode, mask_predict, seq2seq, t5
from .architectures import ARCHS, seq2seq_ops
from .errors import UserError
from .static_beam import static_beam_pmlm, static_beam_t5

# the step decoders that have a beam search at fixed shapes (core/static_beam.py: the same tokens)
STATIC_BEAMS = {t5.T5Decoder: static_beam_t5, seq2seq.PMLMDecoder: static_beam_pmlm}
SEARCHES = ("auto", "eager", "static")


def static_search(model, decoder, beam, search, use_cache=True):
    """The fixed-shape beam search to run, or None for core/decoding.beam_search: `static` where the
    step decoder has one, `auto` only on CUDA, where its steps replay as CUDA graphs (on the CPU the
    same steps run eagerly and gain nothing)."""
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, not {search!r}")
    fn = STATIC_BEAMS.get(decoder)
    on_cuda = next(model.parameters()).is_cuda
    if beam == 1 or not use_cache or fn is None or search == "eager" or (search == "auto" and not on_cuda):
        return None
    return fn


@torch.no_grad()
def generate(model, arch, src_ids, tok, beam=1, max_len=32, min_len=1, length_penalty=0.6,
             no_repeat_ngram=0, use_cache=True, return_scores=False, length_norm="wu", length_beam=3, iterations=10,
             stats=None, adaptive_stop=False, search="auto"):
    """Token-id lists (without [EOS]) for a batch of (already truncated) sources: greedy for
    beam 1, else beam search; with return_scores also their (B,) scores. The length penalty
    defaults to UniLMv2's (Table 10: Wu et al.'s ((5 + len) / 6) ** 0.6; core/decoding.py). Runs in eval mode and
    restores the model's mode afterwards. use_cache=False recomputes the whole prefix at every
    step (the reference the key/value cache is tested against). A "nar" model decodes with
    Mask-Predict instead (length_beam lengths, `iterations` passes, fewer with adaptive_stop;
    max_len - 1 tokens at most, the budget an AR model spends one of on [EOS]); a `stats` dict then accumulates the
    model calls its outputs took ("iterations") and their count ("n"). `search` picks the beam
    search's implementation (static_search): the tokens are the same."""
    was_training = model.training
    model.eval()
    how = ARCHS[arch].decode
    if how == "elmer":  # one NAR pass with early exit: no beam, no length limit but dec_len
        try:
            out = elmer.generate(model, src_ids, tok)
        finally:
            model.train(was_training)
        return (out, torch.zeros(len(out))) if return_scores else out
    try:
        if how == "nar":
            out, det = mask_predict.mask_predict(mask_predict.NARDecoder(model, src_ids, tok), tok.mask_id, length_beam,
                                                 iterations,
                                        max(1, max_len - 1), tok.pad_id, tok.eos_id, return_details=True,
                                        adaptive_stop=adaptive_stop)
            scores = det["score"]
            if stats is not None:
                stats["iterations"] = stats.get("iterations", 0) + int(det["iterations"].sum())
                stats["n"] = stats.get("n", 0) + len(out)
            return (out, scores) if return_scores else out
        step_decoder = seq2seq_ops(arch, sos=model.cfg.enc_sos).decoder
        fixed = static_search(model, step_decoder, beam, search, use_cache)
        if fixed is not None:
            out, scores = fixed(model, src_ids, tok, beam, max_len, min_len, length_penalty, length_norm,
                                no_repeat_ngram)
            return (out, scores) if return_scores else out
        decoder = step_decoder(model, src_ids, tok, use_cache=use_cache)
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
        out += [exit_decode.merge_words(t) for t in texts] if ARCHS[arch].decode == "elmer" else texts
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
