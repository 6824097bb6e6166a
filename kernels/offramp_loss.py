"""The off-ramp's training loss in Triton: cross-entropy of softmax(h W^T + b) without the (N, V)
logits, with the statistics ELMER's exit needs (argmax, entropy, per-row nll) from the same pass.

    loss, arg, ent, nll = offramp_cross_entropy(h, weight, bias, target, stats=True)

The gradient is computed in the forward, a chunk of token rows at a time (the fused
linear cross-entropy way): for rows n0:n1

    z  = h[n0:n1] @ W^T                 (chunk, V) in h's dtype, tensor cores, float32 accumulation
    dz = (softmax(z + b) - onehot) / n  one Triton program per row: two passes over the row,
                                        the first an online max / sum in float32 that also gives
                                        lse, argmax, entropy and the target's logit; dz is
                                        written over z
    dh[n0:n1] = dz @ W,   dW += dz^T h[n0:n1] (float32),   db += dz.sum(0)

so the three products are the PyTorch chain's three (logits, dh, dW) and no product is redone;
at most one (chunk, V) block of logits exists (default_chunk). The logits are rounded to h's dtype as the
chain's F.linear rounds them under autocast (float32 inputs stay float32). The backward only scales the saved dh, dW, db
by
the incoming gradient (a scalar). Where no gradient is wanted (evaluation), the loss comes from
the fused off-ramp kernel of kernels/early_exit.py, which writes no logits at all.

Why not the backward of before (the fused forward, then the logits recomputed per vocabulary
tile in the backward): four products for the chain's three, and an fp32 elementwise chain of
torch ops over every (N, tile) block: it ran slower than the chain (bench/RESULTS.md).
"""

import torch
import triton
import triton.language as tl

from .early_exit import _check_device, _offramp_config, _offramp_launch

CHUNK_ELEMENTS = 2**25  # a chunk's logits: 64 MB in bf16


def default_chunk(V):
    """Token rows per chunk: the largest power of two whose (rows, V) logits fit CHUNK_ELEMENTS,
    at least 2,048 (4,096 at V 8,000; 2,048 at V 50,000). Fewer chunks mean fewer launches, which
    at a small vocabulary decide the time (the call is host-bound), while a chunk's logits stay a
    small share of memory (the timings of both sizes: bench/RESULTS.md)."""
    rows = max(1, CHUNK_ELEMENTS // max(1, V))
    return max(2048, 1 << (rows.bit_length() - 1))


@triton.jit
def _logits(ZROW, BIAS, cols, col_in, HAS_BIAS: tl.constexpr):
    """A row's logits at cols in float32, the bias added; -inf past the vocabulary."""
    z = tl.load(ZROW + cols, mask=col_in, other=float("-inf")).to(tl.float32)
    if HAS_BIAS:
        z += tl.load(BIAS + cols, mask=col_in, other=0.0).to(tl.float32)
    return z


@triton.jit
def _ce_rows_kernel(
    Z, BIAS, TARGET, COUNT, DZ, ARG, ENT, NLL, n0, V, sz, sd, ignore_index, HAS_BIAS: tl.constexpr, BV: tl.constexpr
):
    """Row r of a chunk (token n0 + r): z = Z[r] (+ bias). Pass 1, an online max m, s = sum exp(z - m) and
    u = sum exp(z - m) (z - m) (as the fused off-ramp kernel: entropy = log s - u / s) and the
    argmax; pass 2 writes dz = (exp(z - lse) - onehot(target)) * valid / count over the row
    (DZ may be Z: a program reads and writes only its own row, pass 2 reads each block before
    writing it)."""
    r = tl.program_id(0).to(tl.int64)
    row = n0 + r  # the token: its target and statistics
    t = tl.load(TARGET + row)
    valid = t != ignore_index
    t_safe = tl.where(valid, t, 0)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    u = tl.zeros((), tl.float32)
    arg = tl.zeros((), tl.int32)
    for v0 in range(0, V, BV):
        cols = v0 + tl.arange(0, BV)
        col_in = cols < V
        z = _logits(Z + r * sz, BIAS, cols, col_in, HAS_BIAS)
        z_max = tl.max(z, 0)
        z_arg = tl.argmax(z, 0, tie_break_left=True) + v0
        m_new = tl.maximum(m, z_max)
        alpha = tl.exp(m - m_new)  # 0 on the first block, where m = -inf
        p = tl.exp(z - m_new)  # 0 on the masked tail
        zc = tl.where(p > 0, z - m_new, 0.0)  # no 0 * -inf
        u = alpha * (u + tl.where(s > 0, m - m_new, 0.0) * s) + tl.sum(p * zc, 0)
        s = alpha * s + tl.sum(p, 0)
        arg = tl.where(z_max > m, z_arg, arg)  # strict: an earlier block keeps a tie
        m = m_new
    log_s = tl.log(s)
    lse = m + log_s
    z_t = _logits(Z + r * sz, BIAS, t_safe, True, HAS_BIAS)
    tl.store(ARG + row, arg.to(tl.int64))
    tl.store(ENT + row, log_s - u / s)
    tl.store(NLL + row, tl.where(valid, lse - z_t, 0.0))
    scale = tl.where(valid, 1.0 / tl.maximum(tl.load(COUNT).to(tl.float32), 1.0), 0.0)
    for v0 in range(0, V, BV):
        cols = v0 + tl.arange(0, BV)
        col_in = cols < V
        z = _logits(Z + r * sz, BIAS, cols, col_in, HAS_BIAS)
        dz = (tl.exp(z - lse) - tl.where(cols == t_safe, 1.0, 0.0)) * scale
        tl.store(DZ + r * sd + cols, dz.to(DZ.dtype.element_ty), mask=col_in)


def _rows_config(device_type, V):
    """(BLOCK_V, num_warps): on CUDA 16-byte float32 loads over 4 warps; under the interpreter a
    small block, so that tests cross block boundaries."""
    if device_type != "cuda":
        return 64, 1
    return min(2048, triton.next_power_of_2(V)), 4


def _rows_launch(z, bias, target, count, arg, ent, nll, n0, ignore_index, cfg):
    """One program per row of the chunk z (c, V): the statistics of tokens n0.. into arg, ent, nll,
    and the row's gradient written over z."""
    BV, warps = cfg
    _ce_rows_kernel[(z.shape[0],)](
        z,
        z if bias is None else bias,
        target,
        count,
        z,
        arg,
        ent,
        nll,
        n0,
        z.shape[1],
        z.stride(0),
        z.stride(0),
        ignore_index,
        HAS_BIAS=bias is not None,
        BV=BV,
        num_warps=warps,
    )


_MM_F32, _ADDMM_F32 = [], []  # whether torch.mm / addmm(..., out_dtype=float32) run here: found out once


def _mm_f32(a, b):
    """a @ b with float32 output for 16-bit operands: the tensor cores' product with float32
    accumulation, not rounded to 16 bits (torch.mm's out_dtype, where this torch has it). On CPU
    (tests under the interpreter) in float32."""
    if a.dtype == torch.float32 or not a.is_cuda:
        return a.float() @ b.float()
    if _MM_F32 != [False]:
        try:
            out = torch.mm(a, b, out_dtype=torch.float32)
            _MM_F32[:] = [True]
            return out
        except (RuntimeError, TypeError):
            _MM_F32[:] = [False]
    return (a @ b).float()


def _acc_mm_f32(acc, a, b):
    """acc += a @ b, acc float32, a and b 16-bit: in cuBLAS's epilogue (beta = 1) where this torch
    offers addmm with out_dtype, else as a float32 product and an add."""
    if a.is_cuda and a.dtype != torch.float32 and _ADDMM_F32 != [False]:
        try:
            torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
            _ADDMM_F32[:] = [True]
            return
        except (RuntimeError, TypeError):
            _ADDMM_F32[:] = [False]
    acc.add_(_mm_f32(a, b))


def _loss_and_grads(h, weight, bias, target, ignore_index, chunk, want_w, want_b):
    """(loss, arg, ent, nll, dh, dw float32 or None, db float32 or None), the gradients those of
    the mean loss, chunk token rows at a time. No host sync: the mean's count stays on the device."""
    N, C = h.shape
    V = weight.shape[0]
    dev = h.device
    valid = target != ignore_index
    count = valid.sum()
    arg = torch.empty(N, dtype=torch.long, device=dev)
    ent = torch.empty(N, dtype=torch.float32, device=dev)
    nll = torch.empty(N, dtype=torch.float32, device=dev)
    dh = torch.empty_like(h)
    dw = db = None
    cfg = _rows_config(dev.type, V)
    for n0 in range(0, N, chunk):
        hc = h[n0 : n0 + chunk]
        z = hc @ weight.t()  # (c, V), float32 accumulation, rounded to h's dtype
        _rows_launch(z, bias, target, count, arg, ent, nll, n0, ignore_index, cfg)
        dz = z  # written over the logits
        torch.mm(dz, weight, out=dh[n0 : n0 + chunk])
        if want_w:
            if dw is None:
                dw = _mm_f32(dz.t(), hc)
            else:
                _acc_mm_f32(dw, dz.t(), hc)
        if want_b:
            part = dz.sum(0, dtype=torch.float32)
            db = part if db is None else db.add_(part)
        # released before the next chunk's product allocates its logits: else two chunks' logits
        # are alive at once (the peak memory of a multi-chunk call)
        del z, dz
    if N == 0:
        dw = torch.zeros(V, C, dtype=torch.float32, device=dev) if want_w else None
        db = torch.zeros(V, dtype=torch.float32, device=dev) if want_b else None
    loss = nll.sum() / count.clamp_min(1)
    return loss, arg, ent, nll, dh, dw, db


class _OfframpCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, target, ignore_index, chunk):
        want_w, want_b = ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2]
        loss, arg, ent, nll, dh, dw, db = _loss_and_grads(h, weight, bias, target, ignore_index, chunk, want_w, want_b)
        ctx.save_for_backward(dh, dw, db)
        ctx.dtypes = weight.dtype, None if bias is None else bias.dtype
        ctx.mark_non_differentiable(arg, ent, nll)
        ctx.set_materialize_grads(False)  # no zero tensors made for the statistics' gradients: 3 launches
        return loss, arg, ent, nll

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g, *_):
        # the saved gradients are scaled in place (no second (V, C) float32 tensor at the peak),
        # so a second backward through the same graph (retain_graph) would scale them twice
        assert not getattr(ctx, "used", False), "offramp_cross_entropy: its backward can run once per forward"
        ctx.used = True
        dh, dw, db = ctx.saved_tensors
        w_dtype, b_dtype = ctx.dtypes
        if g is None:  # the loss took no part in what was differentiated
            return None, None, None, None, None, None
        return (
            dh.mul_(g) if ctx.needs_input_grad[0] else None,  # a 0-dim g keeps dh's dtype
            None if dw is None else dw.mul_(g).to(w_dtype),
            None if db is None else db.mul_(g).to(b_dtype),
            None,
            None,
            None,
        )


def _loss_without_grad(h, weight, bias, target, ignore_index):
    """The loss and statistics from the fused off-ramp kernel (no logits written), and the
    target's logit from one (N, C) gather: loss_i = lse_i - z_i[y_i]."""
    valid = target != ignore_index
    safe = torch.where(valid, target, 0)
    arg, ent, lse = _offramp_launch(
        h, weight, bias, _offramp_config(h.device.type, h.shape[0], weight.shape[0], h.shape[1], h.dtype)
    )
    z_t = (h.float() * weight[safe].float()).sum(-1) + (0.0 if bias is None else bias[safe].float())
    nll = torch.where(valid, lse - z_t, 0.0)
    return nll.sum() / valid.sum().clamp_min(1), arg, ent, nll


def offramp_cross_entropy(h, weight, bias, target, ignore_index=-100, chunk=None, stats=False):
    """Mean cross-entropy of softmax(h @ weight.T + bias) against target (N,) long, over the rows
    whose target is not ignore_index, as F.cross_entropy(F.linear(h, weight, bias), target);
    gradients to h, weight and bias, computed in the forward chunk token rows at a time (the
    module docstring; default: default_chunk(V)). h and weight of different dtypes are cast to the narrower, as in
    offramp.
    stats: also return, from the same pass and without gradient, the argmax (N,), the entropy
    (N,) and each row's negative log-likelihood (N,) (0 where ignored). Under CUDA autocast both
    are cast to its dtype."""
    _check_device(h, "offramp_cross_entropy")
    assert target.shape == h.shape[:1] and not target.is_floating_point(), (
        "offramp_cross_entropy: target must be (N,) int"
    )
    assert h.dim() == 2 and weight.dim() == 2 and weight.shape[1] == h.shape[1], (
        f"offramp_cross_entropy: h {tuple(h.shape)} and weight {tuple(weight.shape)} must be (N, C) and (V, C)"
    )
    chunk = default_chunk(weight.shape[0]) if chunk is None else chunk
    assert chunk >= 1, f"offramp_cross_entropy: chunk {chunk} must be at least 1"
    dt = h.dtype if h.element_size() <= weight.element_size() else weight.dtype
    if h.is_cuda and torch.is_autocast_enabled("cuda"):  # as offramp: the products on the tensor cores
        dt = torch.get_autocast_dtype("cuda")
    h, weight = h.to(dt).contiguous(), weight.to(dt).contiguous()
    bias = None if bias is None else bias.contiguous()
    target = target.contiguous()
    wants_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (h, weight, bias))
    with torch.autocast(h.device.type, enabled=False):  # every product's dtype is chosen here
        if wants_grad:
            out = _OfframpCrossEntropy.apply(h, weight, bias, target, ignore_index, chunk)
        else:
            out = _loss_without_grad(h, weight, bias, target, ignore_index)
    return out if stats else out[0]
