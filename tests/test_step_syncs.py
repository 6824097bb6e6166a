"""A training step between logging points makes no host sync: nothing in it waits for the device to
tell the host a value (a loss, a count, a flag). On a CPU there is no device to wait for, so the
test counts the operations that would wait on a GPU, under a dispatch mode: reading a scalar
(.item(), float(), .tolist()), a boolean index or nonzero (its count), and the like. The GPU check
(bench/gpu_check.py) runs the same step under torch.cuda.set_sync_debug_mode("error")."""

import argparse

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from core.config import preset
from core.distributed import Dist
from core.model import UnifiedLM
from core.optim import make_optimizer
from core.unilm.pmlm import pmlm_batch, pmlm_loss_sums
from core.optim import lr_at
from core.training import StepStats
from bench.step import train_step

aten = torch.ops.aten
# ops whose result's size or value the host must read from the device before it can go on
SYNCING = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten.is_nonzero.default,
    aten.equal.default,
    aten._unique2.default,
    aten.unique_consecutive.default,
    aten.unique_dim.default,
    aten.repeat_interleave.Tensor,
}


READS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__")  # bypass the dispatcher


class SyncCounter(TorchDispatchMode):
    """Records every operation that would wait for a GPU: the syncing aten ops, a boolean index, and
    the Tensor methods that hand a value to Python (some of which never reach the dispatcher)."""

    def __init__(self):
        super().__init__()
        self.seen, self.saved = [], {}

    def __enter__(self):
        for name in READS:
            real = self.saved[name] = getattr(torch.Tensor, name)

            def read(t, *a, _real=real, _name=name, **k):
                self.seen.append(_name)
                return _real(t, *a, **k)

            setattr(torch.Tensor, name, read)
        return super().__enter__()

    def __exit__(self, *exc):
        for name, real in self.saved.items():
            setattr(torch.Tensor, name, real)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        boolean_index = func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default) and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else []) or []
        )
        if func in SYNCING or boolean_index:
            self.seen.append(str(func))
        return func(*args, **kwargs)


def step(model, optimizer, batches, loss_sums, d, args, k):
    """Training step k as train.py's loop takes it (bench/step.py), at its learning rate."""
    return train_step(
        model,
        model,
        optimizer,
        batches,
        loss_sums,
        d,
        step=k,
        seed=args.seed,
        clip=args.clip,
        lr=lr_at(k, args.lr, args.warmup, args.steps),
    )


def syncs_of_a_step(model, batches, loss_sums):
    """What one training step after a warm-up step did that would wait for a GPU."""
    args = argparse.Namespace(lr=1e-3, warmup=2, steps=10, seed=0, clip=1.0)
    d = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"), dtype=torch.float32)
    optimizer = make_optimizer(model, 1e-3)
    step(model, optimizer, batches, loss_sums, d, args, 0)  # warm: lazy state made
    with SyncCounter() as counter:
        step(model, optimizer, batches, loss_sums, d, args, 1)
    return counter.seen


def random_ids(tokenizer):
    g = torch.Generator().manual_seed(1)
    return lambda n: torch.randint(tokenizer.n_special, tokenizer.vocab_size, (n,), generator=g).tolist()


def pmlm_setup(tokenizer, text_file):
    from core.data import TokenStream, read_texts

    torch.manual_seed(0)
    cfg = preset("tiny", vocab_size=tokenizer.vocab_size)
    model = UnifiedLM(cfg)
    stream = TokenStream(tokenizer.encode(read_texts(text_file)[:200]), 48, seed=0, sep=tokenizer.eos_id)
    batches = [pmlm_batch(stream, list(range(4 * k, 4 * k + 4)), tokenizer) for k in range(2)]
    args = argparse.Namespace(lr=1e-3, warmup=2, steps=10, seed=0, clip=1.0)
    d = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"), dtype=torch.float32)
    return model, make_optimizer(model, 1e-3), batches, args, d


def test_a_pmlm_step_makes_no_host_sync(tokenizer, text_file):
    model, optimizer, batches, args, d = pmlm_setup(tokenizer, text_file)
    step(model, optimizer, batches, pmlm_loss_sums, d, args, 0)  # warm: lazy state made
    window = StepStats()
    with SyncCounter() as counter:
        for k in (1, 2):
            window.add(step(model, optimizer, batches, pmlm_loss_sums, d, args, k), k)
    assert counter.seen == [], counter.seen
    with SyncCounter() as counter:  # the logging point reads them all at once
        stats, skipped, first = window.read()
    assert counter.seen == ["tolist"] and skipped == 0 and first == -1 and stats["loss"] > 0


def test_the_counter_sees_what_would_sync(tokenizer, text_file):
    """The old step's habits are caught: a float() of a loss, a boolean index."""
    x = torch.randn(8)
    with SyncCounter() as counter:
        float(x.sum())
        x[x > 0].sum()
        x.tolist()
    assert len(counter.seen) >= 3, counter.seen


def test_a_non_finite_step_is_skipped_on_the_device(tokenizer, text_file):
    model, optimizer, batches, args, d = pmlm_setup(tokenizer, text_file)
    step(model, optimizer, batches, pmlm_loss_sums, d, args, 0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    poisoned = lambda m, b: {k: v * float("nan") if k == "loss" else v for k, v in pmlm_loss_sums(m, b).items()}
    window = StepStats()
    window.add(step(model, optimizer, batches, poisoned, d, args, 1), 1)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    window.add(step(model, optimizer, batches, pmlm_loss_sums, d, args, 2), 2)
    assert not all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    _, skipped, first = window.read()
    assert (skipped, first) == (1, 1)


def test_a_seq2seq_step_makes_no_host_sync(tokenizer):
    """UniLMv2's fine-tuning step reads its [P] positions from the batch (collate made them on the
    host), and its losses are those of the boolean selection it replaced."""
    import torch.nn.functional as F
    from core.unilm.seq2seq import seq2seq_batch, seq2seq_loss_sums

    torch.manual_seed(0)
    model = UnifiedLM(preset("tiny", vocab_size=tokenizer.vocab_size))
    ids = random_ids(tokenizer)
    batches = [seq2seq_batch([(ids(9 + k), ids(3 + k)), (ids(5), ids(6))], tokenizer, 16, 8) for k in range(2)]
    seen = syncs_of_a_step(model, batches, seq2seq_loss_sums)
    assert seen == [], seen
    b, _ = batches[0], model.eval()  # no dropout: the two forwards see the same network
    sel = b.target != -100
    logits = model.head(model(b.tokens, b.pos, b.seg, b.kind, b.step, b.valid)[sel]).float()
    want = F.cross_entropy(logits, b.target[sel], reduction="sum", label_smoothing=0.1)
    got = seq2seq_loss_sums(model, b)
    torch.testing.assert_close(got["loss"], want)
    assert got["n"] == sel.sum()


@pytest.mark.parametrize("arch", ["t5", "mlae-s2s", "mlae-unilm", "roberta-s2s", "nar"])
def test_an_encoder_decoders_fine_tuning_step_makes_no_host_sync(tokenizer, arch):
    """T5's, MLAE's and the CMLM's fine-tuning steps read their targets' positions from the batch,
    which its builder made on the host. (ELMER's step still syncs: its exit losses index by layer.)"""
    from core.architectures import build_model, seq2seq_ops

    torch.manual_seed(0)
    model = build_model(arch, preset("tiny", vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id))
    ops = seq2seq_ops(arch)
    ids = random_ids(tokenizer)
    batches = [ops.batch([(ids(9 + k), ids(3 + k)), (ids(5), ids(6))], tokenizer, 16, 8) for k in range(2)]
    seen = syncs_of_a_step(model, batches, lambda m, b: ops.loss_sums(m, b))
    assert seen == [], seen


@pytest.mark.parametrize("objective", ["mlm", "t5", "t5-nar", "mlae"])
def test_every_pretraining_step_makes_no_host_sync(tokenizer, text_file, objective):
    """Each objective of train.py (the PMLM above; ELMER's layer-permutation step still syncs)."""
    import train
    from core.data import TokenStream, read_texts
    from core.objectives import OBJECTIVES

    o, a = OBJECTIVES[objective], train.get_args(["--objective", objective, "--model", "tiny"])
    torch.manual_seed(0)
    model = o.model(o.shape(preset("tiny", vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id), a), a)
    stream = TokenStream(tokenizer.encode(read_texts(text_file)[:200]), o.window(64), seed=0, sep=tokenizer.eos_id)
    batches = [o.batch(stream, list(range(4 * k, 4 * k + 4)), tokenizer, a, model) for k in range(2)]
    seen = syncs_of_a_step(model, batches, o.loss(a))
    assert seen == [], seen


# -----------------------------------------------------------------------------
# the compiled step (train.py / finetune.py --compile): one graph per forward, no syncing operation in it


def compiled_graphs(model, loss_sums, batch, monkeypatch):
    """Compile `model` as --compile does (core/training.compiled), with a backend that keeps the
    forward and backward graphs AOTAutograd makes of every graph Dynamo captured; run one forward and
    backward. Returns (Dynamo's graphs, every aten operation of their forward and backward graphs)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from core import training

    graphs, ops = [], []

    def keep(gm, example_inputs):
        ops.extend(n.target for n in gm.graph.nodes if n.op == "call_function")
        return make_boxed_func(gm.forward)

    def backend(gm, example_inputs):
        graphs.append(gm)
        return aot_autograd(fw_compiler=keep, bw_compiler=keep)(gm, example_inputs)

    monkeypatch.setattr(torch, "compile", lambda m, **k: torch._dynamo.optimize(backend)(m))
    torch._dynamo.reset()
    d = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"), dtype=torch.float32)
    # compiled() sets these two for the process; the patch puts them back after the test
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False, capture_scalar_outputs=False):
        fast = training.compiled(model, "on", d)
        assert fast is not model
        loss_sums(fast, batch)["loss"].backward()
    torch._dynamo.reset()
    return graphs, ops


def syncing(ops):
    return sorted({str(op) for op in ops if op in SYNCING or op == aten._local_scalar_dense.default})


def test_the_compiled_pmlm_and_seq2seq_steps_are_one_graph_without_a_sync(tokenizer, text_file, monkeypatch):
    """The forward of a PMLM pretraining step and of a UniLMv2 seq2seq fine-tuning step (the same
    model, another layout) compile to one graph each (no graph break: Dynamo captured one), whose
    forward and backward hold no operation that would wait for a GPU."""
    from core.unilm.seq2seq import seq2seq_batch, seq2seq_loss_sums

    model, _, batches, _, _ = pmlm_setup(tokenizer, text_file)
    graphs, ops = compiled_graphs(model, pmlm_loss_sums, batches[0], monkeypatch)
    assert len(graphs) == 1 and ops and syncing(ops) == [], (len(graphs), syncing(ops))
    ids = random_ids(tokenizer)
    batch = seq2seq_batch([(ids(9), ids(3)), (ids(5), ids(6))], tokenizer, 16, 8)
    graphs, ops = compiled_graphs(model, seq2seq_loss_sums, batch, monkeypatch)
    assert len(graphs) == 1 and ops and syncing(ops) == [], (len(graphs), syncing(ops))


def test_the_compiled_elmer_step_is_one_graph(tokenizer, text_file, monkeypatch):
    """ELMER's LPLM step (exit layers drawn per token, its decoder's active tokens indexed layer by
    layer) is one graph too: the counts of active tokens are traced as symbols. Its syncs are those
    counts (nonzero), as in eager mode; nothing else waits."""
    import train
    from core.data import TokenStream, read_texts
    from core.objectives import OBJECTIVES

    o, a = OBJECTIVES["elmer"], train.get_args(["--objective", "elmer", "--model", "tiny", "--permutations", "2"])
    torch.manual_seed(0)
    model = o.model(o.shape(preset("tiny", vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id), a), a)
    stream = TokenStream(tokenizer.encode(read_texts(text_file)[:200]), o.window(32), seed=0, sep=tokenizer.eos_id)
    graphs, ops = compiled_graphs(model, o.loss(a), o.batch(stream, [0, 1, 2], tokenizer, a, model), monkeypatch)
    assert len(graphs) == 1, len(graphs)
    assert syncing(ops) == ["aten.nonzero.default"], syncing(ops)


def test_static_shapes_keep_the_sums(tokenizer, text_file):
    """A PMLM and a seq2seq batch padded to a few shapes (core/pmlm.static_shapes: L to a multiple of
    64, the predicted positions to a multiple of 256): the same loss sums and counts."""
    from core.unilm.pmlm import static_shapes
    from core.unilm.seq2seq import seq2seq_batch, seq2seq_loss_sums

    model, _, batches, _, _ = pmlm_setup(tokenizer, text_file)
    model.eval()
    ids = random_ids(tokenizer)
    s2s = seq2seq_batch([(ids(9), ids(3)), (ids(5), ids(6))], tokenizer, 16, 8)
    for batch, loss_sums in ((batches[0], pmlm_loss_sums), (s2s, seq2seq_loss_sums)):
        padded = static_shapes(batch, tokenizer.pad_id)
        assert padded.tokens.shape[1] % 64 == 0 and padded.predict.numel() % 256 == 0
        assert padded.tokens.shape[1] > batch.tokens.shape[1] and (padded.norm, padded.n_tokens) == (
            batch.norm,
            batch.n_tokens,
        )
        want, got = loss_sums(model, batch), loss_sums(model, padded)
        assert want.keys() == got.keys()
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-4, msg=k)


# -----------------------------------------------------------------------------
# the step these tests (and bench/bench_step.py) take is the one the scripts' loops write out


def step_lines(path):
    """The statements of the optimizer step in `path`, from set_lr to zero_grad, each as ast.unparse
    writes it: the code, whatever its comments and however the formatter lays it out."""
    import ast
    import os

    tree = ast.parse(open(os.path.join(os.path.dirname(__file__), "..", path)).read())
    blocks = [
        b
        for node in ast.walk(tree)
        for _, b in ast.iter_fields(node)
        if isinstance(b, list) and b and isinstance(b[0], ast.stmt)
    ]
    for code in ([ast.unparse(s) for s in block] for block in blocks):
        if "set_lr(optimizer, lr)" in code:
            first = code.index("set_lr(optimizer, lr)")
            return code[first : code.index("optimizer.zero_grad(set_to_none=True)", first) + 1]
    raise AssertionError(f"{path} has no set_lr(optimizer, lr)")


@pytest.mark.parametrize("script", ["train.py", "finetune.py"])
def test_the_step_is_the_scripts_step(script):
    assert step_lines(script) == step_lines("bench/step.py")


@pytest.mark.parametrize("objective", ["t5-nar", "mlae"])
def test_the_compiled_mlae_and_t5_nar_pretraining_steps_are_one_graph_without_a_sync(
    tokenizer, text_file, monkeypatch, objective
):
    """The pretraining models the PMLM's and the seq2seq fine-tunings' do not cover (MLAE's latents
    and decoders, T5-NAR's NAR decoder) under --compile: each forward one graph, no operation in it
    or in its backward that would wait for a GPU."""
    import train
    from core.data import TokenStream, read_texts
    from core.objectives import OBJECTIVES

    o, a = OBJECTIVES[objective], train.get_args(["--objective", objective, "--model", "tiny"])
    torch.manual_seed(0)
    model = o.model(o.shape(preset("tiny", vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id), a), a)
    stream = TokenStream(tokenizer.encode(read_texts(text_file)[:200]), o.window(64), seed=0, sep=tokenizer.eos_id)
    graphs, ops = compiled_graphs(model, o.loss(a), o.batch(stream, [0, 1, 2, 3], tokenizer, a, model), monkeypatch)
    assert len(graphs) == 1 and ops and syncing(ops) == [], (len(graphs), syncing(ops))


@pytest.mark.parametrize("arch", ["t5", "mlae-unilm", "nar"])
def test_the_compiled_encoder_decoder_fine_tuning_steps_are_one_graph_without_a_sync(tokenizer, monkeypatch, arch):
    """The encoder-decoder's AR fine-tuning step (T5's, MLAE's seq2seq style, RoBERTa's: one model),
    MLAE's UniLM style and the CMLM's NAR step under --compile, the same way."""
    from core.architectures import build_model, seq2seq_ops

    torch.manual_seed(0)
    model = build_model(arch, preset("tiny", vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id))
    ops_ = seq2seq_ops(arch)
    ids = random_ids(tokenizer)
    batch = ops_.batch([(ids(9), ids(3)), (ids(5), ids(6))], tokenizer, 16, 8)
    graphs, ops = compiled_graphs(model, lambda m, b: ops_.loss_sums(m, b), batch, monkeypatch)
    assert len(graphs) == 1 and ops and syncing(ops) == [], (len(graphs), syncing(ops))
