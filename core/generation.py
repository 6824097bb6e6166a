"""Generation from a fine-tuned model of any architecture: the way the architecture decodes
(core/decodings.py: beam search, Mask-Predict or ELMER's early exit) over a batch of sources. What
the summaries score is core/metrics.py's."""

import torch

from .architectures import seq2seq_ops
from .decodings import decoding_of


@torch.no_grad()
def generate(model, arch, src_ids, tok, return_scores=False, stats=None, **gen):
    """Token-id lists (without [EOS]) for a batch of (already truncated) sources, decoded the way
    the architecture decodes with the settings in gen (core/decodings.py: those of another way are
    ignored, so one call serves every architecture); with return_scores also their (B,) scores.
    Autoregressive: greedy for beam 1, else beam search, the length penalty UniLMv2's by default
    (Table 10: Wu et al.'s ((5 + len) / 6) ** 0.6; core/decoding.py); use_cache=False recomputes the
    whole prefix at every step (the reference the key/value cache is tested against) and `search`
    picks the beam search's implementation (the tokens are the same). Mask-Predict: length_beam
    lengths, `iterations` passes (fewer with adaptive_stop), a `stats` dict accumulating the model
    calls. ELMER: `stats` keeps the exits' ExitTrace (core/elmer/exit_decode.py). Runs in eval mode and
    restores the model's mode afterwards."""
    kind = decoding_of(arch)
    settings = kind.take(gen)
    was_training = model.training
    model.eval()
    try:
        out, scores = kind.generate(model, arch, src_ids, tok, stats, **settings)
    finally:
        model.train(was_training)
    return (out, scores) if return_scores else out


def summarize(model, arch, tok, sources, max_src, batch_size=64, progress=None, stats=None, **gen):
    """Generated summaries (strings) for a list of source texts, in batches."""
    ops, clean, out = seq2seq_ops(arch, sos=model.cfg.enc_sos), decoding_of(arch).clean, []
    for i in range(0, len(sources), batch_size):
        ids = [ops.truncate(s, max_src) for s in tok.encode(sources[i : i + batch_size])]
        out += [clean(tok.decode(t)) for t in generate(model, arch, ids, tok, stats=stats, **gen)]
        if progress:
            progress(len(out), len(sources))
    return out


def summarizer(model, arch, tok, max_src, batch_size, gen, stats=None):
    """run(sources, progress=None) -> their summaries, decoded with the settings gen."""
    return lambda srcs, progress=None: summarize(model, arch, tok, srcs, max_src, batch_size, progress, stats, **gen)
