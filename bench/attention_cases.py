"""The layouts and the methods of bench/bench_attention.py: the (kind, step, pos, valid) metadata of
each layout, and each method as fn(q, k, v) -> out (ours, SDPA with the dense mask, FlexAttention).
The module docstring of bench_attention.py says what each is."""

import json
import os
import sys

if __name__ == "__main__" and not __package__:  # a module the benchmarks import
    sys.exit(
        "error: bench/attention_cases.py is a module the benchmarks import, with nothing to run: "
        "run one of them, as python -m bench.bench_step (--help)"
    )

import numpy as np
import torch
import torch.nn.functional as F

from bench.attention_harness import Method

BUCKETS, MAX_DIST = 32, 128
LAYOUTS = {"pmlm": (32, 512, (64,)), "s2s-1k": (16, 1024, (64, 128)), "s2s-2k": (8, 2048, (64, 128))}


# -----------------------------------------------------------------------------
# layouts: (kind, step, pos, valid), each (B, L), L the longest row's length


def pad_rows(rows, dev):
    """The rows padded to the longest with invalid keys, as core/pmlm.collate pads a step's micro-batch:
    the harness times the rows a step runs (rounding a PMLM layout's ~670 rows up to 768 would charge
    the dense methods ~1.3x the pairs the step gives them)."""
    L = max(len(r[0]) for r in rows)
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
# the methods (bench/attention_harness.Method): setup once a step, a call per layer

# the row that times the backward a tuning does not use (attention_plan.Tuning.fused_dq -> its label)
ALT_BACKWARD = {False: "ours, dQ fused", True: "ours, dQ kernel apart"}


def backward_name(label):
    """ "dQ fused" of "ours, dQ fused": the backward a row names."""
    return label.split(", ", 1)[1]


# -----------------------------------------------------------------------------
# the block sweep's candidates, and the file that carries its winners from one run to the next


def candidates(D):
    """[(Config, dQ fused)] that --sweep times at head dim D, the plan's own first. At D 64 the
    backward varies with its structure: dQ apart, two warpgroups on 128 keys x 32 queries (one
    program an SM), the 8-warp 64 x 64 tiles of before (whose second warpgroup repeats S^T and dP^T),
    and the dK/dV loop a stage shallower. At D 128 (one backward structure: None) the dK/dV kernel
    keeps a copy in flight at 3 stages, and the q-major kernels may take 32 keys a block, where the
    dQ kernel of the seq2seq layout does not spill (tests/test_compile.py KNOWN_SPILLS). Each dK/dV
    kernel compiles for sm_90a (python -m tools.aot --config: registers, spills, wgmma per
    iteration). The last rows vary the forward instead."""
    from kernels.attention_plan import CUDA_CONFIGS, TUNING, Config

    base, fused = CUDA_CONFIGS[D], TUNING.fused_dq
    if D == 64:
        rows = [
            (base, fused),
            (base, False),
            (base._replace(BMK=32, BNK=128, kv_warps=8), True),
            (base._replace(BMK=64, BNK=64, kv_warps=8), True),
            (base._replace(kv_stages=3), fused),
            (base._replace(fwd_stages=4), fused),
            (Config(128, 128, 8, 3, 64, 64, 8, 3, 8, 3), fused),
        ]
    else:
        rows = [
            (base, None),
            (base._replace(kv_stages=3), None),
            (base._replace(fwd_stages=3), None),  # the forward with K and V two tiles ahead
            (base._replace(BN=32), None),  # the forward's and dQ's blocks of 32 keys: dQ without a spill
        ]
    out = []
    for row in rows:
        if row not in out:
            out.append(row)
    return out


def save_configs(path, tuning, dims=(64, 128)):
    """The configurations of `tuning` (a kernels/attention_plan.Tuning) for head dims `dims`, and its
    backward structure, to `path` as JSON: {"64": [BM, BN, ...], "128": [...], "fused_dq": bool}."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(
            dict({str(D): list(tuning.config(torch.device("cuda"), D)) for D in dims}, fused_dq=tuning.fused_dq), f
        )


def read_configs(path):
    """The Tuning a save_configs file says (the default's where it says nothing), refused in one line
    (SystemExit) when it is not such a file."""
    from kernels import attention_plan

    tuning = attention_plan.TUNING
    try:
        with open(path) as f:
            saved = json.load(f)
        for k, v in saved.items():
            if k != "fused_dq":
                tuning = tuning.with_config(int(k), attention_plan.Config(*v))
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise SystemExit(f"{path}: not a file of swept configurations ({type(e).__name__}: {e})") from None
    if saved.get("fused_dq") is not None:
        tuning = tuning._replace(fused_dq=bool(saved["fused_dq"]))
    return tuning


class Built:
    """What a method's setup made for one step: `bias` and `cache`, what the layers read (the bias,
    the tile map or the mask; those that collect the layers' gradients are leaves), and `links`,
    (built, leaf) pairs, which the step's backward goes through once, after its layers, last first."""

    def __init__(self):
        self.links, self.cache = [], {}

    def leaf(self, built):
        """A leaf standing for `built` in the layers (its gradient summed over them), linked back."""
        if not built.requires_grad:
            return built
        leaf = built.detach().requires_grad_()
        self.links.append((built, leaf))
        return leaf

    def reduce(self):
        """The step's one way back from the layers' summed gradients to the table."""
        for built, leaf in reversed(self.links):
            if leaf.grad is not None:
                built.backward(leaf.grad, retain_graph=True)


def step_bias(table, pos, frozen, biased):
    """A step's Built with its RelPosBias: the (H, 2M+1) row per distance built from the table once,
    a leaf for the layers (none when not `biased`; from a table without gradient when `frozen`)."""
    from kernels import RelPosBias, rel_pos_bias

    st = Built()
    st.bias = None
    if biased:
        rel = rel_pos_bias(table.detach() if frozen else table, pos, pos, MAX_DIST)
        st.bias = RelPosBias(st.leaf(rel.by_distance), pos, pos, MAX_DIST)
    return st


def ours_method(label, meta, frozen=False, bias=True, tuning=None):
    """kernels/pseudo_attention.py as the model runs it: the codes, tile map and bias pieces built
    once a step into the metadata's cache, every layer's call reading them. frozen: the table
    requires no gradient (the kernel then skips the bias gradient: the work of a constant bias);
    bias False: no relative bias at all (a diagnostic). tuning: how the kernels are launched
    (kernels/attention_plan.Tuning; None: the default)."""
    from kernels import MaskMeta, attention_plan
    from kernels import pseudo_attention as pa

    kind, step, pos, valid = meta
    mask = MaskMeta(kind, step, kind, step, valid)
    tuning = tuning or attention_plan.TUNING

    def setup(table, q, k, v):
        st = step_bias(table, pos, frozen, bias)
        attention_plan.prepare(q, k, v, mask, bias=st.bias, cache=st.cache, tuning=tuning)
        return st

    def call(st, q, k, v):
        return pa.pseudo_attention(q, k, v, mask, bias=st.bias, cache=st.cache, tuning=tuning)

    return Method(label, setup, call, Built.reduce, bias_grad=bias and not frozen)


def baseline_method(label, name, meta, frozen=False):
    """kernels/baselines.py's NAME (what train.py --attention NAME runs): its per-step entries (SDPA's
    dense bias + mask, Flex's block mask) built once a step into the cache, the dense mask a leaf
    whose gradient the layers sum (a step gathers it back into the table once). frozen: the table
    requires no gradient."""
    from kernels import MaskMeta, baselines

    kind, step, pos, valid = meta
    mask = MaskMeta(kind, step, kind, step, valid)
    biased = name != "sdpa-nomask"

    def setup(table, q, k, v):
        st = step_bias(table, pos, frozen, biased)
        baselines.prepare(name, mask, st.bias, q.dtype, st.cache, leaf=st.leaf)
        return st

    def call(st, q, k, v):
        return baselines.attention(name, q, k, v, mask, bias=st.bias, cache=st.cache)

    return Method(label, setup, call, Built.reduce if biased else None, bias_grad=biased and not frozen)


def flex_blocks(st):
    """The share of (query block, key block) pairs Flex's block mask computes, or None."""
    bm = st.cache.get("flex-block-mask")
    return None if bm is None else 1 - bm.sparsity() / 100


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
