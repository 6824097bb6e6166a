"""--dtype: what auto resolves to, and bf16 autocast training that follows float32's losses."""

import torch

import train
from core import distributed
from core.distributed import resolve_dtype
from conftest import TINY, read_log

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


def test_auto_follows_the_hardware(monkeypatch):
    monkeypatch.setattr(distributed, "native_bf16_cpu", lambda: False)
    assert resolve_dtype("auto", CPU) == torch.float32  # emulated bf16 is slower than float32
    assert resolve_dtype("auto", CUDA) == torch.bfloat16
    monkeypatch.setattr(distributed, "native_bf16_cpu", lambda: True)
    assert resolve_dtype("auto", CPU) == torch.bfloat16
    assert resolve_dtype("float32", CUDA) == torch.float32
    assert resolve_dtype("bfloat16", CPU) == torch.bfloat16


def test_bf16_losses_follow_float32(text_file, tmp_path):
    """The same 8 steps in float32 and under bf16 autocast: bf16 keeps 8 bits of mantissa (a
    relative rounding of 0.4% per operation), so the losses differ, but by at most 1% at every
    step (measured: 0.05% at most on this run)."""
    runs = {}
    for dtype in ("float32", "bfloat16"):
        out = str(tmp_path / dtype)
        assert TINY[:2] == ["--dtype", "float32"]
        train.main(
            ["--data", text_file, "--steps", "8", "--dropout", "0", "--out", out] + TINY[2:] + ["--dtype", dtype]
        )
        runs[dtype] = [r["loss"] for r in read_log(out) if "loss" in r]
    a, b = runs["float32"], runs["bfloat16"]
    assert len(a) == len(b) == 8
    worst = max(abs(x - y) / x for x, y in zip(a, b))
    assert worst < 0.01, (a, b)
    assert a != b  # autocast really ran in bf16


def test_the_weights_are_cast_to_bf16_once_a_step(tokenizer, text_file):
    """A step of two micro-batches under bf16 autocast casts each weight matrix once (autocast keeps
    its copy until its outermost region ends: the step holds one region over the micro-batches),
    where a region per micro-batch casts it twice, to the same gradients."""
    import collections
    import contextlib
    from torch.utils._python_dispatch import TorchDispatchMode
    from core.distributed import Dist
    from core.optim import make_optimizer
    from core.unilm.pmlm import pmlm_loss_sums
    from core.training import autocast
    from bench.step import train_step
    from test_step_syncs import pmlm_setup

    model, _, batches, args, _ = pmlm_setup(tokenizer, text_file)
    model.eval()  # no dropout: every pass sees the same network
    linear = {m.weight.data_ptr() for m in model.modules() if isinstance(m, torch.nn.Linear)}

    class Casts(TorchDispatchMode):
        """How many times each parameter is cast to bf16."""

        def __init__(self):
            super().__init__()
            self.n = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16:
                self.n[args[0].data_ptr()] += 1
            return func(*args, **kwargs)

    d = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"), dtype=torch.bfloat16)
    optimizer = make_optimizer(model, 0.0)  # lr 0: the step leaves the weights as they are
    with Casts() as casts:
        train_step(model, model, optimizer, batches, pmlm_loss_sums, d, step=0, lr=0.0, clip=1e9)
    assert len(batches) == 2 and all(casts.n[w] == 1 for w in linear), [casts.n[w] for w in linear]
    norm = sum(b.norm for b in batches)
    grads, counts = [], []
    for one_region in (True, False):
        model.zero_grad()
        with Casts() as casts, autocast(d.device, d.dtype) if one_region else contextlib.nullcontext():
            for b in batches:
                with contextlib.nullcontext() if one_region else autocast(d.device, d.dtype):
                    loss = pmlm_loss_sums(model, b)["loss"] / norm
                with torch.autocast("cpu", enabled=False):
                    loss.backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        counts.append({casts.n[w] for w in linear})
    assert counts == [{1}, {2}], counts
    assert all(torch.equal(a, b) for a, b in zip(*grads))
