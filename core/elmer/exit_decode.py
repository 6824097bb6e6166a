"""ELMER's decoding with early exit: the layout a pass runs in, the loop of core/elmer/model.py's decoder
with exits (or the static-shape pass of core/elmer/exit_pass.py), what the exits cost in multiply-adds,
and the output's clean-up. The measures themselves are core/elmer/exit_measures.py's.
"""

import numpy as np
import torch

import kernels
from ..batch import pad_stack
from ..elmer.exit_measures import cheap_exit, disabled
from ..elmer.exit_pass import MASKED_MAX_TOKENS, masked_ok, masked_pass


def pick_layout(model, memory, T, layout=None):
    """decode_exit's layout: "masked" (static shapes, core/elmer/exit_pass.py) on CUDA up to
    MASKED_MAX_TOKENS decoder tokens, where launches and syncs cost more than the exited tokens'
    arithmetic; else "gather" (decoder_loop's compaction, which picks its own plain layout where
    that is cheaper). On the CPU the decoder_loop path, as always."""
    if layout is not None:
        return layout
    B = memory.shape[0]
    return "masked" if memory.is_cuda and B * T <= MASKED_MAX_TOKENS and masked_ok(model) else "gather"


def _masked_work(p, run, L):
    """decode_exit's work counts of a masked pass that ran `run` layers: every row of every layer."""
    N = p.B * p.T
    queries = [N if l < run else 0 for l in range(L)]
    ramp = [N if (p.per_layer_ramp and l < run) or (not p.per_layer_ramp and l == run - 1) else 0 for l in range(L)]
    cheap = not p.off and p.measure in ("state", "classifier")
    measure = [N if cheap and l < min(run, L - 1) else 0 for l in range(L)]
    return dict(queries=queries, ramp=ramp, measure=measure)


@torch.no_grad()
def decode_exit(
    model, memory, src_valid, T, delta, gather=None, measure="entropy", work=None, layout=None, graphs=True
):
    """Hard exit: a token leaves at the first layer whose measure passes the threshold `delta`
    (entropy < delta, or state / classifier > delta); everyone leaves at the top. Returns the
    tokens (B, T) and each token's exit layer (B, T), 1-based. work: a dict that receives, per
    layer, the queries run ("queries"), the rows projected on the vocabulary ("ramp") and the
    rows a cheap measure scored ("measure"), for the FLOP count (decoder_macs), and "entropy",
    (B, T, L): each token's off-ramp entropy at every layer where the vocabulary projection ran
    for it (NaN elsewhere: above its exit, below the top under a cheap measure or exit disabled).
    layout: "masked" (static shapes, CUDA graphs where graphs and CUDA: core/elmer/exit_pass.py),
    "gather" (decoder_loop; gather=False its plain layout) or None: pick_layout's choice. The
    tokens, exit layers and entropies are the same in every layout; the work is what each ran."""
    B = memory.shape[0]
    dev = memory.device
    L = len(model.dec_layers)
    if gather is None and pick_layout(model, memory, T, layout) == "masked":
        p = masked_pass(model, B, memory.shape[1], T, measure, delta, graphs)
        tokens, layer_of, entropies, run = p.run(memory, src_valid)
        if work is not None:
            for k, v in _masked_work(p, run, L).items():
                work[k] = [a + b for a, b in zip(work.get(k, [0] * L), v)]
            work["entropy"] = entropies
        return tokens, layer_of
    tokens = torch.zeros(B * T, dtype=torch.long, device=dev)
    layer_of = torch.zeros(B * T, dtype=torch.long, device=dev)
    off = disabled(measure, delta)
    counts = dict(queries=[0] * L, ramp=[0] * L, measure=[0] * L)
    entropies = torch.full((B * T, L), float("nan"), device=dev)

    def record(l, exit_, argmax, idx):
        tokens.index_copy_(0, idx, torch.where(exit_, argmax, tokens[idx]))
        layer_of.index_copy_(0, idx, torch.where(exit_, l + 1, layer_of[idx]))

    def decide(l, idx, h, x_in):
        N = idx.numel()
        counts["queries"][l] += N
        if l == L - 1:  # the top: everyone still here leaves
            argmax, entropy, _ = model.ramp_stats(l, h)
            entropies[idx, l] = entropy.float()
            counts["ramp"][l] += N
            record(l, torch.ones(N, dtype=torch.bool, device=dev), argmax, idx)
            return None, argmax
        if off and model.soft is None:  # exit disabled: only the top off-ramp runs
            return None, None
        if measure == "entropy" or model.soft is not None:
            # the paper's measure, or soft exit (which feeds every layer's argmax forward)
            argmax, entropy, _ = model.ramp_stats(l, h)
            entropies[idx, l] = entropy.float()
            counts["ramp"][l] += N
            if off:
                exit_ = torch.zeros(N, dtype=torch.bool, device=dev)
            elif measure == "entropy":
                exit_ = entropy < delta
            else:
                exit_ = cheap_exit(model, measure, delta, l, idx, h, x_in)
                counts["measure"][l] += N
            record(l, exit_, argmax, idx)
            return exit_, argmax
        exit_ = cheap_exit(model, measure, delta, l, idx, h, x_in)
        counts["measure"][l] += N
        out = kernels.active_index(exit_)  # the rows that leave: only they meet the vocabulary
        if out.numel():
            argmax, entropy, _ = model.ramp_stats(l, kernels.gather_rows(h, out))
            tokens[idx[out]], entropies[idx[out], l] = argmax, entropy.float()
            layer_of[idx[out]] = l + 1
            counts["ramp"][l] += out.numel()
        return exit_, None

    model.decoder_loop(memory, src_valid, T, decide, False if layout == "plain" else gather)
    if work is not None:
        for k, v in counts.items():
            work[k] = [a + b for a, b in zip(work.get(k, [0] * L), v)]
        work["entropy"] = entropies.view(B, T, L)
    return tokens.view(B, T), layer_of.view(B, T)


def decoder_macs(cfg, T, S, work):
    """Multiply-adds of one decode of B sequences (T decoder tokens, S source tokens each) from
    decode_exit's `work`. Per layer: the active queries' self-attention (Q and output projections,
    scores and weighted sum over T keys), cross-attention (the same over S) and FFN; every
    token's keys and values (an exited token still serves as one) and the memory's, in every
    layer someone still runs; then the
    off-ramp rows (dense C*C + vocabulary C*V) and the cheap measure rows (C)."""
    C, F_, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    L = len(work["queries"])
    B = work["queries"][0] // T if work["queries"][0] else 1
    per_query = 2 * C * C + 2 * T * C + 2 * C * C + 2 * S * C + 2 * C * F_
    per_layer_fixed = B * (T * 2 * C * C + S * 2 * C * C)
    total = 0
    for l in range(L):
        if work["queries"][l]:  # a layer nobody runs is skipped whole (decoder_loop stops)
            total += work["queries"][l] * per_query + per_layer_fixed
        total += work["ramp"][l] * (C * C + C * V) + work["measure"][l] * C
    return total


def finish(tokens, eos_id, n_special):
    """One row of decoder output -> the output ids: cut at the first [EOS], special ids dropped
    (section 4.1). Consecutive duplicates are merged by words, in `merge_words`, not here."""
    out = []
    for t in tokens:
        if t == eos_id:
            break
        if t >= n_special:
            out.append(t)
    return out


def merge_words(text):
    """Merge consecutive repeated words of a decoded output (ELMER 4.1: NAR outputs repeat). A
    word, not a subword id: "Swis s" pieces of "Swiss" or "20 20" of "2020" stay as they are."""
    out = []
    for w in text.split():
        if not out or out[-1] != w:
            out.append(w)
    return " ".join(out)


class ExitTrace:
    """What ELMER's decodings measured, kept for the caller that asks for it (eval.py's row) and
    passed to generate explicitly: the model keeps no statistics. counts: the output tokens that
    left at each layer (index = layer, 1-based; the paper's Figure 2); work: the decoder's
    multiply-adds ("macs") and those it would have spent with exit disabled ("macs_off";
    decoder_macs); entropies: per output row its tokens' off-ramp entropies, (n, L)."""

    def __init__(self, n_layers):
        self.counts = torch.zeros(n_layers + 1, dtype=torch.long)
        self.work = dict(macs=0, macs_off=0)
        self.entropies = []


@torch.no_grad()
def generate(model, src_ids, tok, delta=None, measure=None, trace=None):
    """Output id lists for a batch of (already truncated) sources. trace: an ExitTrace that
    receives the exit layers of the tokens up to and including each row's first [EOS], their
    off-ramp entropies (decode_exit's "entropy") and the decoder's multiply-adds; None: nothing
    is measured beyond the decoding itself."""
    dev = next(model.parameters()).device
    limit = model.cfg.max_positions - 1
    src, valid = pad_stack([np.array(list(s)[:limit] + [tok.eos_id], dtype=np.int64) for s in src_ids], tok.pad_id)
    src, valid = src.to(dev), valid.to(dev)
    memory = model.encode_source(src, valid)
    delta = model.exit_threshold if delta is None else delta
    measure = model.exit_measure if measure is None else measure
    T, (B, S) = model.dec_len, src.shape
    this = {} if trace is not None else None
    tokens, layers = decode_exit(model, memory, valid, T, delta, measure=measure, work=this)
    tokens = tokens.tolist()
    if trace is not None:
        L = len(model.dec_layers)
        off = dict(queries=[B * T] * L, ramp=[0] * (L - 1) + [B * T], measure=[0] * L)
        trace.work["macs"] += decoder_macs(model.cfg, T, S, this)
        trace.work["macs_off"] += decoder_macs(model.cfg, T, S, off)
        for row, lay, ent in zip(tokens, layers.tolist(), this["entropy"].cpu()):
            n = row.index(tok.eos_id) + 1 if tok.eos_id in row else len(row)
            for x in lay[:n]:
                trace.counts[x] += 1
            trace.entropies.append(ent[:n])
    return [finish(row, tok.eos_id, tok.n_special) for row in tokens]


def exit_statistics(counts):
    """Mean exit layer and the fraction exiting at each layer (the paper's Figure 2)."""
    counts = counts[1:].double()
    total = counts.sum().clamp_min(1)
    frac = (counts / total).tolist()
    mean = float((torch.arange(1, len(counts) + 1, dtype=torch.double) * counts).sum() / total)
    return mean, frac


def entropy_quantiles(rows, q):
    """The q-quantile of the off-ramp entropy at each layer over the output tokens of
    ExitTrace.entropies, among those whose entropy that layer computed; None for a layer that
    computed none. Why an entropy exit does or does not fire: a layer exits tokens at threshold
    delta only where its low quantiles are under delta."""
    if not rows:
        return []
    e = torch.cat(rows)
    return [float(torch.nanquantile(col, q)) if not col.isnan().all() else None for col in e.double().T]
