"""Attention from per-token metadata, and the switch that picks a Triton kernel or the reference.

    from kernels import attention, rel_pos_bias, MaskMeta, CONTEXT, ORIGINAL, PSEUDO

`backend='auto'` runs the Triton kernel on CUDA tensors and the PyTorch reference elsewhere.
`use_backend('reference' | 'triton' | 'sdpa' | 'flex' | 'sdpa-nomask')` (a context manager) or the
environment variable ATTENTION_BACKEND forces one for every 'auto' call, which is how tests,
benchmarks and train.py --attention pick a side. The last three are PyTorch's own attention
(kernels/baselines.py); they choose the attention only, the early-exit operations stay 'auto'.
How the Triton attention is launched (kernels/attention_plan.Tuning: blocks, dQ fused or apart, the
bias table's dtype) is `attention(..., tuning=)`, passed by the caller (core/model.py's Attention
carries its own); None: the default tuning.
`backend='triton'` on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported.
"""

import contextlib
import os
import sys

import torch

from .reference import CONTEXT, ORIGINAL, PSEUDO, MaskMeta, RelPosBias, rel_pos_bias, t5_bucket, visible
from . import baselines, reference

_BACKENDS = ("auto", "reference", "triton") + baselines.BASELINES
_forced = os.environ.get("ATTENTION_BACKEND", "auto")


@contextlib.contextmanager
def use_backend(name):
    """Force `name` for every attention(..., backend='auto') call inside the block."""
    global _forced
    if name not in _BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; pick one of {_BACKENDS}")
    before, _forced = _forced, name
    try:
        yield
    finally:
        _forced = before


_import_error = []  # the ImportError of the Triton modules, once met
_warned = []  # the warning about it is printed once per process


def triton_available():
    try:
        from . import early_exit, pseudo_attention  # noqa: F401  (import triton)
    except Exception as e:  # ImportError, or a Triton whose API the kernels do not fit
        if not _import_error:
            _import_error.append(e)
        return False
    return True


def resolve_backend(backend, device, attention=False):
    """The backend an op runs: 'triton' or 'reference', or for attention one of baselines.BASELINES."""
    if backend not in _BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; pick one of {_BACKENDS}")
    if backend == "auto":
        backend = _forced
    if backend in baselines.BASELINES and not attention:
        backend = "auto"
    if not attention and torch.compiler.is_compiling():
        # traced by torch.compile, the early-exit operations are their PyTorch references, which the
        # compiler fuses itself (their Triton launchers are not custom operators)
        return "reference"
    if backend == "auto":
        backend = "triton" if device.type == "cuda" and triton_available() else "reference"
        if device.type == "cuda" and backend == "reference" and _import_error and not _warned:
            # on a GPU the reference is many times slower: a run must not fall back without a word
            _warned.append(True)
            print(
                f"warning: the Triton kernels cannot be imported ({_import_error[0]}); attention and early "
                f"exit run the PyTorch reference on this GPU",
                file=sys.stderr,
                flush=True,
            )
    return backend


def attention(q, k, v, meta, bias=None, backend="auto", scale=None, cache=None, tuning=None):
    """Multi-head attention whose mask is derived on the fly from per-token metadata.

    q: (B, H, Lq, D); k, v: (B, H, Lk, D).
    meta: a MaskMeta, the per-token metadata:
      q_kind, q_step: (B, Lq) int; k_kind, k_step: (B, Lk) int. kind is CONTEXT=0, ORIGINAL=1 or
        PSEUDO=2, step the factorization step. The rule (kernels/reference.py): every query sees
        CONTEXT keys; an ORIGINAL query at step s also sees ORIGINAL keys of step <= s; a PSEUDO
        query at step s also sees ORIGINAL keys of step < s and PSEUDO keys of step == s.
      k_valid: (B, Lk) bool, False for padding keys, which are never seen (None: every key).
      q_seq, k_seq: (B, Lq), (B, Lk) int sequence ids for packed batches: a query sees only keys of
        its own sequence. Give both or neither.
    bias: None, an additive float tensor broadcastable to (B, H, Lq, Lk), or a RelPosBias (built
        by rel_pos_bias from a (H, buckets) table and position ids) that kernels compute in place.
    scale: softmax scale, default D ** -0.5.
    cache: optional dict that the caller keeps for as long as this metadata is unchanged (every layer
        of one forward, and its backward): the Triton backend builds its tile map once into it
        instead of once per call. The reference ignores it.
    tuning: how the Triton backend launches its kernels (kernels/attention_plan.Tuning; None: the
        default). The other backends ignore it.
    Returns (B, H, Lq, D) in q's dtype. A query that sees no key at all gets 0, never NaN.

    Common layouts: bidirectional = all CONTEXT; causal = all ORIGINAL with step = position;
    prefix-LM = source CONTEXT, target ORIGINAL with step = target index; cross-attention = all
    CONTEXT with k_valid for the padding of the memory.
    """
    B, H, Lq, D = q.shape
    if k.shape != v.shape or k.shape[:2] != (B, H) or k.shape[3] != D:
        raise ValueError(f"attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not match")
    Lk = k.shape[2]
    if meta.q_kind.shape != (B, Lq) or meta.q_step.shape != (B, Lq):
        raise ValueError(f"attention: query metadata must be (B, Lq) = {(B, Lq)}")
    if meta.k_kind.shape != (B, Lk) or meta.k_step.shape != (B, Lk):
        raise ValueError(f"attention: key metadata must be (B, Lk) = {(B, Lk)}")
    if (meta.q_seq is None) != (meta.k_seq is None):
        raise ValueError("attention: give both q_seq and k_seq, or neither")
    which = resolve_backend(backend, q.device, attention=True)
    if which == "triton":
        from .attention_plan import TUNING

        tuning = tuning or TUNING
        if torch.compiler.is_compiling():  # through custom operators: no graph break
            from .attention_op import attention as traced

            return traced(q, k, v, meta, bias, scale, cache, tuning)
        from .pseudo_attention import pseudo_attention

        return pseudo_attention(q, k, v, meta, bias, scale, cache, tuning)
    if which in baselines.BASELINES:
        return baselines.attention(which, q, k, v, meta, bias, scale, cache=cache)
    return reference.attention(q, k, v, meta, bias, scale)


# -----------------------------------------------------------------------------
# early exit (ELMER): gather the active tokens of a layer, scatter them back, the fused off-ramp.
# The references in kernels/reference.py; the Triton kernels (kernels/early_exit.py) take over
# through the same switch.


def active_index(active, backend="auto"):
    """(B, T) bool -> (N,) long flat indices of the True entries, row-major. The Triton path
    builds it with a prefix sum on the device and reads only the count (one sync per call)."""
    if resolve_backend(backend, active.device) == "triton":
        from .early_exit import active_index as kernel

        return kernel(active)
    return reference.active_index(active)


def gather_rows(x, index, backend="auto"):
    """x: (M, C), index: (N,) long, distinct -> (N, C) = x[index]; autograd-aware."""
    if resolve_backend(backend, x.device) == "triton":
        from .early_exit import gather_rows as kernel

        return kernel(x, index)
    return reference.gather_rows(x, index)


def scatter_rows(base, index, rows, backend="auto"):
    """A copy of base (M, C) with rows index (N,) replaced by rows (N, C); autograd-aware."""
    if resolve_backend(backend, base.device) == "triton":
        from .early_exit import scatter_rows as kernel

        return kernel(base, index, rows)
    return reference.scatter_rows(base, index, rows)


def offramp(h, weight, bias=None, backend="auto"):
    """(argmax, entropy, logsumexp) of softmax(h @ weight.T + bias), each (N,); no gradient.
    The Triton path tiles the vocabulary and never writes the (N, V) logits."""
    if resolve_backend(backend, h.device) == "triton":
        from .early_exit import offramp as kernel

        return kernel(h, weight, bias)
    return reference.offramp(h, weight, bias)


def offramp_cross_entropy(h, weight, bias, target, ignore_index=-100, backend="auto", stats=False):
    """Mean cross-entropy of the off-ramp h @ weight.T + bias against target (N,), gradients to
    h, weight and bias. The Triton path never materialises the (N, V) logits. stats: also return
    (argmax, entropy, per-row nll), each (N,), from the same pass, without gradient."""
    if resolve_backend(backend, h.device) == "triton":
        from .offramp_loss import offramp_cross_entropy as kernel

        return kernel(h, weight, bias, target, ignore_index, stats=stats)
    return reference.offramp_cross_entropy(h, weight, bias, target, ignore_index, stats=stats)


__all__ = [
    "attention",
    "MaskMeta",
    "gather_rows",
    "scatter_rows",
    "offramp",
    "active_index",
    "use_backend",
    "resolve_backend",
    "rel_pos_bias",
    "RelPosBias",
    "t5_bucket",
    "visible",
    "CONTEXT",
    "ORIGINAL",
    "PSEUDO",
]
