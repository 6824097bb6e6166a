"""ELMER's decoder pass at static shapes (core/elmer/exit_pass.py): the same tokens, exit layers and
entropies as decoder_loop's gathered layout for every measure and soft exit, no host sync inside a
layer, and a layer's launches with exits at most 1.3x those with exit disabled. On the CPU the pass
runs eagerly; on CUDA the same steps are captured as CUDA graphs (bench/bench_early_exit.py)."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from core.elmer.exit_decode import decode_exit
from core.elmer.exit_pass import MaskedExitPass, masked_pass

from test_elmer import memory_of
from test_exit_measures import tiny


def same(a, b):
    return torch.equal(torch.nan_to_num(a, nan=-7.0), torch.nan_to_num(b, nan=-7.0))


@pytest.mark.parametrize(
    "measure,thresholds",
    [("entropy", [0.0, 1e-9, 5.0, math.inf]), ("state", [1.0, 0.9, 0.5, -1.0]), ("classifier", [1.0, 0.8, 0.5, 0.0])],
)
def test_masked_pass_equals_the_gathered_layout(measure, thresholds):
    model = tiny()
    memory, valid = memory_of(model)
    for thr in thresholds:
        want_w, got_w = {}, {}
        want = decode_exit(model, memory, valid, 12, thr, measure=measure, work=want_w, layout="gather")
        got = decode_exit(model, memory, valid, 12, thr, measure=measure, work=got_w, layout="masked")
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (measure, thr)
        assert torch.allclose(
            torch.nan_to_num(got_w["entropy"], nan=-7.0), torch.nan_to_num(want_w["entropy"], nan=-7.0), atol=1e-4
        ), (measure, thr)
        # the masked layout runs every row of a layer while anybody is left: its work, not the gathered one's
        run = sum(1 for q in got_w["queries"] if q)
        assert got_w["queries"][:run] == [want_w["queries"][0]] * run


def test_masked_pass_with_soft_exit_equals_the_gathered_layout():
    model = tiny(soft=True)
    with torch.no_grad():
        model.soft.weight.normal_(0, 0.1)
    memory, valid = memory_of(model)
    for thr in (0.0, 5.0, math.inf):
        want = decode_exit(model, memory, valid, 12, thr, layout="gather")
        got = decode_exit(model, memory, valid, 12, thr, layout="masked")
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), thr


def test_masked_pass_stops_once_everybody_left_and_reads_the_new_source():
    """Everyone leaves at layer 1: one layer runs. A second call with another source's padding
    rebuilds the cross-attention's codes (they depend on the padding), it does not reuse the first's."""
    model = tiny()
    memory, valid = memory_of(model)
    p = masked_pass(model, memory.shape[0], memory.shape[1], 12, "classifier", 0.0, graphs=False)
    _, layers, _, run = p.run(memory, valid)
    assert run == 1 and (layers == 1).all()
    valid2 = valid.clone()
    valid2[:, -2:] = False
    a = decode_exit(model, memory, valid2, 12, 0.5, measure="classifier", layout="masked")
    b = decode_exit(model, memory, valid2, 12, 0.5, measure="classifier", layout="gather")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


class Count(TorchDispatchMode):
    """Device ops (aten ops that are not views or allocations) and host syncs."""

    VIEWS = {
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
    }

    def __init__(self):
        super().__init__()
        self.ops, self.syncs = [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in ("_local_scalar_dense", "nonzero", "item"):
            self.syncs += 1
        elif name not in self.VIEWS:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def layer_ops(model, memory, valid, measure, thr):
    p = MaskedExitPass(model, memory.shape[0], memory.shape[1], 12, measure, thr, graphs=False)
    p.memory.copy_(memory)
    p.src_valid.copy_(valid)
    with torch.no_grad():
        p._start()
        p._layer(0)  # builds the attention's codes and maps, once a pass
        with Count() as c:
            p._layer(1)
    return c


def test_a_layer_makes_no_host_sync_and_the_exit_adds_at_most_30_percent_of_its_launches():
    """Layer 2 of the masked pass (the caches filled by layer 1): no .item() / nonzero; its device
    ops with the classifier exit against exit disabled (the launches a GPU spends on it). The
    reference attention runs here, so the count is the model's own ops plus the exit's."""
    model = tiny()
    memory, valid = memory_of(model)
    off = layer_ops(model, memory, valid, "entropy", 0.0)
    clf = layer_ops(model, memory, valid, "classifier", 0.5)
    assert off.syncs == 0 and clf.syncs == 0
    print(f"device ops of a layer: exit disabled {len(off.ops)}, classifier exit {len(clf.ops)}")
    assert len(clf.ops) <= 1.3 * len(off.ops), (len(off.ops), len(clf.ops), sorted(set(clf.ops) - set(off.ops)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("measure,thr", [("entropy", 0.0), ("classifier", 0.5), ("state", 0.9), ("entropy", 5.0)])
def test_graphed_pass_equals_the_eager_one_on_cuda(measure, thr):
    """The captured pass (the start with layer 1, each layer, the finish; exits disabled: one graph)
    gives what the same pass gives eagerly, replayed twice (the second replay reads fresh buffers)."""
    model = tiny()
    memory, valid = (x.detach().cuda() for x in memory_of(model))
    model.cuda()
    eager = masked_pass(model, memory.shape[0], memory.shape[1], 12, measure, thr, graphs=False)
    graphed = masked_pass(model, memory.shape[0], memory.shape[1], 12, measure, thr, graphs=True)
    want = eager.run(memory, valid)
    for _ in range(2):
        got = graphed.run(memory, valid)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[3] == want[3], (measure, thr)
        assert same(got[2], want[2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_a_pass_captured_under_autocast_replays_in_a_later_autocast_region():
    """Captured in one bf16 autocast region, replayed in another after the allocator's cache was
    emptied and refilled: the same tokens as the eager pass (the capture must not read autocast's
    cached weight casts, which the first region's end frees)."""
    model = tiny()
    memory, valid = (x.detach().cuda() for x in memory_of(model))
    model.cuda()
    eager = masked_pass(model, memory.shape[0], memory.shape[1], 12, "classifier", 0.5, graphs=False)
    graphed = masked_pass(model, memory.shape[0], memory.shape[1], 12, "classifier", 0.5, graphs=True)
    with torch.autocast("cuda", torch.bfloat16):
        want = eager.run(memory, valid)
        graphed.run(memory, valid)  # captures
    torch.cuda.empty_cache()
    junk = [torch.full((1 << 20,), float("nan"), device="cuda") for _ in range(8)]  # reuse freed blocks
    with torch.autocast("cuda", torch.bfloat16):
        got = graphed.run(memory, valid)
    del junk
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_the_weights_version_follows_in_place_writes_and_new_storage():
    """What tells a captured pass (or Mask-Predict's step) that its graphs are stale, read from a
    parameter list made once per model."""
    from core.graphs import weights_version

    model = tiny()
    v0 = weights_version(model)
    assert weights_version(model) == v0
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # an optimizer step
    v1 = weights_version(model)
    assert v1 != v0
    model.load_state_dict(model.state_dict())  # copies in place
    v2 = weights_version(model)
    assert v2 != v1
    p = next(model.parameters())
    p.data = p.data.clone()  # new storage
    assert weights_version(model) != v2


def test_linear_layers_holding_their_casts_compute_what_autocast_computes():
    """core/graphs.cast_linears, which a capture under autocast runs inside (so that no replay casts
    a weight again): the pass gives the same tokens, exit layers and entropies as under plain
    autocast, and every parameter is back to its float32 storage afterwards."""
    from core.graphs import cast_linears

    model = tiny()
    memory, valid = memory_of(model)
    memory = memory.detach()
    before = [(p.dtype, p.data_ptr()) for p in model.parameters()]
    with torch.autocast("cpu", torch.bfloat16):
        want = masked_pass(model, memory.shape[0], memory.shape[1], 12, "classifier", 0.5, graphs=False).run(
            memory, valid
        )
        with cast_linears(model, "cpu") as casts:
            assert casts and all(c.dtype == torch.bfloat16 for c in casts)
            got = MaskedExitPass(model, memory.shape[0], memory.shape[1], 12, "classifier", 0.5, graphs=False).run(
                memory, valid
            )
    assert [(p.dtype, p.data_ptr()) for p in model.parameters()] == before
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and same(got[2], want[2])
