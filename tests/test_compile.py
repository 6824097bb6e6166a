"""Every Triton kernel of kernels/ compiles ahead of time for an H100 (sm_90a), the way a GPU would
compile it, with no GPU present: the interpreter that the other kernel tests use accepts code the
GPU compiler refuses. Also checks what the compiled code says about speed: the attention kernels'
matmuls are Hopper wgmma, and no kernel spills registers. Prints the table (pytest -s shows it;
`python -m kernels.aot` prints it alone)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("aot") / "rows.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
    r = subprocess.run([sys.executable, "-m", "kernels.aot", "--json", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    print(r.stdout)
    assert out.exists(), f"kernels.aot wrote no result:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return json.loads(out.read_text())


def test_every_kernel_compiles_for_sm90(rows):
    failed = [f"{r['kernel']} [{r['cases'][0]}]: {r['error'][:300]}" for r in rows if not r["compiles"]]
    assert not failed, "\n".join(failed)


def test_every_attention_variant_is_covered(rows):
    cases = {c for r in rows for c in r["cases"]}
    for variant in ("norel", "rel", "seq", "dense", "dense_grad", "decode", "cross"):
        for dtype in ("bfloat16", "float16"):
            for D in (64, 128):
                assert f"{variant}-{dtype}-d{D}" in cases, f"no compile case {variant}-{dtype}-d{D}"
    kernels = {r["kernel"] for r in rows if r["module"] == "pseudo_attention"}
    assert {"_fwd_kernel", "_bwd_kv_kernel", "_bwd_q_kernel", "_delta_kernel"} <= kernels


def test_attention_matmuls_use_wgmma(rows):
    """Hopper's wgmma in every attention kernel; at D = 64 (every preset's head dim) nothing else.
    (D = 128's dK/dV takes 32-key tiles to avoid a spill, and those matmuls are mma.sync.)"""
    for r in rows:
        if r["compiles"] and r["module"] == "pseudo_attention" and r["kernel"] != "_delta_kernel":
            assert r["wgmma"] > 0, f"{r['kernel']} [{r['cases'][0]}]: no wgmma"
            if r["cases"][0].endswith("-d64"):
                assert r["mma_sync"] == 0, f"{r['kernel']} [{r['cases'][0]}]: mma.sync at D = 64"


def test_far_tile_loop_is_within_1_3x_of_plain_flash_attention(rows):
    """The forward's loop over FAR tiles (FULL, one clamped distance: kernels/tilemap.py) against
    the loop of a plain FlashAttention forward compiled with the same blocks, in SASS instructions
    per thread per iteration: what the tile list and the bias cost on the tiles that dominate long
    sequences."""
    def loops(kernel, case):
        [r] = [r for r in rows if r["kernel"] == kernel and case in r["cases"]]
        return r["loops"]
    for D in (64, 128):
        ours = loops("_fwd_kernel", f"rel-bfloat16-d{D}")
        plain = loops("_plain_flash_fwd", f"plain-flash-bfloat16-d{D}")
        assert len(ours) == 2 and len(plain) == 1, (ours, plain)
        print(f"D={D}: SASS instructions per iteration: FAR loop {ours[1]}, PARTIAL/FULL loop {ours[0]}, "
              f"plain FlashAttention {plain[0]} ({ours[1] / plain[0]:.2f}x)")
        assert ours[1] <= 1.3 * plain[0], f"D={D}: FAR loop {ours[1]} > 1.3 x plain {plain[0]}"


def test_no_kernel_spills(rows):
    spills = [f"{r['kernel']} [{r['cases'][0]}]: {r['registers']} registers, spill {r['spill_stores']}/"
              f"{r['spill_loads']} bytes" for r in rows if r["compiles"] and (r["spill_stores"] or r["spill_loads"])]
    assert not spills, "\n".join(spills)


def test_every_kernel_module_is_compiled(rows):
    """A kernels/*.py that launches a Triton kernel (`name[grid](...)`) must give kernels/aot.py its
    launches (aot_cases). Modules of @triton.jit helpers only (attention_tiles.py) are compiled
    inside the kernels that call them."""
    import glob
    import re
    compiled = {r["module"] for r in rows}
    for path in glob.glob(os.path.join(ROOT, "kernels", "*.py")):
        name = os.path.basename(path)[:-3]
        if re.search(r"\b_\w+_kernel\[[^\]]+\]\(", open(path).read()) and name != "aot":
            assert name in compiled, f"kernels/{name}.py has Triton kernels but no aot_cases() compiled"
