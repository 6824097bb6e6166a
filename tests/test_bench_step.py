"""bench/bench_step.py on the CPU (--smoke): every method timed in interleaved rounds, each method
first in one round, and the JSON written with each round's time."""
import argparse
import json

from bench import bench_step


def test_each_round_rotates_the_methods():
    order = bench_step.rounds(argparse.Namespace(methods=["ours", "sdpa-mask", "flex"], rounds=3))
    assert sorted(r[0] for r in order) == ["flex", "ours", "sdpa-mask"]
    assert all(sorted(r) == ["flex", "ours", "sdpa-mask"] for r in order)


def test_the_smoke_run_times_every_method_in_rounds(tmp_path, monkeypatch):
    path, written = tmp_path / "step.json", []
    real = bench_step.write_json
    monkeypatch.setattr(bench_step, "write_json",
                        lambda p, out: written.append(json.loads(json.dumps(out))) or real(p, out))
    out = bench_step.main(["--smoke", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert [r["method"] for r in saved["rows"]] == [r["method"] for r in out["rows"]] == \
        ["sdpa-mask", "sdpa-nomask", "reference"]
    assert saved["complete"] and saved["rounds"] == 2
    assert saved["dense_flops_per_step"] > saved["flops_per_step"]  # padding and invisible pairs computed
    for r in saved["rows"]:
        assert len(r["round_ms"]) == 2 and r["step_ms"] > 0 and r["warmup_s"] > 0 and r["kernels"]
        assert abs(sum(r["round_ms"]) / 2 - r["step_ms"]) < 1e-6 * r["step_ms"]
        assert len(r["kernel_ms"]) == len(r["kernels"]) and r["kernel_ms"] == sorted(r["kernel_ms"], reverse=True)
        assert r["kernel_ms"][0] > 0
    losses = {r["method"]: r["loss"] for r in saved["rows"]}
    assert abs(losses["sdpa-mask"] - losses["reference"]) < 1e-2  # the same model, batches and steps
    # a run cut short after its first round leaves every method's timing of that round on disk
    first = written[0]
    assert not first["complete"] and [len(r["round_ms"]) for r in first["rows"]] == [1, 1, 1]
    assert all(r["tokens_per_s"] > 0 and "host_syncs" not in r for r in first["rows"])


def test_ours_swept_runs_the_file_its_run_was_given(tmp_path, monkeypatch):
    """--methods ours-swept needs --configs and the other way round (refused in one line); the
    method runs its steps under the file's configurations, ours under the plan's own."""
    import pytest
    import torch

    from kernels import attention_plan
    for bad in (["--methods", "ours-swept"], ["--configs", str(tmp_path / "x.json")],
                ["--methods", "ours-swept", "--configs", str(tmp_path / "none.json")]):
        with pytest.raises(SystemExit) as e:
            bench_step.get_args(bad + ["--smoke"])
        assert e.value.code == 2, bad
    path = tmp_path / "swept.json"
    path.write_text(json.dumps({"64": list(attention_plan.CUDA_CONFIGS[64]._replace(kv_warps=4)), "fused_dq": False}))
    args = argparse.Namespace(configs=str(path), objective="pmlm")
    monkeypatch.setattr(attention_plan, "FUSED_DQ", True)
    made = {name: bench_step.Method(name, args, [], lambda: torch.nn.Linear(2, 2), torch.device("cpu"), torch.float32)
            for name in ("ours", "ours-swept")}
    with made["ours-swept"].configs():
        assert attention_plan.config(torch.device("cuda"), 64).kv_warps == 4 and not attention_plan.FUSED_DQ
    with made["ours"].configs():
        assert attention_plan.config(torch.device("cuda"), 64) == attention_plan.CUDA_CONFIGS[64]
    assert attention_plan.FUSED_DQ and not attention_plan.OVERRIDE
