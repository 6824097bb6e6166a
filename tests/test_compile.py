"""Every Triton kernel of kernels/ compiles ahead of time for an H100 (sm_90a), the way a GPU would
compile it, with no GPU present: the interpreter that the other kernel tests use accepts code the
GPU compiler refuses. Also checks what the compiled code says about speed: the attention kernels'
matmuls are Hopper wgmma that ptxas did not serialise, the forward's loops stay within stated
multiples of a plain FlashAttention loop, and no kernel spills registers. Prints the table (pytest -s shows it;
`python -m tools.aot` prints it alone)."""

import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def rows(request):
    """tools.aot --loops --json's rows, compiled in the background from the start of the session
    (tests/conftest.py)."""
    from conftest import aot_rows

    return aot_rows(request.config)


def test_every_kernel_compiles_for_sm90(rows):
    failed = [f"{r['kernel']} [{r['cases'][0]}]: {r['error'][:300]}" for r in rows if not r["compiles"]]
    assert not failed, "\n".join(failed)


def test_every_attention_variant_is_covered(rows):
    cases = {c for r in rows for c in r["cases"]}
    for variant in ("norel", "rel", "rel_frozen", "rel_fused", "seq", "dense", "dense_grad", "decode", "cross"):
        for dtype in ("bfloat16",):
            for D in (64, 128):
                assert f"{variant}-{dtype}-d{D}" in cases, f"no compile case {variant}-{dtype}-d{D}"
    assert "rel_fused_atomics-bfloat16-d64" in cases, "no compile case of the table's gradient by atomics alone"
    kernels = {r["kernel"] for r in rows if r["module"] in ("pseudo_attention", "tilemap")}
    assert {
        "_fwd_kernel",
        "_bwd_kv_kernel",
        "_bwd_q_kernel",
        "_delta_kernel",
        "_codes_kernel",
        "_class_kernel",
        "_list_kernel",
    } <= kernels


def test_attention_matmuls_use_wgmma(rows):
    """Hopper's wgmma in every attention kernel, at every head dim, and nothing else: no mma.sync, and
    no wgmma that ptxas serialised (its C7515 note: each wgmma then waits for the one before)."""
    for r in rows:
        if r["compiles"] and r["module"] == "pseudo_attention" and r["kernel"] != "_delta_kernel":
            assert r["wgmma"] > 0, f"{r['kernel']} [{r['cases'][0]}]: no wgmma"
            assert r["mma_sync"] == 0, f"{r['kernel']} [{r['cases'][0]}]: mma.sync"
            assert not r["wgmma_serialized"], f"{r['kernel']} [{r['cases'][0]}]: ptxas serialised its wgmma"


# SASS per loop iteration of the forward's loops against a plain FlashAttention loop compiled with the
# same blocks, warps and stages (tools/aot.py --loops; docs/kernels.md renders the table). The
# attention issue's bounds are FAR 1.15, FULL 1.35, PARTIAL 2.0. With the relative bias, FULL tiles
# also read a window of the bias table (1.27 at D 64 and 1.28 at D 128 under Triton 3.9, results/aot)
# and PARTIAL ones gather it pair by pair (2.01 and 1.74): bounds with a little room, so that a
# compiler release moving a few instructions does not fail CI while a real regression does.
LOOP_BOUNDS = {False: dict(FULL=1.35, PARTIAL=2.0), True: dict(FAR=1.15, FULL=1.4, GATHER=2.0, PARTIAL=2.2)}


def test_forward_loops_against_plain_flash_attention(rows):
    from tools import aot_tables

    _, table = aot_tables.loop_table(rows)
    seen = 0
    for r in table:
        if (
            r["kernel"] != "_fwd_kernel"
            or r["case"].split("-")[0] not in ("rel", "norel")
            or "bfloat16" not in r["case"]
        ):
            continue
        rel = r["case"].startswith("rel")
        for name, bound in LOOP_BOUNDS[rel].items():
            ratio = r["loops"][name] / r["plain"]
            print(f"{r['case']}: {name} {r['loops'][name]} / plain {r['plain']} = {ratio:.2f} (bound {bound})")
            assert ratio <= bound, f"{r['case']}: {name} loop {ratio:.2f}x plain FlashAttention, bound {bound}"
        seen += 1
    assert seen == 4, f"{seen} forward cases in the loop table"


# The spills the compiler makes today, each bounded in bytes stored: read from the log of the ptxas run
# inside triton.compile (its flags, its cubin), the dQ kernel of the seq2seq layout at head dim 128
# spills a few bytes at CUDA_CONFIGS[128]'s blocks. Blocks of 32 keys avoid it at more SASS per key;
# which runs faster is for a GPU to say (bench/attention_cases.py candidates; python -m
# bench.bench_attention --sweep-only --layouts s2s-1k --dims 128). Any other spill, or this one grown, fails.
KNOWN_SPILLS = {("_bwd_q_kernel", "seq-bfloat16-d128"): 12}


def test_no_preset_runs_at_head_dim_128():
    """The known spill is at D 128, which no preset's heads reach (docs/kernels.md says so)."""
    from core.config import PRESETS, preset

    assert all(preset(name).head_dim <= 64 for name in PRESETS)


def test_no_kernel_spills(rows):
    def allowed(r):
        return max((KNOWN_SPILLS.get((r["kernel"], c), 0) for c in r["cases"]), default=0)

    spills = [
        f"{r['kernel']} [{r['cases'][0]}]: {r['registers']} registers, spill {r['spill_stores']}/"
        f"{r['spill_loads']} bytes"
        for r in rows
        if r["compiles"] and max(r["spill_stores"] or 0, r["spill_loads"] or 0) > allowed(r)
    ]
    assert not spills, "\n".join(spills)


def test_every_kernel_module_is_compiled(rows):
    """A kernels/*.py that launches a Triton kernel (`name[grid](...)`) must have its launches in
    tools/aot_cases.py. Modules of @triton.jit helpers only (attention_tiles.py) are compiled
    inside the kernels that call them."""
    import glob
    import re

    compiled = {r["module"] for r in rows}
    for path in glob.glob(os.path.join(ROOT, "kernels", "*.py")):
        name = os.path.basename(path)[:-3]
        if re.search(r"\b_\w+_kernel\[[^\]]+\]\(", open(path).read()):
            assert name in compiled, f"kernels/{name}.py has Triton kernels but no compile cases in tools/aot_cases.py"


def test_tile_loops_keep_copies_in_flight(rows):
    """Every tile-class loop of the forward and of the fused dK/dV kernel (D 64, relative bias: the
    PMLM layer's) keeps at least one cp.async group in flight at each wait: the next tiles' K and V
    (Q and dO) load while this tile computes. Reading the tile list where the entry is used made the
    FAR loops wait for every outstanding copy (DEPBAR.LE SB0, 0x0) at the top of each iteration.
    (The dK/dV kernel's loops: its five classes', PARTIAL and EDGE twice, tools/aot_tables.py loop_names.)"""
    from tools import aot_tables

    seen = 0
    for r in rows:
        if r["compiles"] and (r["kernel"], r["cases"][0]) in (
            ("_fwd_kernel", "rel-bfloat16-d64"),
            ("_bwd_kv_kernel", "rel_fused-bfloat16-d64"),
        ):
            names = aot_tables.loop_names(r)
            assert names and len(r["loop_waits"]) == len(names), f"{r['kernel']}: loops {r['loops']} not named"
            assert all(w and w >= 1 for w in r["loop_waits"]), (
                f"{r['kernel']} [{r['cases'][0]}]: fewest copy groups in flight per loop {r['loop_waits']}"
            )
            seen += 1
    assert seen == 2


def test_backward_computes_each_product_once_and_leaves_room_for_two_programs(rows):
    """The dK/dV kernel at D 64 and its CUDA configuration, dQ fused and apart, read off its SASS
    (tools/aot_tables.py backward_table):
    each loop iteration's wgmma do exactly the tile's five products (S^T, dP^T, dV, dK and, fused,
    dQ^T: BM x BN x D multiply-adds each) and, in the loops whose tiles sum the table's gradient by
    windows (FULL, PARTIAL, EDGE; up to GRAD_WINDOWS_MAX_D), its two grouping products (BN x BM x NB
    each) - no warpgroup repeats another's rows; where it sums by windows, no atomic add but dQ's
    (BM x D a tile) in the FAR, FULL, PARTIAL and EDGE loops, and the PARTIAL and EDGE loops of the
    programs whose keys do not run compiled apart (PARTIAL atomic, EDGE atomic), which with the
    GATHER loop add each pair's share of the table's gradient (BM x BN a tile) and dQ's; with the
    windows off (Tuning.grad_windows) every loop adds those but FAR, which sums its tile; no spill,
    and registers and shared memory for two programs an SM. (At D 128 one warpgroup spills:
    kernels/attention_plan.CUDA_CONFIGS.)"""
    from tools import aot_tables
    from kernels.attention_plan import CUDA_CONFIGS, GRAD_WINDOWS_MAX_D, grad_blocks

    _, table = aot_tables.backward_table(rows)
    seen = 0
    for r in table:
        cases = ("rel_fused-bfloat16-d64", "rel-bfloat16-d64", "rel_fused_atomics-bfloat16-d64")
        if r["kernel"] != "_bwd_kv_kernel" or r["case"] not in cases:
            continue
        D = 64
        cfg = CUDA_CONFIGS[D]
        fused = r["case"].startswith("rel_fused")  # as tools/aot_cases.py compiles it
        tile = cfg.BMK * cfg.BNK * D
        windows = D <= GRAD_WINDOWS_MAX_D and not r["case"].startswith("rel_fused_atomics")
        grouping = 2 * cfg.BNK * cfg.BMK * grad_blocks(128, cfg.BNK) if windows else 0
        dq = cfg.BMK * D if fused else 0
        if windows:
            assert set(aot_tables.ATOMIC_NAMES) <= set(r["loops"]), f"{r['case']}: loops {list(r['loops'])}"
        for name, loop in r["loops"].items():
            want = (5 if fused else 4) * tile + (grouping if name in ("FULL", "PARTIAL", "EDGE") else 0)
            got = aot_tables.wgmma_macs(loop["wgmma_shapes"], r["num_warps"])
            print(
                f"{r['case']} {name}: {loop['wgmma']} wgmma, {got} multiply-adds (want {want}), "
                f"{loop['atomics']} atomic elements"
            )
            assert got == want, f"{r['case']} {name}: wgmma do {got} multiply-adds, the products {want}"
            if windows and name in ("FAR", "FULL", "PARTIAL", "EDGE"):
                assert loop["atomics"] == dq, f"{r['case']} {name}: {loop['atomics']} atomic elements, dQ's {dq}"
            else:  # GATHER, PARTIAL atomic, EDGE atomic; with no windows, every loop
                adds = dq if name == "FAR" else cfg.BMK * cfg.BNK + dq
                assert loop["atomics"] == adds, f"{r['case']} {name}: {loop['atomics']} atomic elements, {adds}"
        assert r["spill"] == 0 and r["programs_per_sm"] >= 2, (
            f"{r['case']}: {r['registers']} registers at {r['num_warps']} warps, {r['shared']} B shared"
        )
        seen += 1
    assert seen == 3


def test_tile_map_kernels_have_no_loop_and_leave_room_for_many_programs(rows):
    """The map's two kernels (kernels/tilemap.py): no loop in either (every cell, every list of a
    row, at once), and at the CUDA blocks the cell kernel takes at most 128 registers a thread at
    4 warps (four programs an SM or more). The one-launch map of before walked its row of tiles in a
    loop at 233 registers with 8 warps: one program an SM, and a quarter of the PMLM forward kernel's
    time on an H200."""
    seen = set()
    for r in rows:
        if r["compiles"] and r["kernel"] in ("_class_kernel", "_list_kernel"):
            assert r["loops"] == [], f"{r['kernel']} [{r['cases'][0]}]: a loop ({r['loops']} instructions)"
            if r["kernel"] == "_class_kernel":
                assert r["num_warps"] == 4 and r["registers"] <= 128, (
                    f"_class_kernel [{r['cases'][0]}]: {r['registers']} registers at {r['num_warps']} warps"
                )
            seen.add(r["kernel"])
    assert seen == {"_class_kernel", "_list_kernel"}


def test_a_configuration_given_on_the_command_line_is_put_in_force(monkeypatch):
    """tools.aot --config D=...: a sweep's candidate compiled with its own blocks, warps and stages
    (read into the Tuning the compile cases launch with); a malformed one refused in one
    line. (The compile itself runs in the fixture's subprocess: this process has the interpreter.)"""
    import tools.aot as aot

    a = aot.get_args(["--config", "64=64,64,4,3,32,128,4,3,4,3"])
    cfg = a.tuning.config(torch.device("cuda"), 64)
    assert (cfg.BMK, cfg.BNK, cfg.kv_warps) == (32, 128, 4)
    for bad in ("64=1,2", "64", "x=1,2,3,4,5,6,7,8,9,10"):
        with pytest.raises(SystemExit) as e:
            aot.get_args(["--config", bad])
        assert e.value.code == 2
