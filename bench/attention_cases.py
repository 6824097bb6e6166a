"""The layouts and the methods of bench/bench_attention.py: the (kind, step, pos, valid) metadata of
each layout, and each method as fn(q, k, v) -> out (ours, SDPA with the dense mask, FlexAttention).
The module docstring of bench_attention.py says what each is."""
import contextlib

import numpy as np
import torch
import torch.nn.functional as F

BUCKETS, MAX_DIST = 32, 128
LAYOUTS = {"pmlm": (32, 512, (64,)), "s2s-1k": (16, 1024, (64, 128)), "s2s-2k": (8, 2048, (64, 128))}


# -----------------------------------------------------------------------------
# layouts: (kind, step, pos, valid), each (B, L), L a multiple of 128

def pad_rows(rows, dev):
    L = -(-max(len(r[0]) for r in rows) // 128) * 128
    out = []
    for j in range(4):
        fill = False if j == 3 else 0
        out.append(torch.tensor(np.stack([np.pad(r[j], (0, L - len(r[j])), constant_values=fill) for r in rows])))
    return [t.to(dev) for t in out]


def pmlm_layout(B, n, dev, seed=0):
    from core.masking import blockwise_mask
    from kernels import CONTEXT, ORIGINAL, PSEUDO
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(B):
        maskable = np.ones(n, dtype=bool)
        maskable[[0, n // 2, n - 1]] = False  # [SOS], [EOS], [EOS]
        steps = blockwise_mask(maskable, rng)
        kind, step, pos = [CONTEXT] * n, [0] * n, list(range(n))
        for s, block in enumerate(steps, start=1):
            kind += [ORIGINAL] * len(block) + [PSEUDO] * len(block)
            step += [s] * (2 * len(block))
            pos += list(block) * 2
        rows.append((np.array(kind), np.array(step), np.array(pos), np.ones(len(kind), dtype=bool)))
    return pad_rows(rows, dev)


def seq2seq_layout(B, total, dev):
    from kernels import CONTEXT, ORIGINAL, PSEUDO
    n_tgt = total // 8
    n_src = total - 2 * n_tgt
    kind = np.array([CONTEXT] * n_src + [ORIGINAL] * n_tgt + [PSEUDO] * n_tgt)
    step = np.array([0] * n_src + list(range(n_tgt)) * 2)
    pos = np.concatenate([np.arange(n_src + n_tgt), np.arange(n_src, n_src + n_tgt)])
    return pad_rows([(kind, step, pos, np.ones(total, dtype=bool))] * B, dev)


def layout(name, dev, smoke):
    B, n, _ = LAYOUTS[name]
    if smoke:
        B, n = 2, 96 if name == "pmlm" else 128
    return pmlm_layout(B, n, dev) if name == "pmlm" else seq2seq_layout(B, n, dev)


# -----------------------------------------------------------------------------
# the methods: each returns fn(q, k, v) -> out

# the row that times the backward this kernel does not use by default (attention_plan.FUSED_DQ -> its label)
ALT_BACKWARD = {False: "ours kernel, dQ fused", True: "ours kernel, dQ kernel apart"}


def backward_name(label):
    """"dQ fused" of "ours kernel, dQ fused": the backward a row names."""
    return label.split(", ", 1)[1]


@contextlib.contextmanager
def plan_flag(name, on):
    """kernels/attention_plan.NAME set to `on` inside the block (None: as it is), restored after."""
    from kernels import attention_plan
    before = getattr(attention_plan, name)
    setattr(attention_plan, name, before if on is None else on)
    try:
        yield
    finally:
        setattr(attention_plan, name, before)


def fused_dq(on):
    """kernels.pseudo_attention's backward with dQ fused into the dK/dV kernel (True), as a kernel
    apart (False), or as it is set (None)."""
    return plan_flag("FUSED_DQ", on)


def table_16bit(on):
    """The relative bias table in q's dtype (True) or float32 (False), or as set (None)."""
    return plan_flag("TABLE_16BIT", on)


def make_ours(meta, table, prebuilt):
    from kernels import pseudo_attention as pa
    from kernels import rel_pos_bias
    kind, step, pos, valid = meta
    cache = {} if prebuilt else None

    def fn(q, k, v):
        return pa.pseudo_attention(q, k, v, kind, step, kind, step, valid, bias=rel_pos_bias(table, pos, pos, MAX_DIST),
                                   cache=cache)
    return fn


def dense_mask(meta, table, dtype):
    from kernels import reference, rel_pos_bias
    kind, step, pos, valid = meta
    see = reference.visible(kind, step, kind, step, valid)[:, None]  # (B, 1, L, L)
    bias = reference.dense_bias(rel_pos_bias(table.detach(), pos, pos, MAX_DIST))
    return bias.masked_fill(~see, float("-inf")).to(dtype)  # (B, H, L, L)


def make_sdpa_mask(meta, table, prebuilt, dtype):
    fixed = dense_mask(meta, table, dtype) if prebuilt else None
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=fixed if prebuilt else
                                                          dense_mask(meta, table, dtype))


def make_flex(meta, table):
    """(end to end, kernel only, block-mask build): compiled flex_attention whose score_mod adds the
    bias from a detached (H, 2M+1) table, so that nothing keeps it off its fused kernel."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from kernels import CONTEXT, ORIGINAL, PSEUDO, rel_pos_bias
    kind, step, pos, valid = meta
    flex = torch.compile(flex_attention, dynamic=False)
    by_distance = rel_pos_bias(table, pos, pos, MAX_DIST).by_distance.detach().contiguous()  # (H, 2M+1)

    def mask_mod(b, h, qi, ki):
        qk, qs, kk, ks = kind[b, qi], step[b, qi], kind[b, ki], step[b, ki]
        see = (kk == CONTEXT) | ((qk == ORIGINAL) & (kk == ORIGINAL) & (ks <= qs))
        see = see | ((qk == PSEUDO) & (((kk == ORIGINAL) & (ks < qs)) | ((kk == PSEUDO) & (ks == qs))))
        return see & valid[b, ki]

    def score_mod(score, b, h, qi, ki):
        d = (pos[b, ki] - pos[b, qi]).clamp(-MAX_DIST, MAX_DIST) + MAX_DIST
        return score + by_distance[h, d]

    B, L = kind.shape

    def build():
        return create_block_mask(mask_mod, B, None, L, L, device=kind.device, _compile=True)
    block_mask = build()
    return (lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=build()),
            lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=block_mask), build)


def flex_sanity(q, k, v, time_fn):
    """Flex on a causal mask against SDPA's causal kernel at the same shape: its usual share, or a
    sign that it is not running fused."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, _, L, _ = q.shape
    flex = torch.compile(flex_attention, dynamic=False)
    bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, L, L, device=q.device)
    f = time_fn(lambda: flex(q, k, v, block_mask=bm))
    s = time_fn(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    return f, s
