"""PyTorch's own attention under kernels.attention's contract (kernels/baselines.py): SDPA with the
dense mask gives the reference's output and every gradient, for every flag; its mask is built once
per forward however many layers use it; FlexAttention's forward agrees (its backward runs on CUDA
only: bench/gpu_check.py checks it there)."""

import warnings

import pytest
import torch

import kernels
from kernels import MaskMeta, baselines, rel_pos_bias


def case(seed, packed=False, blind=False, L=13, D=8):
    g = torch.Generator().manual_seed(seed)
    B, H = 2, 2
    kind = torch.randint(0, 3, (B, L), generator=g)
    step = torch.randint(0, 4, (B, L), generator=g)
    valid = torch.rand(B, L, generator=g) > 0.2
    if blind:  # a CONTEXT query over keys that are all padding or non-CONTEXT: it sees nothing
        kind[0] = torch.tensor([0] + [1] * (L - 1))
        valid[0, 0] = False
    pos = torch.randint(0, 20, (B, L), generator=g)
    seq = torch.randint(0, 2, (B, L), generator=g) if packed else None
    qkv = [torch.randn(B, H, L, D, generator=g) for _ in range(3)]
    return qkv, MaskMeta(kind, step, kind, step, valid, seq, seq), pos


def run(name, qkv, meta, pos, bias_kind, grad=True):
    q, k, v = [t.clone().requires_grad_(grad) for t in qkv]
    table = torch.randn(2, 32, generator=torch.Generator().manual_seed(9)).to(q.device).requires_grad_(grad)
    bias = (
        rel_pos_bias(table, pos, pos, 16)
        if bias_kind == "rel"
        else torch.randn(1, 2, 13, 13, generator=torch.Generator().manual_seed(3)).to(q.device)
        if bias_kind == "dense"
        else None
    )
    with kernels.use_backend(name):
        o = kernels.attention(q, k, v, meta, bias=bias, cache={})
    if not grad:
        return [o]
    (o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum().backward()
    return [o] + [t.grad for t in (q, k, v)] + ([table.grad] if bias_kind == "rel" else [])


@pytest.mark.parametrize("bias_kind", ["rel", "dense", None])
@pytest.mark.parametrize("packed,blind", [(False, False), (True, False), (False, True)])
def test_sdpa_is_the_reference(bias_kind, packed, blind):
    qkv, meta, pos = case(1, packed, blind)
    got, want = run("sdpa", qkv, meta, pos, bias_kind), run("reference", qkv, meta, pos, bias_kind)
    for i, (a, b) in enumerate(zip(got, want)):
        assert not torch.isnan(a).any()
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5, msg=lambda m: f"output/grad {i}: {m}")


def test_sdpa_builds_one_mask_per_forward(monkeypatch):
    """Every layer of a forward passes the same metadata cache and bias: one dense mask for all."""
    qkv, meta, pos = case(2)
    built = []
    real = baselines.dense_mask
    monkeypatch.setattr(baselines, "dense_mask", lambda *a: built.append(1) or real(*a))
    table = torch.randn(2, 32)
    bias, cache = rel_pos_bias(table, pos, pos, 16), {}
    with kernels.use_backend("sdpa"):
        for _ in range(4):
            kernels.attention(*qkv, meta._replace(q_seq=None, k_seq=None), bias=bias, cache=cache)
    assert len(built) == 1


def test_the_dense_mask_is_padded_once_and_never_copied_by_a_layer():
    """13 keys: the mask is built over 16 and viewed at 13, every row starting at a multiple of 8
    elements, which is what SDPA's memory-efficient kernel checks before it would pad and copy the
    mask at every call (PyTorch's aligned_tensor<8>: each stride but the last a multiple of 8, the
    last 1); the layers' calls then pad or copy nothing of it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    qkv, meta, pos = case(4)
    bias, cache = rel_pos_bias(torch.randn(2, 32), pos, pos, 16), {}
    meta = meta._replace(q_seq=None, k_seq=None)
    _, mask, _ = baselines.prepare("sdpa", meta, bias, torch.float32, cache)[baselines._sdpa_key(bias, torch.float32)]
    assert mask.shape[-1] == 13 and mask.stride(-1) == 1
    assert all(st % baselines.MASK_ALIGN == 0 for st in mask.stride()[:-1]), mask.stride()
    unpadded = baselines.visible(*meta)
    assert torch.equal(torch.isinf(mask[:, 0]), ~unpadded & unpadded.any(-1, keepdim=True))
    copies = ("constant_pad_nd", "clone", "_to_copy", "copy_", "contiguous", "pad")

    class Copies(TorchDispatchMode):
        seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            reads_mask = any(
                isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == mask.untyped_storage().data_ptr()
                for a in args
            )
            if reads_mask and func.__name__.split(".")[0] in copies:
                self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Copies() as c, kernels.use_backend("sdpa"):
        for _ in range(3):
            kernels.attention(*qkv, meta._replace(q_seq=None, k_seq=None), bias=bias, cache=cache)
    assert c.seen == [], c.seen


def test_sdpa_nomask_sees_every_pair():
    qkv, meta, pos = case(3)
    got = run("sdpa-nomask", qkv, meta, pos, None, grad=False)[0]
    torch.testing.assert_close(got, torch.nn.functional.scaled_dot_product_attention(*qkv))


@pytest.mark.parametrize("bias_kind", ["rel", None])
@pytest.mark.parametrize("packed,blind", [(False, False), (True, True)])
def test_flex_forward_is_the_reference(bias_kind, packed, blind):
    qkv, meta, pos = case(4, packed, blind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU runs flex unfused, and says so
        got = run("flex", qkv, meta, pos, bias_kind, grad=False)[0]
    want = run("reference", qkv, meta, pos, bias_kind, grad=False)[0]
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_a_baseline_chooses_the_attention_only():
    """--attention sdpa leaves the early-exit operations on their own choice."""
    with kernels.use_backend("sdpa"):
        assert kernels.resolve_backend("auto", torch.device("cpu"), attention=True) == "sdpa"
        assert kernels.resolve_backend("auto", torch.device("cpu")) == "reference"


def test_both_bias_gathers_give_the_same_bias_and_gradient():
    """SDPA's mask gathers its bias by an embedding lookup on CUDA and by indexing on a CPU."""
    g = torch.Generator().manual_seed(4)
    d = torch.randint(0, 33, (2, 7, 9), generator=g)
    w = torch.randn(2, 3, 7, 9, generator=g)  # a different weight for every head and pair
    out = {}
    for lookup in ("embedding", "index"):
        table = torch.randn(3, 33, generator=torch.Generator().manual_seed(5)).requires_grad_()
        bias = baselines.gather_bias(table, d, lookup)
        (bias * w).sum().backward()
        out[lookup] = (bias.detach(), table.grad)
    assert out["embedding"][0].shape == (2, 3, 7, 9)
    for a, b in zip(out["embedding"], out["index"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention's backward runs on CUDA only")
def test_flex_gradients_are_the_reference_on_cuda():
    qkv, meta, pos = case(5, packed=True, D=16)  # compiled Flex takes head dims of 16 and more
    qkv = [t.cuda() for t in qkv]
    meta = {k: None if v is None else v.cuda() for k, v in meta.items()}
    got, want = run("flex", qkv, meta, pos.cuda(), "rel"), run("reference", qkv, meta, pos.cuda(), "rel")
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3, msg=lambda m: f"output/grad {i}: {m}")
