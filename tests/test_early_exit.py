"""The early-exit Triton kernels against kernels/reference.py: the compact index, gather / scatter
of rows (output and every gradient, exact), the fused off-ramp (argmax with torch's tie rule,
entropy, log-sum-exp) and that it never allocates the (N, V) logits. Runs under TRITON_INTERPRET=1
on CPU (set in conftest.py)."""

import pytest
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import kernels
from kernels import reference

ee = pytest.importorskip("kernels.early_exit")
ol = pytest.importorskip("kernels.offramp_loss")

from conftest import DEVICE  # noqa: E402

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# off-ramp (entropy, lse) absolute tolerances: both sides multiply the same low-precision inputs
# exactly in float32 and differ only in summation order; fp32 runs IEEE dots on both sides
OFFRAMP_TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-4, torch.float16: 5e-4}


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    """Kernel outputs start as NaN, so an element the kernels forget to write fails."""
    monkeypatch.setattr(
        ee, "_new", lambda shape, like: torch.full(shape, float("nan"), dtype=like.dtype, device=like.device)
    )


def report(name, got, want):
    diff = (got.float() - want.float()).abs()
    return (
        f"{name}: max abs diff {diff.max().item() if diff.numel() else 0:.3g}, "
        f"mean {diff.mean().item() if diff.numel() else 0:.3g}"
    )


def assert_exact(name, got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{name}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    )
    assert torch.equal(got, want), report(name, got, want)


# -----------------------------------------------------------------------------
# the compact index


@pytest.mark.parametrize("shape", [(1, 1), (3, 37), (2, 64)])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_active_index(shape, p):
    g = torch.Generator().manual_seed(1)
    active = (torch.rand(shape, generator=g) < p).to(DEVICE)
    assert_exact("index", ee.active_index(active), reference.active_index(active))
    index, count = ee.compact_index(active)
    assert count.shape == (1,) and int(count) == int(active.sum())


# -----------------------------------------------------------------------------
# gather / scatter: output and every gradient, bit-exact in every dtype

# (M, N, C, how): the index is active_index of a random mask ("mask") or a random subset in a
# random order ("perm"), which the kernels must handle too
COPY_CASES = [
    (1, 1, 48, "perm"),
    (1, 0, 48, "perm"),
    (37, 0, 48, "perm"),
    (37, 37, 48, "perm"),
    (130, 0, 64, "mask"),
    (130, 53, 48, "mask"),
    (70, 29, 100, "perm"),
]


def make_index(M, N, how, g):
    if how == "perm":
        return torch.randperm(M, generator=g)[:N].to(DEVICE)
    active = torch.zeros(M, dtype=torch.bool)
    active[torch.randperm(M, generator=g)[:N]] = True
    return reference.active_index(active.view(2, -1) if M % 2 == 0 else active[None]).to(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, N, C, how", COPY_CASES)
def test_gather_rows(dtype, M, N, C, how):
    g = torch.Generator().manual_seed(M * 1000 + N)
    index = make_index(M, N, how, g)
    x = torch.randn(M, C, generator=g).to(DEVICE, dtype)
    gy = torch.randn(N, C, generator=g).to(DEVICE, dtype)
    outs = []
    for fn in (ee.gather_rows, reference.gather_rows):
        xx = x.clone().requires_grad_()
        y = fn(xx, index)
        y.backward(gy)
        outs.append((y.detach(), xx.grad))
    (y, gx), (y_ref, gx_ref) = outs
    assert_exact("gather out", y, y_ref)
    assert_exact("gather grad x", gx, gx_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M, N, C, how", COPY_CASES)
def test_scatter_rows(dtype, M, N, C, how):
    g = torch.Generator().manual_seed(M * 1000 + N + 7)
    index = make_index(M, N, how, g)
    base = torch.randn(M, C, generator=g).to(DEVICE, dtype)
    rows = torch.randn(N, C, generator=g).to(DEVICE, dtype)
    gy = torch.randn(M, C, generator=g).to(DEVICE, dtype)
    outs = []
    for fn in (ee.scatter_rows, reference.scatter_rows):
        b, r = base.clone().requires_grad_(), rows.clone().requires_grad_()
        y = fn(b, index, r)
        y.backward(gy)
        outs.append((y.detach(), b.grad, r.grad))
    for name, got, want in zip(("out", "grad base", "grad rows"), *outs):
        assert_exact(f"scatter {name}", got, want)
    assert_exact("base untouched", base, base)  # the forward wrote into a copy


def test_scatter_then_gather_roundtrip_keeps_exited_rows():
    """A layer on the active rows only: exited rows come out bit-identical, with the gradient of
    the layer's input flowing only through the active ones."""
    g = torch.Generator().manual_seed(3)
    active = (torch.rand(4, 9, generator=g) < 0.5).to(DEVICE)
    h = torch.randn(36, 16, generator=g).to(DEVICE).requires_grad_()
    index = ee.active_index(active)
    out = ee.scatter_rows(h, index, ee.gather_rows(h, index) * 2)
    assert torch.equal(out[~active.view(-1)], h[~active.view(-1)])
    assert torch.equal(out[active.view(-1)], 2 * h[active.view(-1)])
    out.sum().backward()
    assert torch.equal(h.grad, torch.where(active.view(-1, 1), 2.0, 1.0).expand(36, 16).to(h.grad))


def test_dispatch(monkeypatch):
    """use_backend picks the kernel or the reference for every early-exit entry point."""
    for name in ("active_index", "gather_rows", "scatter_rows", "offramp", "offramp_cross_entropy"):
        monkeypatch.setattr(ol if name == "offramp_cross_entropy" else ee, name, lambda *a, **k: "kernel")
    x, index = torch.randn(4, 8), torch.tensor([1, 3])
    calls = {
        "active_index": (x > 0,),
        "gather_rows": (x, index),
        "scatter_rows": (x, index, x[:2]),
        "offramp": (x, torch.randn(5, 8)),
        "offramp_cross_entropy": (x, torch.randn(5, 8), None, torch.zeros(4, dtype=torch.long)),
    }
    for name, args in calls.items():
        with kernels.use_backend("triton"):
            assert getattr(kernels, name)(*args) == "kernel", name
        with kernels.use_backend("reference"):
            assert not isinstance(getattr(kernels, name)(*args), str), name


# -----------------------------------------------------------------------------
# the fused off-ramp


def check_offramp(h, w, b, tol):
    arg, ent, lse = ee.offramp(h, w, b)
    arg_r, ent_r, lse_r = reference.offramp(h, w, b)
    assert arg.dtype == torch.long and ent.dtype == lse.dtype == torch.float32
    assert (lse - lse_r).abs().max() <= tol, report("lse", lse, lse_r)
    assert (ent - ent_r).abs().max() <= tol, report("entropy", ent, ent_r)
    # the argmax must be a maximum; where the top two are further apart than the tolerance, the same
    z = torch.nn.functional.linear(h.float(), w.float(), None if b is None else b.float())
    top = torch.cat([z, torch.full_like(z[:, :1], float("-inf"))], 1).topk(2, -1).values  # V = 1 has no second
    assert (z.gather(1, arg[:, None])[:, 0] >= top[:, 0] - tol).all(), "argmax is not a maximum"
    clear = top[:, 0] - top[:, 1] > tol
    assert torch.equal(arg[clear], arg_r[clear]), f"argmax differs on {(arg != arg_r).sum()} rows"
    return z


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("C, with_bias", [(32, True), (64, False)])
def test_offramp(dtype, C, with_bias):
    g = torch.Generator().manual_seed(C)
    N, V = 37, 1000  # neither a multiple of the tiles
    h = (torch.randn(N, C, generator=g) * 0.5).to(DEVICE, dtype)
    w = torch.randn(V, C, generator=g).to(DEVICE, dtype)
    b = torch.randn(V, generator=g).to(DEVICE) if with_bias else None
    check_offramp(h, w, b, OFFRAMP_TOL[dtype])


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_offramp_ties_take_the_smallest_index(dtype):
    """Small integers make the logits exact in any order, and full of ties across tiles and
    vocabulary splits: the argmax must be torch's, the first maximum."""
    g = torch.Generator().manual_seed(5)
    N, V, C = 40, 300, 8
    h = torch.randint(-1, 2, (N, C), generator=g).to(DEVICE, dtype)
    w = torch.randint(-1, 2, (V, C), generator=g).to(DEVICE, dtype)
    b = torch.randint(-1, 2, (V,), generator=g).float().to(DEVICE)
    z = check_offramp(h, w, b, 1e-4)
    n_max = (z == z.max(-1, keepdim=True).values).sum(-1)
    assert (n_max > 1).sum() >= N // 4, "the data should be full of ties"
    assert torch.equal(ee.offramp(h, w, b)[0], z.argmax(-1))


def test_offramp_small_and_empty():
    g = torch.Generator().manual_seed(6)
    h, w = torch.randn(5, 24, generator=g).to(DEVICE), torch.randn(10, 24, generator=g).to(DEVICE)
    check_offramp(h, w, None, 1e-4)  # V smaller than one tile: one split
    check_offramp(h[:1], w[:1], None, 1e-4)  # V = 1: entropy 0
    arg, ent, lse = ee.offramp(h[:0], w)
    assert arg.shape == ent.shape == lse.shape == (0,)


def test_offramp_banned_tokens():
    """A -inf bias bans a token (padding, [MASK]): it gets probability 0 and adds nothing, no NaN."""
    g = torch.Generator().manual_seed(11)
    h, w = torch.randn(20, 16, generator=g).to(DEVICE), torch.randn(150, 16, generator=g).to(DEVICE)
    b = torch.zeros(150, device=DEVICE)
    b[[0, 5, 64, 149]] = float("-inf")  # across tiles and the last column
    arg, ent, lse = ee.offramp(h, w, b)
    assert torch.isfinite(ent).all() and torch.isfinite(lse).all()
    check_offramp(h, w, b, 1e-4)
    want = reference.offramp(h[:, :], w[b == 0], None)
    assert (ent - want[1]).abs().max() <= 1e-4, report("entropy without the banned rows", ent, want[1])


def test_offramp_mixed_dtypes_cast_to_the_narrower():
    """bf16 hidden states under autocast against an fp32 tied embedding: computed in bf16."""
    g = torch.Generator().manual_seed(7)
    h = torch.randn(9, 32, generator=g).to(DEVICE, torch.bfloat16)
    w = torch.randn(200, 32, generator=g).to(DEVICE)
    got = ee.offramp(h, w)
    want = reference.offramp(h, w.to(torch.bfloat16))
    assert (got[2] - want[2]).abs().max() <= 5e-4, report("lse", got[2], want[2])


class AllocationTrace(TorchDispatchMode):
    """The largest tensor (in bytes) any torch op returns inside the block. The interpreter's own
    copies of the kernel's arguments show up too, as byte storages."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


def test_offramp_never_allocates_the_logits():
    g = torch.Generator().manual_seed(8)
    N, V, C = 128, 1000, 16
    h, w = torch.randn(N, C, generator=g).to(DEVICE), torch.randn(V, C, generator=g).to(DEVICE)
    with AllocationTrace() as ref_trace:
        reference.offramp(h, w)
    assert ref_trace.largest >= N * V * 4  # the trace sees the reference's (N, V) float32 logits
    with AllocationTrace() as trace:
        ee.offramp(h, w)
    # nothing larger than the weight itself: (N,) outputs and (splits, N) partials
    assert trace.largest <= V * C * 4, f"largest tensor {trace.largest} bytes, (N, V) logits {N * V * 4}"


# -----------------------------------------------------------------------------
# ahead-of-time cases: the launchers alone, with CUDA configurations, on CPU tensors


def test_aot_cases_launch_with_cuda_configs(monkeypatch):
    launches = []
    for name in ("_compact_kernel", "_gather_kernel", "_scatter_kernel", "_offramp_kernel", "_offramp_combine_kernel"):
        monkeypatch.setattr(getattr(ee, name), "run", lambda *a, _n=name, **k: launches.append((_n, k)))
    names = []
    from tools.aot_cases import early_exit

    for name, thunk in early_exit():
        before = len(launches)
        thunk()
        assert len(launches) > before, f"{name} launched nothing"
        names.append(name)
    assert len(set(names)) == len(names)
    kinds = {n for n, _ in launches}
    assert kinds == {
        "_compact_kernel",
        "_gather_kernel",
        "_scatter_kernel",
        "_offramp_kernel",
        "_offramp_combine_kernel",
    }
    ramp = [k for n, k in launches if n == "_offramp_kernel"][0]
    assert ramp["UPCAST"] is False
    assert (ramp["BN"], ramp["BV"], ramp["BK"], ramp["num_warps"]) == ee._offramp_config(
        "cuda", 4096, 8000, 768, torch.bfloat16
    )[:3] + (4,)


# -----------------------------------------------------------------------------
# the off-ramp loss: cross-entropy without the logits, forward and backward


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_offramp_cross_entropy(dtype, tol):
    g = torch.Generator().manual_seed(9)
    N, V, C = 37, 1000, 32
    h = (torch.randn(N, C, generator=g) * 0.5).to(DEVICE, dtype)
    w = torch.randn(V, C, generator=g).to(DEVICE, dtype)
    b = torch.randn(V, generator=g).to(DEVICE)
    target = torch.randint(0, V, (N,), generator=g).to(DEVICE)
    target[::5] = -100  # ignored rows
    grads = []
    for fn in ("kernel", "reference"):
        hh, ww, bb = (t.clone().requires_grad_() for t in (h, w, b))
        if fn == "kernel":
            loss = ol.offramp_cross_entropy(hh, ww, bb, target, chunk=16)  # 16 does not divide N
        else:
            loss = reference.offramp_cross_entropy(hh, ww, bb, target)
        loss.backward()
        grads.append((loss.detach(), hh.grad, ww.grad, bb.grad))
    for name, got, want in zip(("loss", "grad h", "grad weight", "grad bias"), *grads):
        assert got.dtype == want.dtype if name != "loss" else True
        # gradients relative to their scale: bf16 rounds h and the weight's gradient
        assert (got.float() - want.float()).abs().max() <= tol * max(1.0, want.float().abs().max().item()), report(
            name, got, want
        )


def test_offramp_cross_entropy_works_in_chunks_of_tokens():
    """No tensor of the loss's forward or backward is larger than a chunk's logits or the
    weight's float32 gradient; the (N, V) logits never exist."""
    g = torch.Generator().manual_seed(10)
    N, V, C, chunk = 64, 300, 16, 24  # two whole chunks and a part; V across the interpreter's blocks of 64
    h = torch.randn(N, C, generator=g).to(DEVICE).requires_grad_()
    w = torch.randn(V, C, generator=g).to(DEVICE).requires_grad_()
    with AllocationTrace() as trace:
        loss = ol.offramp_cross_entropy(h, w, None, torch.randint(0, V, (N,), generator=g).to(DEVICE), chunk=chunk)
        loss.backward()
    assert trace.largest <= max(V * C, chunk * V) * 4 < N * V * 4, (
        f"largest tensor {trace.largest} bytes, (N, V) logits {N * V * 4}"
    )


class LiveLogits(TorchDispatchMode):
    """The most (rows, V) products (the logits of a chunk) alive at once inside the block."""

    def __init__(self, V):
        super().__init__()
        self.V, self.live, self.most = V, 0, 0

    def _gone(self):
        self.live -= 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if (
                func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
                and t.dim() == 2
                and t.shape[1] == self.V
            ):
                self.live += 1
                self.most = max(self.most, self.live)
                weakref.finalize(t, self._gone)
        return out


def test_offramp_cross_entropy_holds_one_chunk_of_logits_at_a_time():
    """A chunk's logits are released before the next chunk's product allocates its own: the peak
    is one chunk of logits, not two (bench/bench_offramp.py measures the peak on a GPU)."""
    g = torch.Generator().manual_seed(11)
    N, V, C, chunk = 96, 300, 16, 24
    h = torch.randn(N, C, generator=g).to(DEVICE).requires_grad_()
    w = torch.randn(V, C, generator=g).to(DEVICE).requires_grad_()
    with LiveLogits(V) as live:
        ol.offramp_cross_entropy(h, w, None, torch.randint(0, V, (N,), generator=g).to(DEVICE), chunk=chunk).backward()
    assert live.most == 1, f"{live.most} chunks of logits alive at once"


def test_offramp_cross_entropy_backward_only_scales_its_saved_gradients():
    """The backward is the three saved gradients scaled by the incoming one and cast to the
    parameters' dtypes (here one cast: the bf16 weight's; the float32 bias needs none): no zero
    tensors for the statistics' gradients, no cast of the incoming gradient."""
    g = torch.Generator().manual_seed(12)
    N, V, C = 40, 300, 16
    h = torch.randn(N, C, generator=g).to(DEVICE).bfloat16().requires_grad_()
    w = torch.randn(V, C, generator=g).to(DEVICE).bfloat16().requires_grad_()
    b = torch.zeros(V, device=DEVICE, requires_grad=True)
    loss = ol.offramp_cross_entropy(h, w, b, torch.randint(0, V, (N,), generator=g).to(DEVICE), chunk=16)
    ops = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    with Ops():
        loss.backward()
    assert "zeros" not in ops and ops.count("mul_") == 3 and ops.count("_to_copy") == 1, ops
    assert h.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.bfloat16 and b.grad.dtype == torch.float32


def test_offramp_cross_entropy_without_gradient_takes_the_fused_kernel():
    """Under no_grad (evaluation) the loss and statistics come from the fused off-ramp kernel,
    which writes no (N, chunk) block either; the same numbers as with gradient."""
    g = torch.Generator().manual_seed(12)
    N, V, C = 40, 500, 16
    h, w = torch.randn(N, C, generator=g).to(DEVICE), torch.randn(V, C, generator=g).to(DEVICE)
    b, target = torch.randn(V, generator=g).to(DEVICE), torch.randint(0, V, (N,), generator=g).to(DEVICE)
    with torch.no_grad(), AllocationTrace() as trace:
        plain = ol.offramp_cross_entropy(h, w, b, target, chunk=N, stats=True)
    assert trace.largest <= V * C * 4
    graded = ol.offramp_cross_entropy(h, w.clone().requires_grad_(), b, target, chunk=N, stats=True)
    for x, y in zip(plain, graded):
        assert torch.allclose(x.float(), y.detach().float(), atol=1e-4)


def test_offramp_of_nobody_with_the_cuda_configuration(monkeypatch):
    """N = 0 (every token has left) through the CUDA launch configuration, run by the interpreter."""
    V, C = 300, 64
    real = ee._offramp_config
    monkeypatch.setattr(ee, "_offramp_config", lambda device_type, *a: real("cuda", *a))
    cfg = ee._offramp_config("cpu", 0, V, C, torch.float32)
    assert cfg[3] >= 1
    h, w = torch.zeros(0, C).to(DEVICE), torch.randn(V, C).to(DEVICE)
    arg, ent, lse = ee._offramp_launch(h, w, None, cfg)
    assert arg.shape == ent.shape == lse.shape == (0,)
    hh = h.clone().requires_grad_()
    loss = ol.offramp_cross_entropy(hh, w, None, torch.zeros(0, dtype=torch.long).to(DEVICE))
    loss.backward()
    assert loss.item() == 0 and hh.grad.shape == (0, C)


def test_exit_benchmark_counts_the_output_tokens_as_eval_does():
    """bench/bench_early_exit.py's exit fractions read the tokens up to each row's first [EOS],
    as eval.py (core/exit_measures.generate) counts them."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import bench_early_exit as bench

    tokens = torch.tensor([[9, 3, 7, 3], [9, 8, 7, 6]])
    layers = torch.tensor([[1, 2, 3, 4], [4, 3, 2, 1]])
    assert bench.output_layers(tokens, layers, eos_id=3).tolist() == [1, 2, 4, 3, 2, 1]


def test_offramp_cross_entropy_returns_the_exit_statistics_of_its_own_pass():
    """stats=True: the argmax, entropy and per-row nll the exit decision needs, equal to the
    reference's and to kernels.offramp's, from the loss's own pass over the vocabulary."""
    g = torch.Generator().manual_seed(11)
    N, V, C = 29, 700, 32
    h = torch.randn(N, C, generator=g).to(DEVICE)
    w = torch.randn(V, C, generator=g).to(DEVICE)
    b = torch.randn(V, generator=g).to(DEVICE)
    target = torch.randint(0, V, (N,), generator=g).to(DEVICE)
    target[::4] = -100
    loss, arg, ent, nll = ol.offramp_cross_entropy(h, w.clone().requires_grad_(), b, target, chunk=10, stats=True)
    r_loss, r_arg, r_ent, r_nll = reference.offramp_cross_entropy(h, w, b, target, stats=True)
    assert torch.allclose(loss.detach(), r_loss, atol=1e-4) and torch.equal(arg.cpu(), r_arg.cpu())
    assert torch.allclose(ent, r_ent, atol=1e-4) and torch.allclose(nll, r_nll, atol=1e-4)
    assert (nll[::4] == 0).all() and torch.allclose(nll.sum() / (target != -100).sum(), loss, atol=1e-5)
