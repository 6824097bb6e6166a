"""ELMER (Li et al., EMNLP 2022, "ELMER: A Non-Autoregressive Pre-trained Language Model for
Efficient and Effective Text Generation"), sections 4.1-4.3: a NAR encoder-decoder whose tokens
exit the decoder at different layers, its LPLM pretraining and its hard / soft exit fine-tuning.

The model is core.model.EncoderDecoder with three changes:
  * the decoder is fed [MASK] x T (T = `dec_len`, a maximum, never the reference's length) and its
    self-attention is bidirectional (all CONTEXT); the output ends at the first [EOS] and
    consecutive duplicates are merged (section 4.1);
  * an off-ramp after every decoder layer (Eq. 7-8): the final LayerNorm and the tied LM head,
    one head shared by all layers (the paper's pretraining setting) or one per layer;
  * early exit that skips the work: a token that exits at layer l keeps h^l above it. At every
    layer the active tokens are gathered (kernels.active_index / gather_rows), run through the
    layer as queries with keys and values from all tokens (`context`), and scattered back
    (kernels.scatter_rows), so an exited token's query, attention output, FFN and off-ramp are
    never computed again, while it still serves as key and value.

Queries are packed across the batch, (1, N, C), with sequence ids: a query only sees the keys of
its own sequence (the packed case of kernels.attention). Only the count N reaches the host, once
per layer (active_index).

Exit policies: assigned layers (LPLM, section 4.2: each token's exit layer uniform in 1..L, k
assignments per sequence with the encoder run once), entropy under a threshold at inference
(hard exit, Eq. 10) and soft exit (Eq. 11-12: W[Embed(argmax); h^l] fed to layer l + 1).
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels
from .batch import Batch, pad_stack
from .model import EncoderDecoder, LMHead, Meta, positions
from .tokenizer import MASK

IGNORE = -100
EXIT_MODES = ("hard", "soft")


# -----------------------------------------------------------------------------
# the model

class ELMER(EncoderDecoder):
    """dec_len: T, the [MASK] tokens fed to the decoder; separate_offramps: one LM head per
    decoder layer instead of one shared; soft: the soft-exit projection W of Eq. 12;
    exit_entropy: the hard-exit threshold delta used by generate (0: no token exits early)."""

    def __init__(self, cfg, dec_len=32, separate_offramps=False, soft=False, exit_entropy=0.5):
        super().__init__(cfg)
        self.dec_len, self.exit_entropy = dec_len, exit_entropy
        L, C = len(self.dec_layers), cfg.d_model
        self.ramps = nn.ModuleList(LMHead(cfg, self.emb.tok) for _ in range(L)) if separate_offramps else None
        # the shared head is then unused, and a layer's own off-ramp idle in a step nobody exits at
        self.unused_parameters = separate_offramps
        self.soft = nn.Linear(2 * C, C) if soft else None
        if soft:  # start as W = [0 I]: h~ = h, so a pretrained (hard) decoder is unchanged at step 0
            with torch.no_grad():
                self.soft.weight.zero_()
                self.soft.weight[:, C:] = torch.eye(C)
                self.soft.bias.zero_()
        self.exit_counts = torch.zeros(L + 1, dtype=torch.long)  # generate's statistics, index = layer

    def load_state_dict(self, state, strict=True):
        """A pretrained (or hard) checkpoint has no soft projection: keep its identity start."""
        state = dict(state)
        for k, v in self.state_dict().items():
            if k.startswith(("soft.", "ramps.")) and k not in state:
                state[k] = v
        return super().load_state_dict(state, strict)

    def ramp_head(self, layer):
        return self.head if self.ramps is None else self.ramps[layer]

    def ramp_logits(self, layer, h):  # (N, C) -> (N, V), differentiable
        return self.ramp_head(layer)(self.ln_dec(h))

    def ramp_stats(self, layer, h):
        """(argmax, entropy, logsumexp), each (N,), without gradient: kernels.offramp, which the
        fused kernel serves without writing the (N, V) probabilities."""
        head = self.ramp_head(layer)
        t = head.ln(F.gelu(head.dense(self.ln_dec(h))))
        return kernels.offramp(t, head.embedding.weight, head.bias)

    def decoder_loop(self, memory, src_valid, T, decide, gather=True, trace=None):
        """Run the decoder on [MASK] x T with early exit.

        memory: (B, S, C), src_valid: (B, S) bool. decide(layer, idx, h) is called after every
        layer with the flat indices idx (N,) of the tokens that ran it and their states h (N, C);
        it returns (exit (N,) bool or None, argmax (N,) long or None); the last layer exits
        everyone. With self.soft, the argmax of the tokens that go on is fed back by Eq. 12.
        gather=False computes the same thing in the plain (B, T) layout (every token a query, the
        exited rows then overwritten): the reference the gathered layout is tested against.
        trace: a list that receives the (B*T, C) states after every layer. Returns (B*T, C)."""
        B, S, C = memory.shape
        dev, L = memory.device, len(self.dec_layers)
        pos = torch.arange(T, device=dev).expand(B, T)
        x = self.emb(torch.full((B, T), MASK, device=dev, dtype=torch.long), pos).reshape(B * T, C)  # (B*T, C)
        k_pos, k_seq = pos.reshape(1, -1), torch.arange(B, device=dev).repeat_interleave(T)[None]
        zk = torch.zeros_like(k_seq)
        mem = memory.reshape(1, B * S, C)
        mem_meta = Meta(torch.zeros(1, B * S, dtype=torch.long, device=dev), torch.zeros(1, B * S, dtype=torch.long,
                        device=dev), src_valid.reshape(1, -1), torch.arange(B, device=dev).repeat_interleave(S)[None])
        dense_meta = Meta(torch.zeros_like(pos), torch.zeros_like(pos))  # bidirectional
        dense_mem = self._mem_meta(src_valid)
        active = torch.ones(B, T, dtype=torch.bool, device=dev)
        for l, layer in enumerate(self.dec_layers):
            idx = kernels.active_index(active)  # (N,), the one host sync of the layer
            N = idx.numel()
            if N == 0:
                break
            if gather and N < B * T:  # with every token active the gather is the identity: plain layout
                q = kernels.gather_rows(x, idx)[None]  # (1, N, C)
                q_meta = Meta(torch.zeros(1, N, dtype=torch.long, device=dev), torch.zeros(1, N, dtype=torch.long,
                              device=dev), None, k_seq[:, idx])
                bias = self.rel_bias(self.dec_rel_table, k_pos[:, idx], k_pos)
                k_meta = Meta(zk, zk, None, k_seq)
                y, _ = layer(q, q_meta, k_meta, bias, context=x[None], memory=mem, mem_meta=mem_meta)
                h = y[0]  # (N, C)
            else:
                bias = self.rel_bias(self.dec_rel_table, pos, pos)
                y, _ = layer(x.view(B, T, C), dense_meta, bias=bias, memory=memory, mem_meta=dense_mem)
                h = y.reshape(B * T, C).index_select(0, idx)
            exit_, argmax = decide(l, idx, h)
            if l == L - 1:
                exit_ = torch.ones(N, dtype=torch.bool, device=dev)
            fed = h
            if self.soft is not None and l < L - 1:
                if argmax is None:
                    argmax = self.ramp_stats(l, h)[0]
                fed = torch.where(exit_[:, None], h, self.soft(torch.cat([self.emb.tok(argmax), h], -1))) \
                    if exit_ is not None else self.soft(torch.cat([self.emb.tok(argmax), h], -1))
            x = kernels.scatter_rows(x, idx, fed) if gather else x.index_copy(0, idx, fed)
            if trace is not None:
                trace.append(x)
            if exit_ is not None:
                active = active.reshape(-1).index_put((idx,), ~exit_).view(B, T)  # on the device, no sync
        return x

    def encode_source(self, src, src_valid):
        return self.encode(src, positions(src), src_valid)

    def forward(self, src, src_valid, target, exit_layers=None, label_smoothing=0.0):
        """The training losses in one call, so that DistributedDataParallel sees one forward.
        src: (B, S), target: (B, T) with IGNORE. With exit_layers (B, k, T) (LPLM): the encoder runs
        once and its memory serves all k assignments; sums are averaged over k. Without: every
        off-ramp (fine-tuning). Returns dict(loss, nll, hit, n) of sums."""
        memory = self.encode_source(src, src_valid)
        if exit_layers is None:
            loss, nll, hit, n = all_ramps_loss_sums(self, memory, src_valid, target, label_smoothing)
            return dict(loss=loss, nll=nll, hit=hit, n=n)
        k = exit_layers.shape[1]
        loss = hit = 0.0
        for j in range(k):
            l_j, h_j, n = assigned_loss_sums(self, memory, src_valid, target, exit_layers[:, j])
            loss, hit = loss + l_j / k, hit + h_j / k
        return dict(loss=loss, nll=loss.detach(), hit=hit, n=n)


# -----------------------------------------------------------------------------
# losses: assigned exit layers (LPLM), or every off-ramp (fine-tuning)

def assigned_loss_sums(model, memory, src_valid, target, exit_layer, gather=True):
    """Cross-entropy of each token at its assigned exit off-ramp (Eq. 9). target: (B, T) long with
    IGNORE; exit_layer: (B, T) long in 1..L. Returns (loss sum, hits, count)."""
    B, T = target.shape
    flat_t, flat_e = target.reshape(-1), exit_layer.reshape(-1)
    sums = []

    def decide(l, idx, h):
        exit_ = flat_e[idx] == l + 1
        pick = idx[exit_ & (flat_t[idx] != IGNORE)]
        logits = model.ramp_logits(l, h[exit_ & (flat_t[idx] != IGNORE)]).float()
        sums.append((F.cross_entropy(logits, flat_t[pick], reduction="sum"),
                     (logits.argmax(-1) == flat_t[pick]).sum()))
        return exit_, None

    model.decoder_loop(memory, src_valid, T, decide, gather)
    loss = sum(s[0] for s in sums)
    hit = sum(s[1] for s in sums)
    return loss, hit.float(), (flat_t != IGNORE).sum().float()


def all_ramps_loss_sums(model, memory, src_valid, target, label_smoothing=0.0):
    """Fine-tuning: no token exits, the loss at every off-ramp averaged over layers (section 4.3;
    soft exit feeds each layer's argmax forward). Returns (loss, nll, hit at the last layer, n)."""
    B, T = target.shape
    flat_t = target.reshape(-1)
    keep = flat_t != IGNORE
    L = len(model.dec_layers)
    out = dict(loss=0.0, nll=0.0)

    def decide(l, idx, h):  # idx is every token: nobody has exited
        logits = model.ramp_logits(l, h).float()  # (B*T, V)
        out["loss"] = out["loss"] + F.cross_entropy(logits[keep], flat_t[keep], reduction="sum",
                                                    label_smoothing=label_smoothing) / L
        argmax = logits.argmax(-1).detach()
        if l == L - 1:
            out["nll"] = F.cross_entropy(logits[keep].detach(), flat_t[keep], reduction="sum")
            out["hit"] = (argmax[keep] == flat_t[keep]).sum().float()
        return torch.zeros_like(idx, dtype=torch.bool), argmax

    model.decoder_loop(memory, src_valid, T, decide, gather=False)
    return out["loss"], out["nll"], out["hit"], keep.sum().float()


# -----------------------------------------------------------------------------
# inference: hard exit by entropy

@torch.no_grad()
def decode_exit(model, memory, src_valid, T, delta, gather=True):
    """Hard exit (Eq. 10): a token leaves at the first layer whose off-ramp entropy is < delta
    (delta 0: nobody leaves early; +inf: everybody leaves at layer 1). Returns the tokens (B, T)
    and each token's exit layer (B, T), 1-based."""
    B = memory.shape[0]
    tokens = torch.zeros(B * T, dtype=torch.long, device=memory.device)
    layer_of = torch.zeros(B * T, dtype=torch.long, device=memory.device)
    L = len(model.dec_layers)

    def decide(l, idx, h):
        if delta <= 0 and l < L - 1:  # no entropy is < 0: exit disabled, only the top off-ramp runs
            return None, None
        argmax, entropy, _ = model.ramp_stats(l, h)
        exit_ = (entropy < delta) | (l == L - 1)
        tokens.index_copy_(0, idx, torch.where(exit_, argmax, tokens[idx]))
        layer_of.index_copy_(0, idx, torch.where(exit_, l + 1, layer_of[idx]))
        return exit_, argmax

    model.decoder_loop(memory, src_valid, T, decide, gather)
    return tokens.view(B, T), layer_of.view(B, T)


def finish(tokens, eos_id, n_special):
    """One row of decoder output -> the output ids: cut at the first [EOS], consecutive
    duplicates merged, special ids dropped (section 4.1)."""
    out = []
    for t in tokens:
        if t == eos_id:
            break
        if t >= n_special and (not out or out[-1] != t):
            out.append(t)
    return out


@torch.no_grad()
def generate(model, src_ids, tok, delta=None):
    """Output id lists for a batch of (already truncated) sources; updates model.exit_counts with
    the exit layers of the tokens up to and including each row's first [EOS]."""
    dev = next(model.parameters()).device
    limit = model.cfg.max_positions - 1
    src, valid = pad_stack([np.array(list(s)[:limit] + [tok.eos_id], dtype=np.int64) for s in src_ids], tok.pad_id)
    src, valid = src.to(dev), valid.to(dev)
    memory = model.encode_source(src, valid)
    delta = model.exit_entropy if delta is None else delta
    tokens, layers = decode_exit(model, memory, valid, model.dec_len, delta)
    tokens, layers = tokens.tolist(), layers.tolist()
    for row, lay in zip(tokens, layers):
        n = row.index(tok.eos_id) + 1 if tok.eos_id in row else len(row)
        for x in lay[:n]:
            model.exit_counts[x] += 1
    return [finish(row, tok.eos_id, tok.n_special) for row in tokens]


def exit_statistics(counts):
    """Mean exit layer and the fraction exiting at each layer (the paper's Figure 2)."""
    counts = counts[1:].double()
    total = counts.sum().clamp_min(1)
    frac = (counts / total).tolist()
    mean = float((torch.arange(1, len(counts) + 1, dtype=torch.double) * counts).sum() / total)
    return mean, frac


# -----------------------------------------------------------------------------
# fine-tuning batches

def elmer_seq2seq_batch(pairs, tok, max_src, max_tgt, dec_len):
    """Source SRC + [EOS]; target TGT + [EOS] (at most max_tgt tokens), IGNORE up to dec_len."""
    sources = [np.array(list(s)[:max_src - 1] + [tok.eos_id], dtype=np.int64) for s, _ in pairs]
    targets = [np.array(list(t)[:min(max_tgt, dec_len) - 1] + [tok.eos_id], dtype=np.int64) for _, t in pairs]
    src, src_valid = pad_stack(sources, tok.pad_id)
    tgt = torch.full((len(pairs), dec_len), IGNORE, dtype=torch.long)
    for b, t in enumerate(targets):
        tgt[b, :len(t)] = torch.as_tensor(t)
    n = int((tgt != IGNORE).sum())
    return Batch(norm=n, n_tokens=int(src_valid.sum()) + n, src=src, src_valid=src_valid, tgt_out=tgt)


def elmer_seq2seq_loss_sums(model, batch, label_smoothing=0.1):
    return model(batch.src, batch.src_valid, batch.tgt_out, label_smoothing=label_smoothing)


# -----------------------------------------------------------------------------
# LPLM pretraining data (section 4.2, "Pre-training Tasks", after BART)

def full_stop_ids(tok):
    """Ids of the pieces that end a sentence (the paper splits sentences at full stops)."""
    if not hasattr(tok, "_full_stops"):
        tok._full_stops = {i for i in range(tok.vocab_size) if tok.sp.id_to_piece(i).endswith((".", "!", "?"))}
    return tok._full_stops


def sentence_shuffle(ids, stops, rng, eos_id=None):
    """Split after every full stop and permute the sentences, within each document: an [EOS]
    (`eos_id`, the end of a document in the pretraining stream) stays where it is."""
    out, doc = [], []

    def flush():
        sentences, cur = [], []
        for t in doc:
            cur.append(t)
            if t in stops:
                sentences.append(cur)
                cur = []
        if cur:
            sentences.append(cur)
        out.extend(t for i in rng.permutation(len(sentences)) for t in sentences[i])
        doc.clear()
    for t in ids:
        if int(t) == eos_id:
            flush()
            out.append(int(t))
        else:
            doc.append(int(t))
    flush()
    return out


def infilling_spans(n, rng, ratio=0.15, lam=3.0, fixed=()):
    """(start, length) of spans covering round(ratio * n) tokens, lengths ~ Poisson(lam) (zeros
    redrawn: BART also inserts a [MASK] for a zero-length span, which we leave out), the last
    one cut to hit the count; spans neither overlap nor touch, so each one becomes its own [MASK];
    positions in `fixed` (a document's [EOS]) are never covered."""
    budget = max(1, round(ratio * n))
    taken = np.zeros(n + 2, dtype=bool)  # guard cells at both ends
    taken[np.asarray(fixed, dtype=np.int64) + 1] = True
    spans = []
    for _ in range(100 * budget):
        if budget == 0:
            break
        m = 0
        while m == 0:
            m = int(rng.poisson(lam))
        m = min(m, budget)
        s = int(rng.integers(0, n - m + 1))
        if taken[s:s + m + 2].any():  # cells s-1 .. s+m in guard coordinates
            continue
        taken[s + 1:s + m + 1] = True
        spans.append((s, m))
        budget -= m
    return sorted(spans)


def lplm_corrupt(ids, tok, rng, ratio=0.15, lam=3.0):
    """Encoder input of LPLM: sentence shuffling, then text infilling with one [MASK] per span;
    a document's [EOS] is neither moved nor masked."""
    shuffled = sentence_shuffle(ids, full_stop_ids(tok), rng, tok.eos_id)
    fixed = [i for i, t in enumerate(shuffled) if t == tok.eos_id]
    out, at = [], 0
    for s, m in infilling_spans(len(shuffled), rng, ratio, lam, fixed):
        out += shuffled[at:s] + [tok.mask_id]
        at = s + m
    return out + shuffled[at:]


def lplm_batch(stream, indices, tok, n_layers, k):
    """Examples `indices` of a TokenStream: source corrupt(x) + [EOS], target x + [EOS] (the
    decoder is fed [MASK] x len(target)), and k exit-layer assignments per sequence, every
    token's layer uniform in 1..n_layers, drawn by the example's own generator."""
    sources, targets, layers = [], [], []
    for i in indices:
        window, rng = stream.window_at(i)
        sources.append(np.array(lplm_corrupt(window, tok, rng) + [tok.eos_id], dtype=np.int64))
        targets.append(np.array(list(window) + [tok.eos_id], dtype=np.int64))
        layers.append(rng.integers(1, n_layers + 1, (k, len(targets[-1]))))
    src, src_valid = pad_stack(sources, tok.pad_id)
    tgt, _ = pad_stack(targets, IGNORE)
    T = tgt.shape[1]
    exit_layers = torch.stack([torch.as_tensor(np.pad(l, ((0, 0), (0, T - l.shape[1])), constant_values=1))
                               for l in layers])  # (B, k, T)
    n = int((tgt != IGNORE).sum())
    return Batch(norm=n, n_tokens=int(src_valid.sum()) + n, src=src, src_valid=src_valid, tgt_out=tgt,
                 exit_layers=exit_layers)


def lplm_loss_sums(model, batch):
    return model(batch.src, batch.src_valid, batch.tgt_out, batch.exit_layers)
