"""Our attention as PyTorch custom operators, so that torch.compile traces a model through it
without a graph break (train.py --compile):

    textgen::attention_plan(metadata ..., launch, max_dist, backward) -> [q codes, k codes, q_list, q_count,
                                                                           k_list, k_count]
    textgen::attention(q, k, v, plan ..., table, dense, max_dist, scale, has_seq, launch) -> (o, lse)
    textgen::attention_backward(do, q, k, v, o, lse, plan ..., table, dense, ...) -> (dq, dk, dv, dtable, dbias)

The same launchers as kernels/pseudo_attention.py, behind a boundary of tensors and numbers that
the compiler can see: each operator has a fake implementation (the shapes of its outputs, for
tracing) and the forward has its autograd formula (the backward operator). The eager path keeps
the autograd.Function and its dict cache; traced, the plan is an operator's output, built once per
(query, key) metadata and kept in the same per-forward `cache` (core/model.py tile_cache), so that
every layer of a forward reads one plan, as in eager mode. The bias table is extended inside the
forward and the backward operator (two small launches each) rather than cached: a compiled graph
keeps no dict between calls. `launch` is the call's attention_plan.Tuning as numbers (_launch): its
Config for the device and head dim, then fused_dq, table_16bit and grad_windows.
"""

from typing import List, Optional, Tuple

import torch
import triton

from .attention_plan import TUNING, Config, Tuning, _cached, extended_table, launch_of
from .attention_plan import plan as make_plan
from .pseudo_attention import _backward as launch_backward
from .pseudo_attention import _forward as launch_forward
from .pseudo_attention import _sum_to
from .reference import MaskMeta, RelPosBias
from .tilemap import SLOTS, TileMap

Tensor = torch.Tensor
_EMPTY = (0,)  # an absent optional output: custom operators return tensors, never None


def _launch(tuning, device, D):
    """A Tuning as an operator takes it: the Config a launch on `device` at head dim D runs, then
    fused_dq, table_16bit and grad_windows, all ints."""
    return list(tuning.config(device, D)) + [int(tuning.fused_dq), int(tuning.table_16bit), int(tuning.grad_windows)]


def _tuning(launch):
    """The Tuning of a _launch list (its Config for every device and head dim)."""
    n = len(Config._fields)
    cfg = Config(*launch[:n])
    fused_dq, table_16bit, grad_windows = (bool(x) for x in launch[n:])
    return Tuning(cfg, cfg, cfg, fused_dq, table_16bit, grad_windows)


# -----------------------------------------------------------------------------
# the plan: codes and tile map of one (query, key) metadata pair


@torch.library.custom_op("textgen::attention_plan", mutates_args=())
def attention_plan(
    q_kind: Tensor,
    q_step: Tensor,
    k_kind: Tensor,
    k_step: Tensor,
    k_valid: Optional[Tensor],
    q_seq: Optional[Tensor],
    k_seq: Optional[Tensor],
    q_pos: Optional[Tensor],
    k_pos: Optional[Tensor],
    launch: List[int],
    max_dist: int,
    backward: bool,
) -> List[Tensor]:
    """max_dist < 0: no relative bias. backward False: k_list and k_count are empty."""
    cfg = Config(*launch[: len(Config._fields)])
    meta = MaskMeta(q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq)
    qc, kc, tiles = make_plan(None, cfg, meta, q_pos, k_pos, None if max_dist < 0 else max_dist, backward)
    if qc is kc:  # one metadata for queries and keys: an operator's outputs may not alias
        qc = kc.clone()
    empty = q_kind.new_empty(_EMPTY, dtype=torch.int32)
    return [
        qc,
        kc,
        tiles.q_list,
        tiles.q_count,
        empty if tiles.k_list is None else tiles.k_list,
        empty if tiles.k_count is None else tiles.k_count,
    ]


@attention_plan.register_fake
def _(q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, q_pos, k_pos, launch, max_dist, backward):
    cfg = Config(*launch[: len(Config._fields)])
    (B, Lq), Lk = q_kind.shape, k_kind.shape[1]
    n_qt, n_kt, n_qs, n_ks = (
        triton.cdiv(Lq, cfg.BM),
        triton.cdiv(Lk, cfg.BN),
        triton.cdiv(Lq, cfg.BMK),
        triton.cdiv(Lk, cfg.BNK),
    )
    new = lambda *shape: q_kind.new_empty(shape, dtype=torch.int32)  # noqa: E731
    return [
        new(6, B, -(-Lq // 16) * 16),
        new(6, B, -(-Lk // 16) * 16),
        new(B, n_qt, SLOTS, n_kt),
        new(B, n_qt, SLOTS),
        new(B, n_ks, SLOTS, n_qs) if backward else new(*_EMPTY),
        new(B, n_ks, SLOTS) if backward else new(*_EMPTY),
    ]


def _launch_of(q, k, plan, table, dense, max_dist, scale, has_seq, launch):
    """The launchers' attention_plan.Launch of a call from the plan operator's tensors."""
    qc, kc, q_list, q_count, k_list, k_count = plan
    tuning = _tuning(launch)
    cfg = tuning.config(q.device, q.shape[-1])
    backward = k_list.numel() > 0
    tiles = TileMap(
        (cfg.BM, cfg.BN),
        (cfg.BMK, cfg.BNK) if backward else None,
        q_list,
        q_count,
        k_list if backward else None,
        k_count if backward else None,
    )
    ext = None if table is None else extended_table(table, max_dist, tuning.table_dtype(q))
    return launch_of(q, k, qc, kc, tiles, table, ext, dense, max_dist, scale, has_seq, tuning)


# -----------------------------------------------------------------------------
# forward and backward


@torch.library.custom_op("textgen::attention", mutates_args=())
def attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    qc: Tensor,
    kc: Tensor,
    q_list: Tensor,
    q_count: Tensor,
    k_list: Tensor,
    k_count: Tensor,
    table: Optional[Tensor],
    dense: Optional[Tensor],
    max_dist: int,
    scale: float,
    has_seq: bool,
    launch: List[int],
) -> Tuple[Tensor, Tensor]:
    return launch_forward(
        q,
        k,
        v,
        _launch_of(q, k, (qc, kc, q_list, q_count, k_list, k_count), table, dense, max_dist, scale, has_seq, launch),
    )


@attention_forward.register_fake
def _(q, k, v, qc, kc, q_list, q_count, k_list, k_count, table, dense, max_dist, scale, has_seq, launch):
    B, H, Lq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((B, H, Lq), dtype=torch.float32)  # contiguous, as the launcher's


@torch.library.custom_op("textgen::attention_backward", mutates_args=())
def attention_backward(
    do: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    qc: Tensor,
    kc: Tensor,
    q_list: Tensor,
    q_count: Tensor,
    k_list: Tensor,
    k_count: Tensor,
    table: Optional[Tensor],
    dense: Optional[Tensor],
    max_dist: int,
    scale: float,
    has_seq: bool,
    table_grad: bool,
    dense_grad: bool,
    launch: List[int],
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    record = _launch_of(
        q, k, (qc, kc, q_list, q_count, k_list, k_count), table, dense, max_dist, scale, has_seq, launch
    )
    do = do if do.stride(-1) == 1 else do.contiguous()
    dq, dk, dv, dtable, dbias = launch_backward(q, k, v, o, lse, do, record, dense_grad, table_grad=table_grad)
    dtable = dtable.to(table.dtype) if dtable is not None else q.new_empty(_EMPTY)
    dbias = _sum_to(dbias, dense.shape).view(dense.shape).to(dense.dtype) if dbias is not None else q.new_empty(_EMPTY)
    return dq, dk, dv, dtable, dbias


@attention_backward.register_fake
def _(
    do,
    q,
    k,
    v,
    o,
    lse,
    qc,
    kc,
    q_list,
    q_count,
    k_list,
    k_count,
    table,
    dense,
    max_dist,
    scale,
    has_seq,
    table_grad,
    dense_grad,
    launch,
):
    return (
        q.new_empty(q.shape),
        k.new_empty(k.shape),
        v.new_empty(v.shape),
        table.new_empty(table.shape) if table_grad else q.new_empty(_EMPTY),
        dense.new_empty(dense.shape) if dense_grad else q.new_empty(_EMPTY),
    )


def _setup_context(ctx, inputs, output):
    q, k, v, qc, kc, q_list, q_count, k_list, k_count, table, dense, max_dist, scale, has_seq, launch = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], qc, kc, q_list, q_count, k_list, k_count, table, dense)
    ctx.max_dist, ctx.scale, ctx.has_seq, ctx.launch = max_dist, scale, has_seq, launch


def _backward(ctx, do, dlse):
    q, k, v, o, lse, qc, kc, q_list, q_count, k_list, k_count, table, dense = ctx.saved_tensors
    table_grad, dense_grad = ctx.needs_input_grad[9], ctx.needs_input_grad[10]
    dq, dk, dv, dtable, dbias = attention_backward(
        do,
        q,
        k,
        v,
        o,
        lse,
        qc,
        kc,
        q_list,
        q_count,
        k_list,
        k_count,
        table,
        dense,
        ctx.max_dist,
        ctx.scale,
        ctx.has_seq,
        table_grad,
        dense_grad,
        ctx.launch,
    )
    return (
        (dq, dk, dv)
        + (None,) * 6
        + (dtable if table_grad else None, dbias if dense_grad else None, None, None, None, None)
    )


attention_forward.register_autograd(_backward, setup_context=_setup_context)


# -----------------------------------------------------------------------------
# the public function, as kernels.attention calls it while torch.compile traces


def attention(q, k, v, meta, bias=None, scale=None, cache=None, tuning=TUNING):
    """kernels.attention's Triton backend through the operators (same contract as
    pseudo_attention.pseudo_attention; the operators take a MaskMeta's tensors one by one). cache: the
    per-forward dict in which the plan is kept."""
    rel = isinstance(bias, RelPosBias)
    D = q.shape[-1]
    table = bias.by_distance if rel else None
    dense = bias if bias is not None and not rel else None
    M = int(bias.max_distance) if rel else -1
    q_pos, k_pos = (bias.q_pos, bias.k_pos) if rel else (None, None)
    grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, k, v, table, dense))
    refs = tuple(meta) + (q_pos, k_pos)
    launch = _launch(tuning, q.device, D)
    plan = _cached(
        cache,
        ("op-plan", tuple(launch[:-2]), M, grad),
        refs,
        lambda: attention_plan(*meta, q_pos, k_pos, launch, M, grad),
    )
    scale = D**-0.5 if scale is None else float(scale)
    o, _ = attention_forward(q, k, v, *plan, table, dense, max(M, 0), scale, meta.q_seq is not None, launch)
    return o
