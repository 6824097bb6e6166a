"""bench/attention_harness.py and the methods of bench/attention_cases.py: every method asked the
same gradients (the bias table's through its step's one way back), and each layer charged its
share of the step's setup."""

import torch

from conftest import DEVICE


def small_case(H=2, D=16):
    from bench.attention_cases import BUCKETS, seq2seq_layout

    meta = seq2seq_layout(2, 48, DEVICE)
    B, L = meta[0].shape
    torch.manual_seed(0)
    leaves = [torch.randn(B, L, H, D, device=DEVICE, requires_grad=True) for _ in range(3)]
    table = torch.randn(H, BUCKETS, device=DEVICE, requires_grad=True)
    return meta, leaves, table, torch.randn(B, H, L, D, device=DEVICE)


def reference_grads(meta, leaves, table, dout, layers):
    """The gradients of `layers` layers' attention read through the reference, bias built in each."""
    from bench.attention_cases import MAX_DIST
    from kernels import MaskMeta, reference, rel_pos_bias

    kind, step, pos, valid = meta
    q, k, v = (x.transpose(1, 2) for x in leaves)
    for _ in range(layers):
        reference.attention(
            q, k, v, MaskMeta(kind, step, kind, step, valid), bias=rel_pos_bias(table, pos, pos, MAX_DIST)
        ).backward(dout)
    return [x.grad.clone() for x in leaves + [table]]


def test_every_method_gives_the_gradients_a_step_of_two_layers_gives():
    """Setup once, two layers' calls, one reduce: the gradients of q, k, v and the table equal the
    reference's over two layers, for ours and SDPA with the dense mask; the frozen table and SDPA
    without a mask give no table gradient, and say so."""
    from bench.attention_cases import baseline_method, ours_method

    meta, leaves, table, dout = small_case()
    want = reference_grads(meta, leaves, table, dout, layers=2)
    for m in (
        ours_method("ours", meta),
        baseline_method("sdpa-mask", "sdpa", meta),
        ours_method("ours, frozen", meta, frozen=True),
        baseline_method("sdpa-nomask", "sdpa-nomask", meta),
    ):
        for x in leaves + [table]:
            x.grad = None
        q, k, v = (x.transpose(1, 2) for x in leaves)
        st = m.setup(table, q, k, v)
        for _ in range(2):
            m.call(st, q, k, v).backward(dout)
        if m.reduce is not None:  # None: nothing to take back to a table
            m.reduce(st)
        assert (table.grad is not None) == m.bias_grad, m.label
        if m.label == "sdpa-nomask":
            continue
        got = [x.grad for x in leaves] + ([table.grad] if m.bias_grad else [])
        for name, g, w in zip(("dq", "dk", "dv", "dtable"), got, want):
            torch.testing.assert_close(g, w, atol=2e-4, rtol=2e-4, msg=lambda s, n=name: f"{m.label} {n}: {s}")


def test_a_layer_is_charged_its_call_and_its_share_of_the_step():
    """charge(): one timing function for the call, the setup and the reduce, in that order; a layer
    pays its call and 1/n of the setup and the reduce."""
    from bench.attention_cases import baseline_method
    from bench.attention_harness import charge

    meta, leaves, table, dout = small_case()
    times = iter([1.0, 2.0, 12.0, 24.0])
    seen = []

    def time_fn(fn, reset=()):
        seen.append(set(map(id, reset)))
        fn()
        return next(times)

    t = charge(baseline_method("sdpa-mask", "sdpa", meta), leaves, table, dout, time_fn, n_layers=12)
    assert (t["fwd_ms"], t["fwdbwd_ms"], t["setup_ms"], t["reduce_ms"]) == (1.0, 2.0, 12.0, 24.0)
    assert t["layer_fwd_ms"] == 1.0 + 12.0 / 12 and t["layer_fwdbwd_ms"] == 2.0 + 36.0 / 12
    assert all(id(table) in s for s in seen) and all(id(leaves[0]) in s for s in seen[:3])


def test_the_backend_that_ran_is_named():
    """kernel_names: on the CPU, the attention operators one call ran (a GPU names its kernels)."""
    from bench.attention_cases import baseline_method
    from bench.attention_harness import fused_flex, kernel_names

    meta, leaves, table, dout = small_case()
    m = baseline_method("sdpa-nomask", "sdpa-nomask", meta)
    q, k, v = (x.transpose(1, 2) for x in leaves)
    st = m.setup(table, q, k, v)
    names = kernel_names(lambda: m.call(st, q, k, v).backward(dout))
    assert names and all("attention" in n for n in names) and any("scaled_dot_product" in n for n in names)
    assert fused_flex(["triton_tem_fused_flex_attention_0"]) and not fused_flex(["aten::bmm", "aten::_softmax"])
