"""Early-exit kernels in Triton: the compact index of active tokens, gather / scatter of their
rows, and the fused off-ramp.

    index = active_index(active)                  # (B, T) bool -> (N,) long
    h_act = gather_rows(h, index)                 # (M, C) -> (N, C)
    h = scatter_rows(h, index, h_act)             # (M, C), exited rows keep their values
    argmax, entropy, lse = offramp(h_act, weight, bias)

Same contracts and numbers as the early-exit section of kernels/reference.py. ELMER (Li et al.
2022, section 4.1) puts an off-ramp (a softmax classifier over the vocabulary) after every
decoder layer; with hard early exit (section 4.3) a token leaves at the first layer whose off-ramp
entropy is below a threshold, and the layers above run only on the tokens still active. These
kernels make that exit pay:

  * the index: one program streams the (B*T,) mask with an in-block prefix sum (tl.cumsum) and a
    running carry, writing each active position to its slot in an (M,) buffer and the count to a
    one-element device tensor. Nothing reaches the host until active_index reads the count, the
    one number a shape needs (once per layer; compact_index skips even that);
  * gather / scatter: row copies through the index, a block of rows per program, the index read
    once per row and the columns streamed 16 bytes a thread; their backward passes are each other (a scatter of the
    gradient into zeros, a gather of it), which
    is exact because an index from active_index names every row at most once;
  * the off-ramp: the (N, V) logits are computed tile by tile (tl.dot over C) and folded into an
    online max m, sum s = sum exp(z - m) and u = sum exp(z - m) (z - m), so that
    lse = m + log s and entropy = log s - u / s (the same as lse - t / s with t = sum exp(z - m) z,
    but without subtracting two numbers of the size of the logits). No (N, V) tensor is written:
    the vocabulary is split over `splits` programs per row block for parallelism, each writing
    (m, s, u, argmax) partials of shape (splits, N) that a second small kernel combines.
    Ties in argmax go to the smallest index, as in torch.

Launch configurations come from functions of (device type, shape), so that tools/aot_cases.py can ask
for the CUDA ones on CPU tensors. Runs on CUDA and, with TRITON_INTERPRET=1, on CPU tensors.
"""

import os

import torch
import triton
import triton.language as tl

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check_device(x, name):
    assert x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1", (
        f"{name}: CPU tensors need TRITON_INTERPRET=1 set before triton is imported"
    )


# -----------------------------------------------------------------------------
# the compact index: prefix sum over the active mask


@triton.jit
def _compact_kernel(ACTIVE, INDEX, COUNT, M, BLOCK: tl.constexpr):
    """One program: block by block, an exclusive prefix sum plus the running count gives every
    active position its slot in INDEX; the final count goes to COUNT[0]."""
    offs0 = tl.arange(0, BLOCK)
    carry = tl.sum(tl.zeros((BLOCK,), tl.int32), 0)
    for start in range(0, M, BLOCK):
        offs = start + offs0
        inside = offs < M
        a = (tl.load(ACTIVE + offs, mask=inside, other=0) != 0).to(tl.int32)
        slot = carry + tl.cumsum(a, 0) - a
        tl.store(INDEX + slot, offs.to(tl.int64), mask=inside & (a != 0))
        carry += tl.sum(a, 0)
    tl.store(COUNT, carry)


def _compact_config(device_type):
    """(BLOCK, num_warps). Small under the interpreter so that tests cross block boundaries."""
    return (16, 1) if device_type != "cuda" else (2048, 8)


def _compact_launch(flat, index, count, cfg):
    """flat: (M,) uint8; index: (M,) long; count: (1,) int32, written on the device."""
    assert flat.dim() == 1 and flat.dtype == torch.uint8 and flat.is_contiguous()
    assert index.shape == flat.shape and index.dtype == torch.long and count.dtype == torch.int32
    BLOCK, warps = cfg
    _compact_kernel[(1,)](flat, index, count, flat.numel(), BLOCK=BLOCK, num_warps=warps)


def compact_index(active):
    """(B, T) bool -> (index (M,) long, count (1,) int32 tensor), M = B*T, with no host sync:
    index[:count] are the flat positions of the active tokens in row-major order; the rest of
    index is unspecified."""
    _check_device(active, "compact_index")
    flat = active.reshape(-1).to(torch.bool).contiguous().view(torch.uint8)
    index = torch.empty(flat.numel(), dtype=torch.long, device=active.device)
    count = torch.zeros(1, dtype=torch.int32, device=active.device)
    if flat.numel():
        _compact_launch(flat, index, count, _compact_config(active.device.type))
    return index, count


def active_index(active):
    """(B, T) bool -> (N,) long, as reference.active_index; reads the count once (a host sync)."""
    index, count = compact_index(active)
    return index[: int(count.item())]


# -----------------------------------------------------------------------------
# gather / scatter of rows through an index


@triton.jit
def _gather_kernel(X, INDEX, OUT, N, C, sx, so, BR: tl.constexpr, BC: tl.constexpr):
    """OUT[i] = X[INDEX[i]] for BR rows, every column: the index is read once per row, and the
    columns stream in BC-wide chunks (16-byte accesses when C is a multiple of 8 elements)."""
    rows = (tl.program_id(0) * BR + tl.arange(0, BR)).to(tl.int64)
    row_in = rows < N
    src = tl.load(INDEX + rows, mask=row_in, other=0).to(tl.int64)
    for c0 in range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        inside = row_in[:, None] & (cols[None, :] < C)
        v = tl.load(X + src[:, None] * sx + cols[None, :], mask=inside)
        tl.store(OUT + rows[:, None] * so + cols[None, :], v, mask=inside)


@triton.jit
def _scatter_kernel(SRC, INDEX, OUT, N, C, ss, so, BR: tl.constexpr, BC: tl.constexpr, ZERO: tl.constexpr):
    """OUT[INDEX[i]] = SRC[i] (or 0 when ZERO) for BR rows, every column."""
    rows = (tl.program_id(0) * BR + tl.arange(0, BR)).to(tl.int64)
    row_in = rows < N
    dst = tl.load(INDEX + rows, mask=row_in, other=0).to(tl.int64)
    for c0 in range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        inside = row_in[:, None] & (cols[None, :] < C)
        if ZERO:
            v = tl.zeros((BR, BC), OUT.dtype.element_ty)
        else:
            v = tl.load(SRC + rows[:, None] * ss + cols[None, :], mask=inside)
        tl.store(OUT + dst[:, None] * so + cols[None, :], v, mask=inside)


def _copy_config(device_type, C):
    """(BLOCK_R, BLOCK_C, num_warps). On CUDA 16 rows a program and 256-column chunks (768 = 3 x
    256: no masked lanes at the model's widths), 4 warps: each thread moves 16-byte vectors; tiny
    under the interpreter, so that tests cross row and column blocks."""
    if device_type != "cuda":
        return 4, 32, 1
    return 16, min(256, triton.next_power_of_2(C)), 4


def _check_rows(x, index, name):
    assert x.dim() == 2 and x.stride(-1) == 1, f"{name}: rows must be 2-D and contiguous in the last dim"
    assert x.dtype in DTYPES, f"{name}: dtype {x.dtype} not in {DTYPES}"
    assert index.dim() == 1 and index.dtype in (torch.int32, torch.int64), f"{name}: index must be (N,) int"
    assert index.device == x.device, f"{name}: index on {index.device}, rows on {x.device}"


def _gather_launch(x, index, out, cfg):
    """out (N, C) = x (M, C)[index (N,)]."""
    _check_rows(x, index, "gather_rows")
    N, C = out.shape
    assert index.shape == (N,) and x.shape[1] == C and out.dtype == x.dtype and out.stride(-1) == 1
    if N == 0 or C == 0:
        return
    BR, BC, warps = cfg
    _gather_kernel[(triton.cdiv(N, BR),)](
        x, index, out, N, C, x.stride(0), out.stride(0), BR=BR, BC=BC, num_warps=warps
    )


def _scatter_launch(src, index, out, cfg):
    """out (M, C)[index (N,)] = src (N, C); src None writes zeros there instead."""
    _check_rows(out, index, "scatter_rows")
    N, C = index.shape[0], out.shape[1]
    zero = src is None
    if zero:
        src = out  # a pointer the kernel never reads
    else:
        assert src.shape == (N, C) and src.dtype == out.dtype and src.stride(-1) == 1
    if N == 0 or C == 0:
        return
    BR, BC, warps = cfg
    _scatter_kernel[(triton.cdiv(N, BR),)](
        src, index, out, N, C, src.stride(0), out.stride(0), BR=BR, BC=BC, ZERO=zero, num_warps=warps
    )


def _new(shape, like):
    """The uninitialised buffer of an output the kernels write whole (the tests fill it with NaN
    instead, so that an element left unwritten fails)."""
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _gather(x, index):
    N, C = index.shape[0], x.shape[1]
    out = _new((N, C), x)
    _gather_launch(x, index, out, _copy_config(x.device.type, C))
    return out


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.M = x.shape[0]
        return _gather(x, index)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        g = g.contiguous()
        # a scatter-add into zeros; a plain scatter, since the index names each row at most once
        gx = torch.zeros((ctx.M, g.shape[1]), dtype=g.dtype, device=g.device)
        _scatter_launch(g, index, gx, _copy_config(g.device.type, g.shape[1]))
        return gx, None


class _ScatterRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, base, index, rows):
        ctx.save_for_backward(index)
        out = base.clone(memory_format=torch.contiguous_format)
        _scatter_launch(rows, index, out, _copy_config(base.device.type, base.shape[1]))
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        g = g.contiguous()
        g_base = g_rows = None
        if ctx.needs_input_grad[0]:
            # the replaced rows did not reach the output: their gradient is zero
            g_base = g.clone()
            _scatter_launch(None, index, g_base, _copy_config(g.device.type, g.shape[1]))
        if ctx.needs_input_grad[2]:
            g_rows = _gather(g, index)
        return g_base, None, g_rows


def gather_rows(x, index):
    """x: (M, C) fp16 / bf16 / fp32; index: (N,) int of distinct rows (active_index's are)
    -> (N, C), row i = x[index[i]]. Backward: the gradient scattered into zeros."""
    _check_device(x, "gather_rows")
    if x.stride(-1) != 1:
        x = x.contiguous()
    return _GatherRows.apply(x, index)


def scatter_rows(base, index, rows):
    """base: (M, C); index: (N,) int, distinct; rows: (N, C) of base's dtype -> (M, C), a copy of
    base with row index[i] replaced by rows[i]. Backward: base gets the gradient with the replaced
    rows zeroed, rows its gather."""
    _check_device(base, "scatter_rows")
    assert rows.shape == (index.shape[0], base.shape[1]), (
        f"scatter_rows: rows {tuple(rows.shape)} must be (N, C) = {(index.shape[0], base.shape[1])}"
    )
    assert rows.dtype == base.dtype, f"scatter_rows: rows {rows.dtype} and base {base.dtype} differ"
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    return _ScatterRows.apply(base, index, rows)


# -----------------------------------------------------------------------------
# the fused off-ramp: argmax, entropy and log-sum-exp of softmax(h W^T + b), vocabulary tiled


@triton.jit
def _offramp_kernel(
    H,
    W,
    BIAS,
    PM,
    PS,
    PU,
    PA,
    N,
    V,
    C,
    sh,
    sw,
    v_per_split,
    HAS_BIAS: tl.constexpr,
    BN: tl.constexpr,
    BV: tl.constexpr,
    BK: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Program (row block, split): stream the split's vocabulary tiles, keep per row the running
    max m, s = sum exp(z - m), u = sum exp(z - m) (z - m) and the argmax; write them as partials."""
    pid_n, split = tl.program_id(0), tl.program_id(1)
    rows = pid_n * BN + tl.arange(0, BN)
    row_in = rows < N
    offs_k = tl.arange(0, BK)
    m = tl.full((BN,), float("-inf"), tl.float32)
    s = tl.zeros((BN,), tl.float32)
    u = tl.zeros((BN,), tl.float32)
    arg = tl.zeros((BN,), tl.int32)
    v_start = split * v_per_split
    v_end = tl.minimum(v_start + v_per_split, V)
    for v0 in range(v_start, v_end, BV):
        cols = v0 + tl.arange(0, BV)
        col_in = cols < v_end
        z = tl.zeros((BN, BV), tl.float32)
        for k0 in range(0, C, BK):
            ks = k0 + offs_k
            k_in = ks < C
            h = tl.load(
                H + rows[:, None].to(tl.int64) * sh + ks[None, :], mask=row_in[:, None] & k_in[None, :], other=0.0
            )
            w = tl.load(
                W + cols[:, None].to(tl.int64) * sw + ks[None, :], mask=col_in[:, None] & k_in[None, :], other=0.0
            )
            if UPCAST:  # exact: a product of two bf16 values fits a float32
                h, w = h.to(tl.float32), w.to(tl.float32)
            z = tl.dot(h, tl.trans(w), z, input_precision=PRECISION)  # (BN, BV)
        if HAS_BIAS:
            z += tl.load(BIAS + cols, mask=col_in, other=0.0).to(tl.float32)[None, :]
        z = tl.where(col_in[None, :], z, float("-inf"))
        tile_max = tl.max(z, 1)
        tile_arg = tl.argmax(z, 1, tie_break_left=True) + v0
        m_new = tl.maximum(m, tile_max)
        alpha = tl.exp(m - m_new)  # 0 on the first tile, where m = -inf
        p = tl.exp(z - m_new[:, None])  # 0 on the masked tail
        zc = tl.where(p > 0, z - m_new[:, None], 0.0)  # no 0 * -inf: the tail, a -inf bias
        # re-centre u from m to m_new: (z - m_new) = (z - m) + (m - m_new); nothing to move while s = 0
        u = alpha * (u + tl.where(s > 0, m - m_new, 0.0) * s) + tl.sum(p * zc, 1)
        s = alpha * s + tl.sum(p, 1)
        arg = tl.where(tile_max > m, tile_arg, arg)  # strict: an earlier tile keeps a tie
        m = m_new
    out = split * N + rows
    tl.store(PM + out, m, mask=row_in)
    tl.store(PS + out, s, mask=row_in)
    tl.store(PU + out, u, mask=row_in)
    tl.store(PA + out, arg, mask=row_in)


@triton.jit
def _offramp_combine_kernel(PM, PS, PU, PA, ARG, ENT, LSE, N, SPLITS, BN: tl.constexpr):
    """Merge the splits' partials of a row block: the same re-centring as above, split by split."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    row_in = rows < N
    m = tl.full((BN,), float("-inf"), tl.float32)
    for i in range(0, SPLITS):
        m = tl.maximum(m, tl.load(PM + i * N + rows, mask=row_in, other=0.0))
    s = tl.zeros((BN,), tl.float32)
    u = tl.zeros((BN,), tl.float32)
    best = tl.full((BN,), float("-inf"), tl.float32)
    arg = tl.zeros((BN,), tl.int32)
    for i in range(0, SPLITS):
        mi = tl.load(PM + i * N + rows, mask=row_in, other=0.0)
        si = tl.load(PS + i * N + rows, mask=row_in, other=0.0)
        ui = tl.load(PU + i * N + rows, mask=row_in, other=0.0)
        ai = tl.load(PA + i * N + rows, mask=row_in, other=0)
        w = tl.exp(mi - m)  # an empty split (mi = -inf, si = 0) weighs 0
        u += w * (ui + tl.where(si > 0, mi - m, 0.0) * si)
        s += w * si
        arg = tl.where(mi > best, ai, arg)  # strict: the lowest vocabulary range keeps a tie
        best = tl.maximum(best, mi)
    s = tl.where(row_in, s, 1.0)
    log_s = tl.log(s)
    tl.store(ARG + rows, arg.to(tl.int64), mask=row_in)
    tl.store(ENT + rows, log_s - u / s, mask=row_in)
    tl.store(LSE + rows, m + log_s, mask=row_in)


def _offramp_config(device_type, N, V, C, dtype):
    """(BLOCK_N, BLOCK_V, BLOCK_K, splits, num_warps, num_stages, upcast). On CUDA a matmul-like
    tile (not tuned on hardware yet) and as many vocabulary splits as it takes to give about two
    programs per H100 SM; under the interpreter small tiles and 2 splits, so that tests cross
    tile and split boundaries, and bf16 tiles upcast before tl.dot: the interpreter stores bf16
    as uint16 and would multiply the raw integers."""
    if device_type != "cuda":
        BN, BV, BK, warps, stages = 16, 64, 16, 1, 1
        return BN, BV, BK, min(2, triton.cdiv(V, BV)), warps, stages, dtype == torch.bfloat16
    BN, BV, BK, warps, stages = 64, 128, 64, 4, 3
    # N = 0 (an off-ramp of nobody: every token has left) must not divide by zero here, before
    # the launcher's early return
    splits = max(1, min(triton.cdiv(264, max(1, triton.cdiv(N, BN))), triton.cdiv(V, BV)))
    return BN, BV, BK, splits, warps, stages, False


def _offramp_launch(h, weight, bias, cfg):
    """h (N, C), weight (V, C) of one dtype, bias (V,) or None -> (argmax (N,) long, entropy (N,)
    float32, lse (N,) float32). Allocates only (N,) outputs and (splits, N) partials."""
    N, C = h.shape
    V = weight.shape[0]
    assert h.dim() == 2 and weight.dim() == 2 and weight.shape[1] == C, (
        f"offramp: h {tuple(h.shape)} and weight {tuple(weight.shape)} must be (N, C) and (V, C)"
    )
    assert h.dtype in DTYPES and weight.dtype == h.dtype, f"offramp: h {h.dtype}, weight {weight.dtype}"
    assert h.stride(-1) == 1 and weight.stride(-1) == 1, "offramp: h and weight must be contiguous in C"
    assert V >= 1 and C >= 1, "offramp: empty vocabulary or hidden size"
    assert bias is None or (bias.shape == (V,) and bias.is_contiguous()), "offramp: bias must be (V,)"
    BN, BV, BK, splits, warps, stages, upcast = cfg
    dev = h.device
    parts = [torch.empty((splits, N), dtype=torch.float32, device=dev) for _ in range(3)]
    part_arg = torch.empty((splits, N), dtype=torch.int32, device=dev)
    arg = torch.empty(N, dtype=torch.long, device=dev)
    ent = torch.empty(N, dtype=torch.float32, device=dev)
    lse = torch.empty(N, dtype=torch.float32, device=dev)
    if N == 0:
        return arg, ent, lse
    v_per_split = triton.cdiv(triton.cdiv(V, splits), BV) * BV
    n_blocks = triton.cdiv(N, BN)
    _offramp_kernel[(n_blocks, splits)](
        h,
        weight,
        h if bias is None else bias,
        *parts,
        part_arg,
        N,
        V,
        C,
        h.stride(0),
        weight.stride(0),
        v_per_split,
        HAS_BIAS=bias is not None,
        BN=BN,
        BV=BV,
        BK=BK,
        PRECISION="ieee" if h.dtype == torch.float32 else "tf32",
        UPCAST=upcast,
        num_warps=warps,
        num_stages=stages,
    )
    _offramp_combine_kernel[(n_blocks,)](
        *parts, part_arg, arg, ent, lse, N, splits, BN=BN, num_warps=4 if dev.type == "cuda" else 1
    )
    return arg, ent, lse


@torch.no_grad()
def offramp(h, weight, bias=None):
    """(argmax (N,) long, entropy (N,) float32 in nats, logsumexp (N,) float32) of
    softmax(h @ weight.T + bias), h (N, C), weight (V, C), bias (V,) or None; no gradient.

    When h and weight differ in dtype (a bf16 hidden state under autocast against the fp32 tied
    embedding) both are cast to the narrower one, as autocast's F.linear would; under CUDA autocast
    both are cast to its dtype, as F.linear would (an fp32 LayerNorm output against the fp32
    embedding would otherwise take the fp32 product off the tensor cores, and the finish of a
    batch-1 pass cost more than a layer, bench/RESULTS.md). Logits are accumulated in float32."""
    _check_device(h, "offramp")
    dt = h.dtype if h.element_size() <= weight.element_size() else weight.dtype
    if h.is_cuda and torch.is_autocast_enabled("cuda"):
        dt = torch.get_autocast_dtype("cuda")
    h, weight = h.to(dt).contiguous(), weight.to(dt).contiguous()
    bias = None if bias is None else bias.contiguous()
    return _offramp_launch(h, weight, bias, _offramp_config(h.device.type, h.shape[0], weight.shape[0], h.shape[1], dt))
