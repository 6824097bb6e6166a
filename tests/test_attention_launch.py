"""How the pseudo-mask attention is launched, each checked against kernels/reference.py: the
launcher's checks of its inputs, tiles that are never loaded, the blocks CUDA uses run by the
interpreter, and every choice of kernels/attention_plan.Tuning (dQ fused, the 16-bit table, the
sweep's candidates). Layouts and run_case: tests/test_attention_layouts.py. Runs under
TRITON_INTERPRET=1 on CPU (set in conftest.py)."""

import pytest
import torch

import test_attention_layouts as layouts
from kernels import MaskMeta, reference
from test_attention_layouts import (
    DEVICE,
    blind_layout,
    causal_layout,
    cross_layout,
    decoding_layout,
    gen,
    key_tiles,
    mlae_cross_layout,
    pa,
    packed_layout,
    pmlm_layout,
    pmlm_positions,
    random_layout,
    report,
    run_case,
    tile_classes,
)
from test_attention_layouts import poison  # noqa: F401  (autouse: outputs start as NaN)


@pytest.mark.parametrize("D", [64, 128])
def test_cross_attention_with_the_cuda_launch_configuration(D):
    """The blocks, warps and stages the launchers pick on a GPU, run by the interpreter: MLAE (b)'s
    layout, sorted positions with M = 8, where whole tiles are FAR, and PMLM with its position ids,
    whose key tiles sum the table's gradient both ways."""
    from kernels import attention_plan

    cfg = attention_plan.CUDA_CONFIGS[D]
    tuning = attention_plan.Tuning(interpret=cfg)
    layout, pos = mlae_cross_layout(2, 300, gen(23))
    run_case(layout, bias="rel", M=128, pos=pos, D=D, H=1, tuning=tuning)
    run_case(cross_layout(2, 150, 300), bias="rel", M=8, sorted_pos=True, D=D, H=1, tuning=tuning)
    layout = pmlm_layout(1, 200, gen(24))
    pos = pmlm_positions(layout, gen(25))
    running, not_running = key_tiles(pos, layout[4], cfg.BNK)
    assert running > 0 and not_running > 0
    run_case(layout, bias="rel", M=128, pos=(pos, pos), D=D, H=1, tuning=tuning)
    pos = torch.arange(150).expand(2, 150), torch.arange(300).expand(2, 300)
    assert tile_classes(cross_layout(2, 150, 300), pos, 8, (cfg.BM, cfg.BN))[..., 2].sum() > 0


def test_empty_tiles_are_never_loaded():
    """Keys of a tile that no query may see hold NaN: any load of that tile would spread it."""
    layout = list(causal_layout(2, 192))
    valid = torch.ones(2, 192, dtype=torch.bool)
    valid[0, 64:128] = False  # whole key tiles of row 0 (16 or 64 wide) are padding: EMPTY for every query tile
    layout[4] = valid
    layout = MaskMeta(*(x if x is None else x.to(DEVICE) for x in layout))
    g = gen(7)
    q, k, v = (torch.randn(2, 2, 192, 16, generator=g).to(DEVICE) for _ in range(3))
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[0, :, 64:128], v_nan[0, :, 64:128] = float("nan"), float("nan")
    out = pa.pseudo_attention(q, k_nan, v_nan, layout)
    ref = reference.attention(q, k, v, layout)
    assert torch.allclose(out, ref, atol=2e-5), report("output", out, ref)


def test_launcher_rejects_bad_inputs():
    q = torch.randn(1, 1, 8, 16, device=DEVICE)
    kind = torch.zeros(1, 8, dtype=torch.long, device=DEVICE)
    q24 = torch.randn(1, 1, 8, 24, device=DEVICE)
    with pytest.raises(AssertionError, match="head dim"):
        pa.pseudo_attention(q24, q24, q24, MaskMeta(kind, kind, kind, kind))
    with pytest.raises(AssertionError, match="must be \\(B, L\\)"):
        pa.pseudo_attention(q, q, q, MaskMeta(kind[:, :5], kind, kind, kind))
    with pytest.raises(AssertionError, match="share one of"):
        pa.pseudo_attention(q, q.double(), q, MaskMeta(kind, kind, kind, kind))


# -----------------------------------------------------------------------------
# the fused backward: dQ added by atomics from the dK/dV kernel (attention_plan.Tuning.fused_dq)


@pytest.mark.parametrize(
    "case", ["random", "pmlm-rel", "dense-grad", "packed", "blind", "decoding", "frozen-table", "cuda-config"]
)
def test_the_fused_backward(case):
    """Every flag of the dK/dV kernel with dQ fused (no bias, the relative bias and its table's
    gradient, a dense bias with gradient, packed sequences, a row that sees nothing, a query tile
    at Lq's edge, a frozen table) and the blocks CUDA uses: the reference's output and gradients."""
    from kernels import attention_plan

    assert attention_plan.TUNING.fused_dq, "the default tuning fuses dQ"
    q128 = torch.zeros(1, 1, 4, 128, device=DEVICE)
    kind = torch.zeros(1, 4, dtype=torch.long, device=DEVICE)
    assert not attention_plan.prepare(q128, q128, q128, MaskMeta(kind, kind, kind, kind))[0].fused, (
        "D 128 keeps two kernels"
    )
    if case == "random":
        run_case(random_layout(2, 45, 70, gen(40)), seed=40)
    elif case == "pmlm-rel":
        run_case(pmlm_layout(2, 60, gen(41)), bias="rel", D=32)
    elif case == "dense-grad":
        run_case(random_layout(1, 30, 50, gen(42)), bias="broadcast", scale=0.3)
    elif case == "packed":
        run_case(packed_layout(2, 90, gen(43)), bias="rel")
    elif case == "blind":
        out, grads = run_case(blind_layout(2, 50), bias="rel")
        assert (grads[0][:, :, :20] == 0).all()
    elif case == "decoding":
        run_case(decoding_layout(2, 1, 70), bias="rel", D=32)
    elif case == "frozen-table":
        layouts.test_a_bias_table_without_gradient()
    else:
        tuning = attention_plan.Tuning(interpret=attention_plan.CUDA_CONFIGS[64])
        layout, pos = mlae_cross_layout(2, 300, gen(44))
        run_case(layout, bias="rel", M=128, pos=pos, D=64, H=1, tuning=tuning)


# -----------------------------------------------------------------------------
# the table's gradient pair by pair everywhere (attention_plan.Tuning.grad_windows off)


def test_the_table_gradient_by_atomics_alone():
    """With grad_windows off the dK/dV kernel adds every pair's share of the table's gradient by an
    atomic, in its FULL and FAR loops too, the programs whose keys run included: the reference's
    output and gradients, with positions that run (sorted, M = 8: FULL, FAR and PARTIAL tiles)."""
    from kernels import attention_plan

    tuning = attention_plan.Tuning(grad_windows=False)
    q = torch.zeros(1, 1, 4, 16, device=DEVICE)
    kind = torch.zeros(1, 4, dtype=torch.long, device=DEVICE)
    assert not attention_plan.prepare(q, q, q, MaskMeta(kind, kind, kind, kind), tuning=tuning)[0].windows
    assert attention_plan.prepare(q, q, q, MaskMeta(kind, kind, kind, kind))[0].windows, "windows by default"
    run_case(pmlm_layout(1, 70, gen(53)), bias="rel", M=8, sorted_pos=True, tuning=tuning)


# -----------------------------------------------------------------------------
# the relative bias table in 16 bits (attention_plan.Tuning.table_16bit)


@pytest.mark.parametrize("fused", [False, True])
def test_a_16_bit_bias_table(fused):
    """With table_16bit the kernels read the extended table in q's dtype (fp16 here: the interpreter
    cannot run a bf16 tl.dot): FULL tiles' windows, FAR tiles' two values and PARTIAL tiles' gathers,
    in the forward and both backwards, within fp16's tolerance of the reference, the table's gradient
    included; float32 q keeps a float32 table."""
    from kernels import attention_plan

    tuning = attention_plan.Tuning(table_16bit=True, fused_dq=fused)
    q = torch.zeros(1, 1, 4, 16, device=DEVICE)
    kind = torch.zeros(1, 4, dtype=torch.long, device=DEVICE)
    pos = torch.arange(4, device=DEVICE)[None]
    bias = reference.RelPosBias(torch.zeros(1, 13, device=DEVICE), pos, pos, 6)
    for dt in (torch.float16, torch.float32):
        meta = attention_plan.prepare(
            q.to(dt), q.to(dt), q.to(dt), MaskMeta(kind, kind, kind, kind), bias=bias, tuning=tuning
        )[0]
        assert meta.table.dtype == (torch.float16 if dt == torch.float16 else torch.float32)
    run_case(pmlm_layout(2, 60, gen(50)), D=32, dtype=torch.float16, bias="rel", sorted_pos=True, tuning=tuning)
    run_case(pmlm_layout(2, 60, gen(51)), D=32, dtype=torch.float16, bias="rel", tuning=tuning)


# -----------------------------------------------------------------------------
# the block sweep's candidates (bench/attention_cases.candidates): blocks a GPU run may pick


def _swept_shapes():
    """The candidates whose blocks or backward structure differ from CUDA_CONFIGS' (warps and
    stages do not change what the interpreter computes)."""
    from bench.attention_cases import candidates
    from kernels import attention_plan

    shape = lambda cfg, fused: (cfg.BM, cfg.BN, cfg.BMK, cfg.BNK, fused)  # noqa: E731
    out = []
    for D in (64, 128):
        seen = {shape(attention_plan.CUDA_CONFIGS[D], attention_plan.TUNING.fused(D))}
        for cfg, fused in candidates(D):
            key = shape(cfg, bool(fused) and D <= 64)
            if key not in seen:
                seen.add(key)
                out.append((D, cfg, bool(fused)))
    return out


@pytest.mark.parametrize("D, cfg, fused", _swept_shapes(), ids=lambda x: str(tuple(x)) if isinstance(x, tuple) else x)
def test_every_swept_candidate_is_the_reference(D, cfg, fused):
    """What --sweep may pick on a GPU, run by the interpreter with its blocks and backward: a PMLM
    layout with the relative bias, long enough to cross the widest block, and sorted positions with
    M = 8, whose far tiles read one clamped distance."""
    from kernels import attention_plan

    tuning = attention_plan.Tuning(interpret=cfg, fused_dq=fused)
    run_case(pmlm_layout(1, 200, gen(60)), bias="rel", M=128, D=D, H=1, tuning=tuning)
    run_case(pmlm_layout(1, 200, gen(61)), bias="rel", M=8, sorted_pos=True, D=D, H=1, tuning=tuning)
