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

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels
from ..batch import Batch, pad_stack
from ..model import EncoderDecoder, LMHead, Meta, positions
from ..tokenizer import MASK
from ..elmer.exit_measures import DEFAULT_THRESHOLD, TRAIN_ENTROPY, classifier_logit

IGNORE = -100
EXIT_MODES = ("hard", "soft")
PAPER_DEPTH = {"base": 6}  # ELMER 5.1: 6 encoder and 6 decoder layers at width 768 (base); else the preset's


def elmer_depth(model_name, n_layers):
    """Encoder and decoder layers of an ELMER of this preset."""
    return PAPER_DEPTH.get(model_name, n_layers)


# -----------------------------------------------------------------------------
# the model


class ELMER(EncoderDecoder):
    """dec_len: T, the [MASK] tokens fed to the decoder; separate_offramps: one LM head per
    decoder layer instead of one shared; soft: the soft-exit projection W of Eq. 12;
    exit_measure / exit_threshold: generate's exit rule (core/elmer/exit_measures.py; entropy 0: no token
    exits early); exit_entropy: the entropy threshold of an older checkpoint's options;
    exit_train: "hard" (section 4.1: tokens leave during fine-tuning) or "all" (no token leaves,
    every off-ramp trained)."""

    def __init__(
        self,
        cfg,
        dec_len=32,
        separate_offramps=False,
        soft=False,
        exit_entropy=None,
        exit_measure="entropy",
        exit_threshold=None,
        exit_train="hard",
    ):
        super().__init__(cfg)
        if exit_entropy is not None:  # the options of a checkpoint written before exit measures
            exit_measure, exit_threshold = "entropy", exit_entropy
        self.dec_len, self.exit_measure, self.exit_train = dec_len, exit_measure, exit_train
        self.exit_threshold = DEFAULT_THRESHOLD[exit_measure] if exit_threshold is None else exit_threshold
        L, C = len(self.dec_layers), cfg.d_model
        self.ramps = nn.ModuleList(LMHead(cfg, self.emb.tok) for _ in range(L)) if separate_offramps else None
        # the shared head is then unused, a layer's own off-ramp idle in a step nobody exits at,
        # and LPLM does not train the exit classifier
        self.unused_parameters = True
        self.soft = nn.Linear(2 * C, C) if soft else None
        if soft:  # start as W = [0 I]: h~ = h, so a pretrained (hard) decoder is unchanged at step 0
            with torch.no_grad():
                self.soft.weight.zero_()
                self.soft.weight[:, C:] = torch.eye(C)
                self.soft.bias.zero_()
        # the learnt exit classifier (core/elmer/exit_measures.py): row l scores LN(h^l) at layer l
        self.exit_clf = nn.Linear(C, L)
        with torch.no_grad():
            self.exit_clf.weight.zero_()
            self.exit_clf.bias.zero_()

    @property
    def exit_entropy(self):  # the threshold under the paper's measure (0: that measure is not in use)
        return self.exit_threshold if self.exit_measure == "entropy" else 0.0

    def load_state_dict(self, state, strict=True):
        """A pretrained (or hard) checkpoint has no soft projection (keep its identity start), an older
        one no exit classifier."""
        state = dict(state)
        for k, v in self.state_dict().items():
            if k.startswith(("soft.", "ramps.", "exit_clf.")) and k not in state:
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

    def decoder_loop(self, memory, src_valid, T, decide, gather=None, trace=None, detach_exited=False):
        """Run the decoder on [MASK] x T with early exit.

        memory: (B, S, C), src_valid: (B, S) bool. decide(layer, idx, h, x_in) is called after every
        layer with the flat indices idx (N,) of the tokens that ran it, their states h (N, C) and
        the layer's input x_in (B*T, C), every token's state before the layer;
        it returns (exit (N,) bool or None, argmax (N,) long or None); the last layer exits
        everyone. With self.soft, the argmax of the tokens that go on is fed back by Eq. 12.
        gather=False computes the same thing in the plain (B, T) layout (every token a query, the
        exited rows then overwritten): the reference the gathered layout is tested against.
        gather=None picks the layout that does less work (gather_pays).
        trace: a list that receives the (B*T, C) states after every layer. detach_exited: an
        exited token's state serves the upper layers as key and value without a gradient (its
        own off-ramp loss, taken before, still trains it; ELMER's published code does the same).
        Returns (B*T, C)."""
        B, S, C = memory.shape
        dev, L = memory.device, len(self.dec_layers)
        # traced by torch.compile the counts are symbols: the plain layout, whose shapes stay fixed,
        # and no early stop when every token has left (the layer then runs on no rows)
        compiling = torch.compiler.is_compiling()
        gather = (gather_pays(B, dev) and not compiling) if gather is None else gather
        pos = torch.arange(T, device=dev).expand(B, T)
        x = self.emb(torch.full((B, T), MASK, device=dev, dtype=torch.long), pos).reshape(B * T, C)  # (B*T, C)
        k_pos, k_seq = pos.reshape(1, -1), torch.arange(B, device=dev).repeat_interleave(T)[None]
        zk = torch.zeros_like(k_seq)
        mem = memory.reshape(1, B * S, C)
        mem_meta = Meta(
            torch.zeros(1, B * S, dtype=torch.long, device=dev),
            torch.zeros(1, B * S, dtype=torch.long, device=dev),
            src_valid.reshape(1, -1),
            torch.arange(B, device=dev).repeat_interleave(S)[None],
        )
        dense_meta = Meta(torch.zeros_like(pos), torch.zeros_like(pos))  # bidirectional
        dense_mem = self.memory_meta(src_valid)
        active = torch.ones(B, T, dtype=torch.bool, device=dev)
        for l, layer in enumerate(self.dec_layers):
            idx = kernels.active_index(active)  # (N,), the one host sync of the layer
            N = idx.numel()
            if not compiling and N == 0:
                break
            if gather and N < B * T:  # with every token active the gather is the identity: plain layout
                q = kernels.gather_rows(x, idx)[None]  # (1, N, C)
                q_meta = Meta(
                    torch.zeros(1, N, dtype=torch.long, device=dev),
                    torch.zeros(1, N, dtype=torch.long, device=dev),
                    None,
                    k_seq[:, idx],
                )
                bias = self.rel_bias(self.dec_rel_table, k_pos[:, idx], k_pos)
                k_meta = Meta(zk, zk, None, k_seq)
                y, _ = layer(q, q_meta, k_meta, bias, context=x[None], memory=mem, mem_meta=mem_meta)
                h = y[0]  # (N, C)
            else:
                bias = self.rel_bias(self.dec_rel_table, pos, pos)
                y, _ = layer(x.view(B, T, C), dense_meta, bias=bias, memory=memory, mem_meta=dense_mem)
                h = y.reshape(B * T, C).index_select(0, idx)
            exit_, argmax = decide(l, idx, h, x)
            if l == L - 1:
                exit_ = torch.ones(N, dtype=torch.bool, device=dev)
            fed = torch.where(exit_[:, None], h.detach(), h) if detach_exited and exit_ is not None else h
            if self.soft is not None and l < L - 1:
                if argmax is None:
                    argmax = self.ramp_stats(l, h)[0]
                fed = (
                    torch.where(exit_[:, None], fed, self.soft(torch.cat([self.emb.tok(argmax), h], -1)))
                    if exit_ is not None
                    else self.soft(torch.cat([self.emb.tok(argmax), h], -1))
                )
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
        once and its memory serves all k assignments; sums are averaged over k. Without: the
        off-ramps of fine-tuning (offramp_loss_sums). Returns dict(loss, nll, hit, n) of sums."""
        memory = self.encode_source(src, src_valid)
        if exit_layers is None:
            loss, nll, hit, n = offramp_loss_sums(
                self, memory, src_valid, target, label_smoothing, self.exit_train == "hard"
            )
            return dict(loss=loss, nll=nll, hit=hit, n=n)
        k = exit_layers.shape[1]
        loss = hit = 0.0
        for j in range(k):
            l_j, h_j, n = assigned_loss_sums(self, memory, src_valid, target, exit_layers[:, j])
            loss, hit = loss + l_j / k, hit + h_j / k
        return dict(loss=loss, nll=loss.detach(), hit=hit, n=n)


# -----------------------------------------------------------------------------
# losses: assigned exit layers (LPLM), or the off-ramps a token passes (fine-tuning)


def gather_pays(B, device):
    """Whether the gathered layout does less work than the plain one for a batch of B. The Triton
    attention visits only the key tiles of a query's own sequence, so packing the active queries
    saves the exited tokens' work at any B. The reference attention computes the packed queries
    against every key of the batch, masked by sequence: N x B*T scores (and N x B*S for the
    memory) instead of B x T x T, so from B = 2 on it costs more than it saves (an LPLM step of
    `small` at B 32, T 128, 1 CPU thread: 23 s gathered against 7.4 s plain)."""
    return kernels.resolve_backend("auto", device) == "triton" or B == 1


def assigned_loss_sums(model, memory, src_valid, target, exit_layer, gather=None):
    """Cross-entropy of each token at its assigned exit off-ramp (Eq. 9). target: (B, T) long with
    IGNORE; exit_layer: (B, T) long in 1..L. Returns (loss sum, hits, count)."""
    B, T = target.shape
    flat_t, flat_e = target.reshape(-1), exit_layer.reshape(-1)
    sums = []

    def decide(l, idx, h, x_in):
        exit_ = flat_e[idx] == l + 1
        out = kernels.active_index(exit_)
        t = flat_t[idx].index_select(0, out)
        loss, _, argmax, _ = ramp_losses(model, l, h.index_select(0, out), t)
        sums.append((loss, ((argmax == t) & (t != IGNORE)).sum()))
        return exit_, None

    model.decoder_loop(memory, src_valid, T, decide, gather)
    loss = sum(s[0] for s in sums)
    hit = sum(s[1] for s in sums)
    return loss, hit.float(), (flat_t != IGNORE).sum().float()


def ramp_losses(model, l, h, target, label_smoothing=0.0):
    """The off-ramp of layer l on rows h (N, C) against target (N,) with IGNORE: (loss sum, nll
    per row, argmax (N,), entropy (N,)), the last three without gradient. Rows whose target is
    IGNORE (past the reference's [EOS]) are not projected: nll and argmax 0, entropy +inf (so
    they never leave during training, as under all-off-ramps training). Where the Triton backend
    runs (and without label smoothing) the loss and the statistics come from one
    kernels.offramp_cross_entropy pass: no (N, V) logits exist, forward or backward."""
    keep = target != IGNORE
    rows = kernels.active_index(keep)
    t, x = target.index_select(0, rows), h.index_select(0, rows)
    N, n = target.shape[0], rows.numel()
    if label_smoothing == 0 and kernels.resolve_backend("auto", h.device) == "triton":
        head = model.ramp_head(l)
        y = head.ln(F.gelu(head.dense(model.ln_dec(x))))  # (n, C), the head before the vocabulary
        # one pass over the vocabulary gives the loss and the statistics the exit decision needs
        loss, arg, ent, nll_rows = kernels.offramp_cross_entropy(y, head.embedding.weight, head.bias, t, stats=True)
        loss = loss * n  # mean -> sum
    else:
        logits = model.ramp_logits(l, x).float()  # (n, V)
        loss = F.cross_entropy(logits, t, reduction="sum", label_smoothing=label_smoothing)
        with torch.no_grad():
            logp = logits.log_softmax(-1)
            nll_rows, ent, arg = -logp.gather(1, t[:, None])[:, 0], -(logp.exp() * logp).sum(-1), logits.argmax(-1)
    with torch.no_grad():
        nll = torch.zeros(N, device=h.device).index_copy(0, rows, nll_rows.float())
        entropy = torch.full((N,), math.inf, device=h.device).index_copy(0, rows, ent.float())
        argmax = torch.zeros_like(target).index_copy(0, rows, arg)
    return loss, nll, argmax, entropy


def offramp_loss_sums(model, memory, src_valid, target, label_smoothing=0.0, hard=True):
    """Fine-tuning (section 4.3): the loss at every off-ramp a token passes, averaged over layers.
    hard: hard-exit training (section 4.1): a token whose off-ramp entropy is under the
    threshold (the paper's rule at its delta, TRAIN_ENTROPY, or the run's entropy threshold)
    leaves there: no loss above, its state copied up without a gradient (detach_exited). Not
    hard (or soft exit, which feeds each layer's argmax forward): no token exits. The exit
    classifier learns beside, on detached states, whether a layer's argmax is already the
    token's final one. Returns (loss, nll and hits at each token's exit layer, n)."""
    B, T = target.shape
    flat_t = target.reshape(-1)
    keep = flat_t != IGNORE
    L = len(model.dec_layers)
    hard = hard and model.soft is None
    delta = model.exit_threshold if model.exit_measure == "entropy" else TRAIN_ENTROPY
    final = torch.zeros_like(flat_t)
    nll = torch.zeros(flat_t.shape, dtype=torch.float, device=flat_t.device)
    out = dict(loss=0.0, seen=[])

    def decide(l, idx, h, x_in):
        loss, nll_rows, argmax, entropy = ramp_losses(model, l, h, flat_t[idx], label_smoothing)
        out["loss"] = out["loss"] + loss / L
        exit_ = (entropy < delta) if hard and l < L - 1 else torch.full_like(idx, l == L - 1, dtype=torch.bool)
        final.index_copy_(0, idx, torch.where(exit_, argmax, final[idx]))
        nll.index_copy_(0, idx, torch.where(exit_, nll_rows, nll[idx]))
        if l < L - 1:
            out["seen"].append((idx, classifier_logit(model, l, h), argmax))
        # soft exit feeds each layer's argmax forward: the model's own prediction at every position,
        # never the 0 that ramp_losses leaves past the reference's [EOS] (that 0 would tell the
        # upper layers where the reference ends, which decoding cannot know); decoder_loop projects
        # every row itself when given None
        return exit_, argmax if model.soft is None else None

    model.decoder_loop(memory, src_valid, T, decide, gather=None if hard else False, detach_exited=hard)
    clf = 0.0
    for idx, logit, argmax in out["seen"]:  # labels once every token's final argmax is known
        k = keep[idx]
        label = (argmax == final[idx]).float()
        clf = clf + F.binary_cross_entropy_with_logits(logit[k], label[k], reduction="sum") / max(1, L - 1)
    hit = (final[keep] == flat_t[keep]).sum().float()
    return out["loss"] + clf, nll[keep].sum(), hit, keep.sum().float()


# -----------------------------------------------------------------------------
# fine-tuning batches


def elmer_seq2seq_batch(pairs, tok, max_src, max_tgt, dec_len):
    """Source SRC + [EOS]; target TGT + [EOS] (at most max_tgt tokens), IGNORE up to dec_len."""
    sources = [np.array(list(s)[: max_src - 1] + [tok.eos_id], dtype=np.int64) for s, _ in pairs]
    targets = [np.array(list(t)[: min(max_tgt, dec_len) - 1] + [tok.eos_id], dtype=np.int64) for _, t in pairs]
    src, src_valid = pad_stack(sources, tok.pad_id)
    tgt = torch.full((len(pairs), dec_len), IGNORE, dtype=torch.long)
    for b, t in enumerate(targets):
        tgt[b, : len(t)] = torch.as_tensor(t)
    n = int((tgt != IGNORE).sum())
    return Batch(norm=n, n_tokens=int(src_valid.sum()) + n, src=src, src_valid=src_valid, tgt_out=tgt)


def elmer_seq2seq_loss_sums(model, batch, label_smoothing=0.0):
    return model(batch.src, batch.src_valid, batch.tgt_out, label_smoothing=label_smoothing)


def lplm_loss_sums(model, batch):
    return model(batch.src, batch.src_valid, batch.tgt_out, batch.exit_layers)


# the data of LPLM and the inference live beside: core/elmer/lplm.py, core/elmer/exit_measures.py
from ..elmer.lplm import full_stop_ids, infilling_spans, lplm_batch, lplm_corrupt, sentence_shuffle  # noqa: E402,F401
from ..elmer.exit_decode import ExitTrace, decode_exit, exit_statistics, finish, generate, merge_words  # noqa: E402,F401
