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
    for variant in ("norel", "rel", "seq", "dense", "dense_grad", "decode"):
        for dtype in ("bfloat16", "float16"):
            for D in (64, 128):
                assert f"{variant}-{dtype}-d{D}" in cases, f"no compile case {variant}-{dtype}-d{D}"
    kernels = {r["kernel"] for r in rows if r["module"] == "pseudo_attention"}
    assert {"_fwd_kernel", "_bwd_kv_kernel", "_bwd_q_kernel", "_delta_kernel"} <= kernels


def test_attention_matmuls_use_wgmma(rows):
    for r in rows:
        if r["compiles"] and r["module"] == "pseudo_attention" and r["kernel"] != "_delta_kernel":
            assert r["wgmma"] > 0 and r["mma_sync"] == 0, f"{r['kernel']} [{r['cases'][0]}]: no wgmma"


def test_no_kernel_spills(rows):
    spills = [f"{r['kernel']} [{r['cases'][0]}]: {r['registers']} registers, spill {r['spill_stores']}/"
              f"{r['spill_loads']} bytes" for r in rows if r["compiles"] and (r["spill_stores"] or r["spill_loads"])]
    assert not spills, "\n".join(spills)
