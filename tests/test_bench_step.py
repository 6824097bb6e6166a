"""bench/bench_step.py on the CPU (--smoke): every method timed in interleaved rounds, each method
first in one round, and the JSON written with each round's time."""

import argparse
import json

import pytest

from bench import bench_step


def test_each_round_rotates_the_methods():
    order = bench_step.rounds(argparse.Namespace(methods=["ours", "sdpa-mask", "flex"], rounds=3))
    assert sorted(r[0] for r in order) == ["flex", "ours", "sdpa-mask"]
    assert all(sorted(r) == ["flex", "ours", "sdpa-mask"] for r in order)


def test_the_smoke_run_times_every_method_in_rounds(tmp_path, monkeypatch):
    path, written = tmp_path / "step.json", []
    real = bench_step.write_json
    monkeypatch.setattr(
        bench_step, "write_json", lambda p, out: written.append(json.loads(json.dumps(out))) or real(p, out)
    )
    out = bench_step.main(["--smoke", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert (
        [r["method"] for r in saved["rows"]]
        == [r["method"] for r in out["rows"]]
        == ["sdpa-mask", "sdpa-nomask", "reference"]
    )
    assert saved["complete"] and saved["rounds"] == 2
    assert saved["dense_flops_per_step"] > saved["flops_per_step"]  # padding and invisible pairs computed
    assert saved["ratio_base"] == "sdpa-mask"  # no ours on a CPU: the first method
    for r in saved["rows"]:
        assert len(r["round_ms"]) == 2 and r["step_ms"] > 0 and r["warmup_s"] > 0 and r["kernels"]
        assert abs(r["base_over"] - saved["rows"][0]["tokens_per_s"] / r["tokens_per_s"]) < 1e-9
        assert r["kernel_total_ms"] >= sum(r["kernel_ms"]) > 0 and r["attention"]
        assert abs(sum(r["round_ms"]) / 2 - r["step_ms"]) < 1e-6 * r["step_ms"]
        assert len(r["kernel_ms"]) == len(r["kernels"]) and r["kernel_ms"] == sorted(r["kernel_ms"], reverse=True)
        assert r["kernel_ms"][0] > 0
    losses = {r["method"]: r["loss"] for r in saved["rows"]}
    assert abs(losses["sdpa-mask"] - losses["reference"]) < 1e-2  # the same model, batches and steps
    # a run cut short after its first round leaves every method's timing of that round on disk
    first = written[0]
    assert not first["complete"] and [len(r["round_ms"]) for r in first["rows"]] == [1, 1, 1]
    assert all(r["tokens_per_s"] > 0 and "host_syncs" not in r for r in first["rows"])


def test_ours_swept_runs_the_file_its_run_was_given_and_ours_atomics_no_windows(tmp_path, monkeypatch):
    """--methods ours-swept needs --configs and the other way round (refused in one line); the
    method's model launches its attention with the file's configurations, ours's with the plan's own,
    and no module global holds a tuning."""
    import pytest
    import torch

    import kernels
    from core.config import preset
    from core.model import Attention
    from kernels import attention_plan

    for bad in (
        ["--methods", "ours-swept"],
        ["--configs", str(tmp_path / "x.json")],
        ["--methods", "ours-swept", "--configs", str(tmp_path / "none.json")],
    ):
        with pytest.raises(SystemExit) as e:
            bench_step.get_args(bad + ["--smoke"])
        assert e.value.code == 2, bad
    path = tmp_path / "swept.json"
    path.write_text(json.dumps({"64": list(attention_plan.CUDA_CONFIGS[64]._replace(kv_warps=8)), "fused_dq": False}))
    args = argparse.Namespace(configs=str(path), objective="pmlm")
    cfg = preset("tiny", vocab_size=50)
    made = {
        name: bench_step.Method(
            name, args, [], lambda: torch.nn.Sequential(Attention(cfg)), torch.device("cpu"), torch.float32
        )
        for name in ("ours", "ours-swept", "ours-atomics")
    }
    tuning = made["ours-swept"].model[0].tuning
    assert tuning.config(torch.device("cuda"), 64).kv_warps == 8 and not tuning.fused_dq
    assert made["ours"].model[0].tuning is None  # the default: attention_plan.TUNING
    assert made["ours-atomics"].model[0].tuning == attention_plan.TUNING._replace(grad_windows=False)
    assert not hasattr(kernels, "_tuning")


def test_the_modes_run_in_one_interleaved_run(tmp_path):
    """METHOD:MODE rows beside the eager ones: compiled (the compiler's tracing only, in a smoke run)
    and graph (its batches padded to a few shapes), the same losses as eager."""
    out = bench_step.main(
        ["--smoke", "--methods", "reference,reference:compiled,reference:graph", "--json", str(tmp_path / "s.json")]
    )
    rows = {r["method"]: r for r in out["rows"]}
    assert list(rows) == ["reference", "reference:compiled", "reference:graph"]
    assert [r["mode"] for r in rows.values()] == ["eager", "compiled", "graph"]
    for r in rows.values():
        assert abs(r["loss"] - rows["reference"]["loss"]) < 1e-3 * abs(rows["reference"]["loss"])
    for bad in ("reference:fast", "reference,reference:eager"):
        with pytest.raises(SystemExit) as e:
            bench_step.get_args(["--smoke", "--methods", bad])
        assert e.value.code == 2, bad


def test_every_step_table_says_ours_speed_over_the_others(tmp_path):
    """The rendered table (tools/render_bench.step): one column, ours' tokens/s over each method's, so
    a method slower than ours reads above 1, each round's ratio beside; and what ran each attention."""
    from tools.render_bench import step

    rows = [
        dict(
            method=m,
            step_ms=ms,
            round_ms=[ms - 1, ms + 1],
            tokens_per_s=1e6 / ms,
            tflops=1.0,
            mfu=None,
            host_syncs="none",
            kernels=k,
            kernel_ms=[1.0],
            kernel_total_ms=ms / 2,
        )
        for m, ms, k in (
            ("sdpa-mask", 150.0, ["fmha_cutlassB_bf16_aligned_64x64_k64_sm80"]),
            ("ours", 100.0, ["_bwd_kv_kernel"]),
        )
    ]
    path = tmp_path / "step.json"
    path.write_text(
        json.dumps(
            dict(
                device="GPU",
                torch="2",
                triton="3",
                commit="abc",
                date="d",
                model="base",
                objective="pmlm",
                tokens_per_step=1,
                flops_per_step=1.0,
                flop_count="x",
                command="c",
                rows=rows,
            )
        )
    )
    text = step(str(path))
    assert "| ours' speed over it |" in text
    line = next(l for l in text.splitlines() if l.startswith("| sdpa-mask"))
    assert "| 1.50x (rounds 1.50-1.51) |" in line and "SDPA, memory-efficient (CUTLASS)" in line and "| 75.0 |" in line
    assert "| 1.00x |" in next(l for l in text.splitlines() if l.startswith("| ours"))


def test_the_compile_cost_table_counts_the_compile_against_a_default_run(tmp_path):
    """tools/render_bench.compile_cost: a CPU's eager and compiled rows read in processor time, the
    compile charged once (the compiled warm-up over the eager one's) and the verdict over train.py's
    default --steps, both ways round."""
    from tools.render_bench import compile_cost
    import train

    steps = train.get_args([]).steps

    def table(compiled_ms, compile_s):
        rows = [
            dict(mode=mode, step_ms=5e3, step_cpu_ms=ms, round_cpu_ms=[ms], warmup_cpu_s=w)
            for mode, ms, w in (("eager", 1000.0, 10.0), ("compiled", compiled_ms, 10.0 + compile_s))
        ]
        path = tmp_path / "c.json"
        path.write_text(
            json.dumps(dict(device="CPU", dtype="float32", torch="2", commit="abc", date="d", command="c", rows=rows))
        )
        return compile_cost(str(path))

    fast = table(900.0, 0.05 * steps)  # saves 0.1 s a step, costs half of that over the run
    assert "| compiled | 900 |" in fast and "1.111x" in fast and f"pays back after {steps // 2} steps" in fast
    assert fast.rstrip().endswith("so compiled is the faster.")
    slow = table(900.0, 0.2 * steps)  # costs twice what it saves over the run
    assert slow.rstrip().endswith("so eager is the faster.")
    assert "never pays back" in table(1100.0, 1.0)
