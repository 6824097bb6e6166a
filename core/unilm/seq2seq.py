"""UniLMv2 seq2seq fine-tuning with pseudo masks, and its decoder (UniLMv2 section 3.4).

One example, "[SOS] SRC [EOS]" then the target y_1 .. y_T (the target text, then [EOS]):

    tokens   [SOS] s1 .. [EOS] | y_1 .. y_T          | [P] .. [P]
    kind     CONTEXT           | ORIGINAL            | PSEUDO
    step     0                 | 1 .. T              | 1 .. T
    pos      0 .. S-1          | S .. S+T-1          | S .. S+T-1   (a [P] sits at its token's place)
    seg      0                 | 1                   | 1
    target   -                 | -                   | y_1 .. y_T

With the attention rule (kernels/reference.py) the source is bidirectional and sees nothing of the
target, y_t sees the source and y_1..y_t, and [P]_t sees the source, y_1..y_{t-1} and itself: it
predicts y_t exactly as a left-to-right decoder would, and all T predictions come out of one
forward pass. The loss is label-smoothed cross-entropy at the [P]s (0.1, as in the paper).

Decoding (PMLMDecoder) runs the same rule one step at a time against a true key/value cache:
step t feeds y_{t-1} (ORIGINAL, step t-1) and a fresh [P] (PSEUDO, step t), both at their
positions; the [P]'s output gives p(y_t | ...), and only y_{t-1}'s keys and values join the cache,
since no later token may see a [P]. The search itself lives in core/decoding.py.
"""

import numpy as np
import torch
import torch.nn.functional as F

from kernels import CONTEXT, ORIGINAL, PSEUDO
from ..kv_cache import KVCache
from ..model import Meta
from ..unilm.pmlm import IGNORE, collate

# -----------------------------------------------------------------------------
# fine-tuning examples and loss


def seq2seq_example(src_ids, tgt_ids, tok, max_src, max_tgt):
    """Arrays (tokens, pos, seg, kind, step, target) of one example, laid out as in the module
    docstring. The source keeps its first max_src ids (S = that + 2), the target its first
    max_tgt - 1 ids, then [EOS] (T <= max_tgt)."""
    src = np.asarray(list(src_ids)[:max_src], dtype=np.int64)
    y = np.concatenate([np.asarray(list(tgt_ids)[: max_tgt - 1], dtype=np.int64), [tok.eos_id]])
    S, T = len(src) + 2, len(y)
    steps = np.arange(1, T + 1)
    cat = lambda *xs: np.concatenate(xs).astype(np.int64)
    return dict(
        tokens=cat([tok.sos_id], src, [tok.eos_id], y, np.full(T, tok.pseudo_id)),
        pos=cat(np.arange(S), S + np.arange(T), S + np.arange(T)),
        seg=cat(np.zeros(S), np.ones(2 * T)),
        kind=cat(np.full(S, CONTEXT), np.full(T, ORIGINAL), np.full(T, PSEUDO)),
        step=cat(np.zeros(S), steps, steps),
        target=cat(np.full(S + T, IGNORE), y),
    )


def seq2seq_batch(pairs, tok, max_src, max_tgt):
    """(source ids, target ids) pairs -> a padded Batch; norm = the number of target tokens."""
    examples = [seq2seq_example(s, t, tok, max_src, max_tgt) for s, t in pairs]
    return collate(examples, tok.pad_id, losses="par")  # "par": norm counts the [P] targets


def seq2seq_loss_sums(model, batch, label_smoothing=0.1):
    """Sums over the [P] targets of the batch (normalise by the global count, like pmlm_loss_sums):
    loss, label-smoothed cross-entropy (differentiable); nll, plain cross-entropy; hit, argmax
    == target; n, the count."""
    # the [P]s as flat positions made on the host by collate: a boolean index would read its count
    sel, target = batch.predict, batch.predict_target
    logits = model(
        batch.tokens, batch.pos, batch.seg, batch.kind, batch.step, batch.valid, predict=sel
    ).float()  # (N, V), the vocabulary projection at the [P]s only
    loss = F.cross_entropy(logits, target, reduction="sum", label_smoothing=label_smoothing)
    nll = F.cross_entropy(logits.detach(), target, reduction="sum")
    hit = (logits.argmax(-1) == target).float().sum()
    return dict(loss=loss, nll=nll, hit=hit, n=(batch.target != IGNORE).sum().float())


# -----------------------------------------------------------------------------
# incremental decoding


class PMLMDecoder:
    """The IncrementalDecoder protocol of core/decoding.py for a UnifiedLM fine-tuned as above.

    model: a UnifiedLM (put it in eval mode); src_ids: list of B 1-D id lists (no [SOS]/[EOS]),
    of any lengths: each row keeps its own positions, S_b = len + 2, and the padding after a short
    source is an invalid key. use_cache=False recomputes the whole prefix with a plain forward at
    every step: the slow reference the cache is tested against.

    Cache (core/kv_cache.py): per layer the keys and values (N, H, L, D) of the source and of every
    target token fed so far, with their kind/step/valid and positions (N, L). The source is encoded
    once, all CONTEXT. Without use_cache it holds the source's key metadata alone.
    """

    def __init__(self, model, src_ids, tok, use_cache=True, max_src=None):
        self.model, self.tok, self.use_cache = model, tok, use_cache
        dev = next(model.parameters()).device
        srcs = [[tok.sos_id] + list(s)[:max_src] + [tok.eos_id] for s in src_ids]
        N, Smax = len(srcs), max(len(s) for s in srcs)
        self.src_len = torch.tensor([len(s) for s in srcs], device=dev)  # (N,) S_b
        self.src_tok = torch.full((N, Smax), tok.pad_id, dtype=torch.long, device=dev)
        for b, s in enumerate(srcs):
            self.src_tok[b, : len(s)] = torch.tensor(s, device=dev)
        ar = torch.arange(Smax, device=dev)[None]
        valid = ar < self.src_len[:, None]
        # the source's keys: CONTEXT, step 0, pos 0..S_b-1 (0 on padding)
        kind, step = torch.full((N, Smax), CONTEXT, device=dev), torch.zeros(N, Smax, dtype=torch.long, device=dev)
        pos = torch.where(valid, ar, 0)
        self.out = torch.zeros(N, 0, dtype=torch.long, device=dev)  # (N, t) the target so far
        kv = self._encode_source(Meta(kind, step, valid), pos) if use_cache else []
        self.cache = KVCache(kv, Meta(kind, step, valid), pos)
        self.rows_ = N

    @property
    def rows(self):
        return self.rows_

    @property
    def t(self):
        return self.out.shape[1]

    def _encode_source(self, meta, pos):
        """Run the source through every layer once; return its per-layer (k, v)."""
        m = self.model
        x = m.emb(self.src_tok, pos, torch.zeros_like(pos))
        bias = m.rel_bias(pos, pos)
        kv = []
        for layer in m.layers:
            x, layer_kv = layer(x, meta, bias=bias)
            kv.append(layer_kv)
        return kv

    def _check_positions(self, last_pos):
        limit = self.model.cfg.max_positions
        if int(last_pos.max()) >= limit:
            raise ValueError(
                f"decoding step {self.t + 1} reaches position {int(last_pos.max())}, past the "
                f"model's max_positions {limit}: shorten the source or max_len"
            )

    @torch.no_grad()
    def step(self, prev):
        if prev is not None:
            self.out = torch.cat([self.out, prev.to(self.out.device).long()[:, None]], 1)
        t = self.t  # target tokens known; the [P] predicts token t+1 at position S_b + t
        self._check_positions(self.src_len + t)
        h = self._step_cached() if self.use_cache else self._step_full()
        return F.log_softmax(self.model.head(h).float(), dim=-1)  # (N, V)

    def _step_cached(self):
        """Queries: y_t (ORIGINAL, step t; absent when t = 0) and [P] (PSEUDO, step t+1). Keys:
        the cache, then these two. Returns the [P]'s final hidden state (N, C)."""
        m, t, N = self.model, self.t, self.rows
        dev = self.out.device
        p_pos = self.src_len + t  # (N,)
        ones = torch.ones(N, 1, dtype=torch.long, device=dev)
        if t == 0:
            q_tok, q_pos = torch.full((N, 1), self.tok.pseudo_id, device=dev), p_pos[:, None]
            q_kind, q_step = ones * PSEUDO, ones
        else:
            q_tok = torch.cat([self.out[:, -1:], ones * self.tok.pseudo_id], 1)  # (N, 2)
            q_pos = torch.stack([p_pos - 1, p_pos], 1)
            q_kind = torch.cat([ones * ORIGINAL, ones * PSEUDO], 1)
            q_step = torch.cat([ones * t, ones * (t + 1)], 1)
        q_valid = torch.ones_like(q_tok, dtype=torch.bool)
        k_meta, k_pos = self.cache.keys(q_kind, q_step, q_pos, q_valid)
        bias = m.rel_bias(q_pos, k_pos)
        x = m.emb(q_tok, q_pos, torch.ones_like(q_tok))  # (N, Lq, C), segment 1
        meta = Meta(q_kind, q_step)
        new = []
        for i, layer in enumerate(m.layers):
            x, (k, v) = layer(x, meta, k_meta=k_meta, bias=bias, past=self.cache.past(i))
            new.append((k[:, :, :1], v[:, :, :1]))
        if t > 0:  # only the ORIGINAL token joins the cache: no later query may see a [P]
            self.cache.append(new, q_kind[:, :1], q_step[:, :1], q_pos[:, :1], q_valid[:, :1])
        return m.ln_f(x[:, -1])

    def _step_full(self):
        """The reference: one plain forward over source + y_1..y_t + [P]_{t+1}."""
        m, t, N = self.model, self.t, self.rows
        dev = self.out.device
        tgt_pos = self.src_len[:, None] + torch.arange(t + 1, device=dev)[None]  # (N, t+1)
        src = self.cache  # the source's keys alone: no key joins it without use_cache
        tokens = torch.cat([self.src_tok, self.out, torch.full((N, 1), self.tok.pseudo_id, device=dev)], 1)
        pos = torch.cat([src.pos, tgt_pos], 1)
        seg = torch.cat([torch.zeros_like(src.pos), torch.ones_like(tgt_pos)], 1)
        steps = torch.arange(1, t + 2, device=dev)[None].expand(N, -1)
        kind = torch.cat(
            [src.meta.kind, torch.full((N, t), ORIGINAL, device=dev), torch.full((N, 1), PSEUDO, device=dev)], 1
        )
        step = torch.cat([src.meta.step, steps], 1)
        valid = torch.cat([src.meta.valid, torch.ones(N, t + 1, dtype=torch.bool, device=dev)], 1)
        return m(tokens, pos, seg, kind, step, valid)[:, -1]

    def reorder(self, index):
        index = index.to(self.out.device)
        self.src_len, self.src_tok, self.out = self.src_len[index], self.src_tok[index], self.out[index]
        self.cache.reorder(index)
        self.rows_ = index.numel()
