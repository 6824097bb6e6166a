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
