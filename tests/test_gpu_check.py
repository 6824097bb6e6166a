"""bench/gpu_check.py's CPU side: its arguments, the wheels it names, its one-line refusal, its caches."""

import os
import subprocess
import sys

import pytest
import torch

from bench import gpu_check, gpu_lease
from conftest import ROOT


def test_every_module_it_imports_is_found_as_it_is_run():
    """`python -m bench.gpu_check` from the root has no bench/ on its path: each module the script
    imports, at its top or inside a part, must be found from there."""
    code = (
        "import ast, importlib.util; t = ast.parse(open('bench/gpu_check.py').read() + "
        "open('bench/gpu_lease.py').read()); "
        "mods = {a.name for n in ast.walk(t) if isinstance(n, ast.Import) for a in n.names} | "
        "{n.module for n in ast.walk(t) if isinstance(n, ast.ImportFrom) and n.level == 0}; "
        "print(sorted(m for m in mods if importlib.util.find_spec(m) is None))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_arguments():
    args = gpu_check.get_args(["--part", "pmlm", "--out", "x", "--steps", "20"])
    assert (args.part, args.out, args.steps, args.wheels) == ("pmlm", "x", 20, False)
    assert gpu_check.get_args(["--wheels"]).part is None
    for bad in (
        [],
        ["--part", "everything"],
        ["--part", "pmlm", "--steps", "0"],
        ["--part", "pmlm", "--loss-tolerance", "nan"],
    ):
        with pytest.raises(SystemExit) as e:
            gpu_check.get_args(bad)
        assert e.value.code == 2, bad
    assert set(gpu_check.PARTS) == {
        "tests-kernels",
        "tests-rest",
        "bench",
        "profile",
        "pmlm",
        "speed",
        "decode",
        "step",
        "tune",
    }
    assert set(gpu_check.RUNS) == set(gpu_check.PARTS)
    for bad in (["--part", "speed", "--budget", "0"],):
        with pytest.raises(SystemExit):
            gpu_check.get_args(bad)


def test_every_benchmark_is_run_with_a_target():
    scripts = sorted(
        f"bench.{f[:-3]}"
        for f in os.listdir(os.path.join(ROOT, "bench"))
        if f.startswith("bench_") and f.endswith(".py")
    )
    assert sorted(s for s, _, _ in gpu_check.BENCHES) == scripts
    assert all(target for _, _, target in gpu_check.BENCHES)
    assert all(os.path.exists(os.path.join(ROOT, f)) for f in gpu_check.KERNEL_TESTS)


def test_a_benchmark_of_trained_models_waits_for_them(monkeypatch, tmp_path):
    latency = [b for b in gpu_check.BENCHES if b[0] == "bench.bench_latency"]
    assert latency and all(a.startswith("checkpoints/reproduce-gpu/") for a in latency[0][1])
    monkeypatch.setattr(gpu_check, "BENCHES", [(latency[0][0], ["checkpoints/no-such-run/best.pt"], latency[0][2])])
    monkeypatch.setattr(gpu_check.Report, "run", lambda *a, **k: pytest.fail("ran a benchmark without its checkpoints"))
    rep = gpu_check.Report(str(tmp_path))
    gpu_check.part_bench(rep)
    text = open(rep.rows_path).read()
    assert "not run" in text and "checkpoints/no-such-run/best.pt missing" in text and "reproduce --budget gpu" in text


def test_wheel_list(monkeypatch, capsys):
    assert gpu_lease.GPU_IMAGE_LACKS == ["rouge-score", "nltk"]
    build, install = gpu_lease.wheel_commands(gpu_lease.GPU_IMAGE_LACKS)
    assert build == "python3 -m pip wheel --no-deps -w wheels rouge-score nltk"
    assert install == "python3 -m pip install --no-index --no-deps wheels/*.whl"
    monkeypatch.setitem(gpu_lease.NEEDED, "no_such_module_here", "no-such-dist")
    assert "no-such-dist" in gpu_lease.missing_here() and "numpy" not in gpu_lease.missing_here()
    assert gpu_check.main(["--wheels"]) == 0
    out = capsys.readouterr().out
    assert build in out and install in out and "no-such-dist" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is what a machine without CUDA says")
def test_refuses_on_a_cpu_in_one_line(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--part", "bench", "--out", str(tmp_path / "g")],
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "CUDA" in lines[0], r.stderr
    assert not os.path.exists(tmp_path / "g")


def test_the_compilation_caches_go_to_one_folder_and_come_back_packed(monkeypatch, tmp_path):
    import tarfile

    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.setenv(var, "unset")  # restored after the test
    folder = gpu_lease.use_cache(str(tmp_path / "cache"))
    assert os.environ["TRITON_CACHE_DIR"] == os.path.join(folder, "triton")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(folder, "inductor")
    (tmp_path / "cache" / "triton" / "kernel.cubin").write_bytes(b"x")
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(gpu_lease.pack_cache(folder, str(out))) as tar:
        assert "gpu-cache/triton/kernel.cubin" in tar.getnames()


def test_tune_sweeps_then_times_the_steps_with_what_the_sweep_saved(monkeypatch, tmp_path):
    """--part tune: a stale file of an older sweep is removed first; the steps run only when the
    sweep saved a file, each with ours as planned, ours-swept on that file and SDPA with the mask."""
    swept = tmp_path / "swept.json"
    swept.write_text("{}")  # an older sweep's
    monkeypatch.setattr(gpu_check, "ROOT", str(tmp_path))
    monkeypatch.setattr(gpu_check, "SWEPT", "swept.json")
    ran = []

    def run(self, cmd, env=None, timeout=560):
        ran.append(cmd)
        if "bench.bench_attention" in cmd and saves:
            swept.write_text('{"64": [64, 64, 4, 3, 64, 64, 4, 3, 4, 3], "fused_dq": false}')
        return 0, "done", 1.0

    monkeypatch.setattr(gpu_check.Report, "run", run)
    args = gpu_check.get_args(["--part", "tune", "--out", str(tmp_path / "out")])
    for saves in (False, True):
        ran.clear()
        gpu_check.part_tune(gpu_check.Report(args.out), args)
        if not saves:
            assert len(ran) == 1 and not swept.exists()
            assert "skipped (the sweep saved no configuration)" in open(tmp_path / "out" / "results.md").read()
    sweep, *steps = ran
    assert "--sweep-only" in sweep and sweep[sweep.index("--save-configs") + 1] == str(swept)
    assert len(steps) == 2 and all(s[s.index("--methods") + 1] == "ours,ours-swept,sdpa-mask" for s in steps)
    assert all(s[s.index("--configs") + 1] == str(swept) for s in steps)
    assert (tmp_path / "out" / "swept-configs.json").exists()


def test_the_prepared_call_fits_its_eight_minutes_and_runs_every_step_and_method(monkeypatch, tmp_path):
    """--part all on a GPU (its commands recorded, none run): the correctness tests on CUDA, the PMLM
    step with ours, SDPA with and without its mask and Flex, eager, compiled and as CUDA graphs, the
    seq2seq step, the per-layer harness, each JSON under OUT; the steps' caps and the profile's share
    within the 480 s budget, and the output folder named after the device and the day."""
    import argparse
    import time

    ran = []
    monkeypatch.setattr(
        gpu_check.Report, "run", lambda self, cmd, env=None, timeout=560: ran.append((cmd, timeout)) or (0, "done", 1.0)
    )
    monkeypatch.setattr(gpu_check, "part_profile", lambda rep, objectives, tiny=False: ran.append((["profile"], 0)))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = gpu_check.get_args(["--part", "all", "--out", str(tmp_path)])
    assert args.budget == gpu_check.ALL_BUDGET == 480
    gpu_check.part_all(gpu_check.Report(str(tmp_path)), args)
    cmds = [" ".join(c) for c, _ in ran]
    assert "tests/test_attention_op.py" in cmds[0] and "tests/test_step_syncs.py" in cmds[0]
    pmlm = next(c for c in ran if "--objective" in c[0] and c[0][c[0].index("--objective") + 1] == "pmlm")[0]
    methods = pmlm[pmlm.index("--methods") + 1].split(",")
    assert {"ours", "sdpa-mask", "sdpa-nomask", "flex", "ours:compiled", "ours:graph"} <= set(methods)
    assert any("--objective s2s" in c for c in cmds) and any("bench.bench_attention" in c for c in cmds)
    from bench import bench_step

    for _, step_methods, _ in gpu_check.ALL_STEPS:  # every method one bench_step.py knows, in a mode it has
        for m in step_methods.split(","):
            assert bench_step.method_of(m) in bench_step.METHODS and bench_step.mode_of(m) in bench_step.MODES, m
    s2s = next(methods for objective, methods, _ in gpu_check.ALL_STEPS if objective == "s2s").split(",")
    assert "ours-atomics" in s2s  # the seq2seq step without the windows (docs/kernels.md)
    assert all(str(tmp_path) in c[c.index("--json") + 1] for c, _ in ran if "--json" in c)
    assert cmds[-1] == "profile"
    assert sum(cap for _, _, cap in gpu_check.ALL_STEPS) + 120 + 60 + 40 <= args.budget
    name = gpu_check.default_out(argparse.Namespace(out=None, part="all"), "NVIDIA H200")
    assert name == os.path.join(ROOT, "results", f"h200-{time.strftime('%Y-%m-%d')}")
    assert gpu_check.default_out(argparse.Namespace(out=None, part="pmlm"), "NVIDIA H200") == "gpu_check"


@pytest.mark.skipif(
    torch.cuda.is_available() or not os.environ.get("TEXTGEN_REHEARSAL"),
    reason="the CPU's rehearsal of the GPU call, minutes long: run it before a GPU call with "
    "TEXTGEN_REHEARSAL=1 python -m pytest tests/test_gpu_check.py",
)
def test_the_prepared_call_runs_end_to_end_at_tiny_shapes(tmp_path):
    """python -m bench.gpu_check --part all --tiny on a CPU: every step runs to its end (the steps with
    the CPU's methods, compiled and graph modes at the compiler's tracing, the harness under the
    interpreter, the profile), and OUT holds the environment, the rows and each JSON."""
    import json

    out = tmp_path / "g"
    r = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--part", "all", "--tiny", "--out", str(out), "--budget", "3000"],
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    env = json.loads((out / "environment.json").read_text())
    assert {"device", "torch", "triton", "commit", "date", "command"} <= set(env) and "--part all" in env["command"]
    rows = (out / "results.md").read_text()
    steps = [
        l
        for l in rows.split("### all: steps")[1].split("###")[0].splitlines()
        if l.startswith("| ") and not l.startswith("| step")
    ]
    assert len(steps) == 4 and all(l.split("|")[2].strip() == "0" for l in steps), steps
    assert "kernels / wall" in rows
    pmlm = json.loads((out / "step-pmlm.json").read_text())
    assert pmlm["complete"] and [r["mode"] for r in pmlm["rows"]] == ["eager", "compiled", "graph"]
    assert json.loads((out / "step-s2s.json").read_text())["complete"]
    assert json.loads((out / "attention.json").read_text())["complete"]
