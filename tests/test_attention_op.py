"""Our attention as custom operators (kernels/attention_op.py), the way torch.compile sees it: the
same numbers as the autograd.Function of eager mode, the operators' registrations checked by
torch.library.opcheck, and a model traced through them in one graph. Under the Triton interpreter
on a CPU, on CUDA where there is one."""

import pytest
import torch

pytest.importorskip("triton")

from conftest import DEVICE  # noqa: E402
import kernels  # noqa: E402
from kernels import CONTEXT, ORIGINAL, PSEUDO, attention_op, rel_pos_bias  # noqa: E402
from kernels.attention_plan import TUNING  # noqa: E402
from kernels.pseudo_attention import pseudo_attention  # noqa: E402


def case(dense=False, packed=False, B=2, H=2, L=21, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, L, D, generator=g).to(DEVICE).requires_grad_() for _ in range(3))
    kind = torch.randint(CONTEXT, PSEUDO + 1, (B, L), generator=g).to(DEVICE)
    step = torch.randint(0, 4, (B, L), generator=g).to(DEVICE)
    valid = (torch.rand(B, L, generator=g) > 0.2).to(DEVICE)
    seq = torch.randint(0, 2, (B, L), generator=g).sort(1).values.to(DEVICE) if packed else None
    if dense:
        bias = torch.randn(1, H, L, L, generator=g).to(DEVICE).requires_grad_()
        leaf = bias
    else:
        leaf = torch.randn(H, 13, generator=g).to(DEVICE).requires_grad_()
        pos = torch.arange(L, device=DEVICE).expand(B, L)
        bias = lambda: rel_pos_bias(leaf, pos, pos, 6)  # noqa: E731  (made again per call, as a model does)
    return (q, k, v), (kind, step, valid, seq), bias, leaf


def run(fn, xs, meta, bias, leaf):
    for x in xs + (leaf,):
        x.grad = None
    kind, step, valid, seq = meta
    o = fn(
        *xs,
        kernels.MaskMeta(kind, step, kind, step, valid, seq, seq),
        bias=bias() if callable(bias) else bias,
        cache={},
    )
    (o.float() * torch.cos(o.float())).sum().backward()
    return [o.detach()] + [x.grad.clone() for x in xs + (leaf,)]


@pytest.mark.parametrize("dense,packed", [(False, False), (True, False), (False, True)])
def test_the_operators_compute_what_the_function_does(dense, packed):
    """The output and every gradient (q, k, v, and the relative table's or the dense bias's), bit for
    bit: the same launchers with the same plan."""
    xs, meta, bias, leaf = case(dense, packed)
    want = run(pseudo_attention, xs, meta, bias, leaf)
    got = run(attention_op.attention, xs, meta, bias, leaf)
    for name, a, b in zip(("out", "dq", "dk", "dv", "dbias"), want, got):
        assert torch.equal(a, b), f"{name}: max difference {(a - b).abs().max():.3g}"


def test_the_operators_pass_opcheck():
    """Schema, fake (meta) implementations, AOTAutograd tracing and the registered autograd formula of
    the forward operator; the plan's outputs hold padding nobody reads, so its check stops at the fake
    implementation."""
    (q, k, v), (kind, step, valid, _), _, _ = case()
    pos = torch.arange(q.shape[2], device=DEVICE).expand_as(kind)
    launch = attention_op._launch(TUNING, q.device, q.shape[-1])
    args = (kind, step, kind, step, valid, None, None, pos, pos, launch, 6, True)
    torch.library.opcheck(torch.ops.textgen.attention_plan.default, args, test_utils=("test_schema", "test_faketensor"))
    plan = torch.ops.textgen.attention_plan(*args)
    table = torch.randn(q.shape[1], 13, device=DEVICE, requires_grad=True)
    torch.library.opcheck(
        torch.ops.textgen.attention.default, (q, k, v, *plan, table, None, 6, q.shape[-1] ** -0.5, False, launch)
    )


def test_a_model_traces_through_the_operators_in_one_graph(tokenizer):
    """A UnifiedLM's PMLM loss with the Triton backend, traced by Dynamo: one graph, and under
    AOTAutograd (the compiler's tracing, without its code generation) the eager loss and gradients."""
    from core.config import preset
    from core.model import UnifiedLM
    from core.unilm.pmlm import collate, pmlm_loss_sums

    torch.manual_seed(0)
    cfg = preset("tiny", vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, dropout=0.0)
    model = UnifiedLM(cfg).to(DEVICE)
    g = torch.Generator().manual_seed(3)
    examples = []
    for n in (9, 14):
        ids = torch.randint(tokenizer.n_special, tokenizer.vocab_size, (n,), generator=g)
        examples.append(
            dict(
                tokens=ids.numpy(),
                pos=torch.arange(n).numpy(),
                seg=(torch.arange(n) > 4).long().numpy(),
                kind=torch.tensor([CONTEXT] * (n - 4) + [ORIGINAL, ORIGINAL, PSEUDO, PSEUDO]).numpy(),
                step=torch.tensor([0] * (n - 4) + [1, 2, 1, 2]).numpy(),
                target=torch.tensor([-100] * (n - 2) + ids[-2:].tolist()).numpy(),
            )
        )
    batch = collate(examples, tokenizer.pad_id).to(DEVICE)
    torch._dynamo.reset()
    with kernels.use_backend("triton"):
        explained = torch._dynamo.explain(pmlm_loss_sums)(model, batch)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
        want = pmlm_loss_sums(model, batch)["loss"]
        want.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        got = torch.compile(pmlm_loss_sums, backend="aot_eager", fullgraph=True)(model, batch)["loss"]
        got.backward()
    torch._dynamo.reset()
    torch.testing.assert_close(got, want)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], msg=n)
