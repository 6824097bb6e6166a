"""The attention kernel inside the models: a model trains through it as through the reference, its
codes and tile map are built once per step for every layer, and one training step's attention makes
the launches kernels/pseudo_attention.py states (the kernel against the reference, layout by layout:
tests/test_attention_layouts.py)."""

import pytest
import torch

import kernels
from kernels import PSEUDO

from test_attention_layouts import EMPTY, DEVICE, gen, pa, pmlm_layout, poison, report  # noqa: F401  (poison: autouse)


# -----------------------------------------------------------------------------
# the model trains through it


def test_model_trains_through_kernel():
    from core.config import preset
    from core.model import UnifiedLM

    B, n_ctx = 2, 30
    kind, step, *_ = pmlm_layout(B, n_ctx, gen(11))
    L = kind.shape[1]
    g = gen(12)
    tokens = torch.randint(6, 600, (B, L), generator=g)
    pos = torch.cat([torch.arange(n_ctx), torch.randint(0, n_ctx, (L - n_ctx,), generator=g)]).expand(B, -1)
    seg = (pos >= n_ctx // 2).long()
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[1, -3:] = False
    predict = (kind == PSEUDO) & valid
    targets = torch.randint(6, 600, (int(predict.sum()),), generator=g)
    tokens, pos, seg, kind, step, valid, predict, targets = (
        x.to(DEVICE) for x in (tokens, pos, seg, kind, step, valid, predict, targets)
    )

    def train(backend):
        torch.manual_seed(0)
        model = UnifiedLM(preset("tiny", vocab_size=600, dropout=0.0)).to(DEVICE)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        losses = []
        with kernels.use_backend(backend):
            for _ in range(3):
                logits = model(tokens, pos, seg, kind, step, valid, predict=predict)
                loss = torch.nn.functional.cross_entropy(logits, targets)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses, model.state_dict()

    ref_losses, ref_state = train("reference")
    losses, state = train("triton")
    assert torch.allclose(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-4), (losses, ref_losses)
    assert ref_state["rel_table"].abs().max() > 0, "the relative bias table received no gradient"
    for name in ref_state:
        assert torch.allclose(state[name], ref_state[name], atol=1e-4), report(name, state[name], ref_state[name])


def count_builds(monkeypatch):
    """Calls of the codes and map builders (one launch and two, kernels/tilemap.py)."""
    from kernels import attention_plan

    calls = []
    for name in ("build_map", "code_tensor"):
        real = getattr(attention_plan, name)
        monkeypatch.setattr(
            attention_plan, name, lambda *a, real=real, name=name, **kw: calls.append(name) or real(*a, **kw)
        )
    return calls


def test_tile_map_built_once_per_forward_and_backward(monkeypatch):
    """Every layer of a forward shares the metadata, so the codes and the tile map are built once for
    the whole model, and the backward reuses them: one codes build and one map build per
    (query, key) metadata pair and step."""
    from core.config import preset
    from core.model import EncoderDecoder, UnifiedLM

    B, L = 2, 40
    tokens = torch.randint(6, 600, (B, L)).to(DEVICE)
    pos = torch.arange(L).expand(B, L).to(DEVICE)
    kind = torch.zeros(B, L, dtype=torch.long, device=DEVICE)
    valid = torch.ones(B, L, dtype=torch.bool, device=DEVICE)
    with kernels.use_backend("triton"):
        calls = count_builds(monkeypatch)
        model = UnifiedLM(preset("tiny", vocab_size=600, n_layers=4)).to(DEVICE)
        model(tokens, pos, None, kind, kind, valid).sum().backward()
        assert sorted(calls) == ["build_map", "code_tensor"], f"{calls} in a 4-layer forward and backward"
        calls.clear()
        t5 = EncoderDecoder(preset("tiny", vocab_size=600, n_layers=3, n_dec_layers=3)).to(DEVICE)
        t5(tokens, valid, tokens[:, :20], valid[:, :20]).sum().backward()
        # encoder self-attention, decoder self-attention, cross-attention: one map each; codes for the
        # encoder's tokens, the decoder's, and the cross-attention's queries and memory keys
        assert calls.count("build_map") == 3 and calls.count("code_tensor") == 4, calls


# -----------------------------------------------------------------------------
# launches: what one training step's attention costs besides its kernels

VIEW_OPS = {
    "view",
    "_unsafe_view",
    "transpose",
    "t",
    "expand",
    "detach",
    "alias",
    "as_strided",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "reshape",
    "permute",
    "empty",
    "empty_strided",
    "empty_like",
    "lift_fresh",
    "split",
    "unbind",
    "_reshape_alias",
    "clone_if_needed",
}


def count_attention_launches(monkeypatch):
    """Counts, during the attention's own calls (forward and backward), the Triton launches by kernel
    and the device ops of torch (aten ops that are not views or allocations): each is one launch on a
    GPU. Ops the interpreter runs inside a kernel are not counted."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from kernels import tilemap

    launches, ops, state = [], [], dict(depth=0, in_kernel=False)

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if state["depth"] and not state["in_kernel"] and name not in VIEW_OPS:
                ops.append(name)
            return func(*args, **(kwargs or {}))

    for module in (pa, tilemap):
        for name in (
            "_fwd_kernel",
            "_delta_kernel",
            "_bwd_kv_kernel",
            "_bwd_q_kernel",
            "_codes_kernel",
            "_class_kernel",
            "_list_kernel",
        ):
            fn = getattr(module, name, None)
            if fn is None:
                continue
            real = fn.run

            def run(*a, real=real, name=name, **kw):
                launches.append(name)
                state["in_kernel"] = True
                try:
                    return real(*a, **kw)
                finally:
                    state["in_kernel"] = False

            monkeypatch.setattr(fn, "run", run, raising=False)

    def counted(f):
        def inner(*a, **kw):
            state["depth"] += 1
            try:
                with Count():
                    return f(*a, **kw)
            finally:
                state["depth"] -= 1

        return inner

    monkeypatch.setattr(pa, "pseudo_attention", counted(pa.pseudo_attention))
    monkeypatch.setattr(pa._PseudoAttention, "backward", staticmethod(counted(pa._PseudoAttention.backward)))
    return launches, ops


@pytest.mark.parametrize("fused", [False, True])
def test_one_training_step_launches_what_the_docs_state(monkeypatch, fused):
    """A PMLM step of an n-layer model (relative bias, gradient to its table): the codes and the map
    once (3 launches: the codes, the map's cells and its lists), the base-2 bias table once (2), then
    per layer the forward kernel (1) and the backward's delta, dK/dV and dQ kernels with the table
    gradient's zeroing and its sum and fold (6;
    fused: the dQ buffer's zeroing instead of the dQ kernel, and its cast to a 16-bit q's dtype):
    5 + 7 n launches in float32, no host sync. kernels/pseudo_attention.py's docstring states the same."""
    from core.config import preset
    from core.model import UnifiedLM, tune_attention
    from kernels.attention_plan import Tuning

    n = 3
    kind, step, *_ = pmlm_layout(2, 30, gen(31))
    L = kind.shape[1]
    tokens = torch.randint(6, 600, (2, L)).to(DEVICE)
    pos = torch.cat([torch.arange(30), torch.randint(0, 30, (L - 30,))]).expand(2, L).to(DEVICE)
    kind, step = kind.to(DEVICE), step.to(DEVICE)
    valid = torch.ones(2, L, dtype=torch.bool, device=DEVICE)
    model = tune_attention(UnifiedLM(preset("tiny", vocab_size=600, n_layers=n)), Tuning(fused_dq=fused)).to(DEVICE)
    monkeypatch.setattr(pa, "_new", EMPTY)  # outputs as torch.empty (no launch), not NaN-filled
    with kernels.use_backend("triton"):
        model(tokens, pos, None, kind, step, valid).float().pow(2).mean().backward()  # made once per process
        launches, ops = count_attention_launches(monkeypatch)
        model(tokens, pos, None, kind, step, valid).float().pow(2).mean().backward()
    by_kernel = {k: launches.count(k) for k in set(launches)}
    want = {
        "_codes_kernel": 1,
        "_class_kernel": 1,
        "_list_kernel": 1,
        "_fwd_kernel": n,
        "_delta_kernel": n,
        "_bwd_kv_kernel": n,
    }
    if not fused:
        want["_bwd_q_kernel"] = n
    assert by_kernel == want, by_kernel
    assert len(ops) == 2 + (4 if fused else 3) * n, f"{len(ops)} torch ops in the attention: {ops}"
    assert len(launches) + len(ops) == 5 + 7 * n
    assert "item" not in ops and "_local_scalar_dense" not in ops and "nonzero" not in ops
