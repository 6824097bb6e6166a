"""bench/bench_attention.py's record: written after each layout, so that a run cut short by its
lease keeps the layouts it finished (the timing itself needs a GPU: bench/gpu_check.py)."""

import json

import pytest
import torch

from bench import bench_attention


def test_a_run_cut_short_keeps_the_layouts_it_finished(tmp_path, monkeypatch):
    path, done = tmp_path / "attention.json", []

    def bench(name, D, *rest):
        if done:
            raise RuntimeError("the lease ended")
        done.append(name)
        return dict(layout=name, D=D, methods={}), rest[-2]

    monkeypatch.setattr(bench_attention, "bench", bench)
    monkeypatch.setattr(bench_attention, "targets", lambda records: [])
    with pytest.raises(RuntimeError):
        bench_attention.main(["--smoke", "--layouts", "pmlm,s2s-1k", "--dims", "64", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert [r["layout"] for r in saved["records"]] == ["pmlm"] and saved["complete"] is False
    done.clear()
    monkeypatch.setattr(bench_attention, "bench", lambda name, D, *rest: (dict(layout=name, D=D, methods={}), rest[-2]))
    bench_attention.main(["--smoke", "--layouts", "pmlm,s2s-1k", "--dims", "64", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert [r["layout"] for r in saved["records"]] == ["pmlm", "s2s-1k"] and saved["complete"] is True


def test_flex_is_also_timed_with_its_table_frozen():
    """Whether the gradient of the table Flex's score_mod reads is what costs Flex: the same Flex
    with a table that asks no gradient, beside it."""
    from bench.attention_cases import layout

    rows = {m.label: m for m in bench_attention.methods(layout("pmlm", "cpu", True), 64, {}, True)}
    assert rows["flex"].bias_grad and not rows["flex, bias table frozen"].bias_grad
    assert "flex, bias table frozen" not in {
        m.label for m in bench_attention.methods(layout("pmlm", "cpu", True), 64, {}, False)
    }


def test_the_sweep_times_only_candidates_that_match_and_keeps_the_fastest(monkeypatch):
    """A candidate that fails its check against the reference is not timed; the fastest of the rest
    is the Tuning the rest of the run keeps, its backward structure (fused_dq) with it."""
    from kernels.attention_plan import CUDA_CONFIGS, TUNING

    base = CUDA_CONFIGS[64]
    wrong, slow, fast = base._replace(BNK=128), base, base._replace(kv_warps=8)
    monkeypatch.setattr(bench_attention, "candidates", lambda D: [(wrong, True), (slow, True), (fast, False)])
    timed = []
    monkeypatch.setattr(
        bench_attention, "check", lambda *a, fatal=True, tuning=None, **k: not fatal and tuning.d64 != wrong
    )

    def charge(method, leaves, table, dout, time_fn, n_layers):
        timed.append(method)
        return dict(fwd_ms=1.0, fwdbwd_ms=2.0 if method == (fast, False) else 3.0)

    monkeypatch.setattr(bench_attention, "charge", charge)
    monkeypatch.setattr(bench_attention, "ours_method", lambda *a, tuning=None, **k: (tuning.d64, tuning.fused_dq))
    rec, leaves = {}, [torch.zeros(1, 4, 1, 64) for _ in range(3)]
    tuning = bench_attention.sweep(None, leaves, None, None, 64, None, 12, rec, TUNING)
    assert timed == [(slow, True), (fast, False)]
    assert tuning.d64 == fast and tuning.fused_dq is False and tuning.d128 == TUNING.d128
    assert rec["config"] == list(fast) and rec["fused_dq"] is False and len(rec["sweep"]) == 2


def test_swept_configurations_travel_in_a_file(tmp_path):
    from bench.attention_cases import read_configs, save_configs
    from kernels import attention_plan

    tuning = attention_plan.TUNING.with_config(64, attention_plan.CUDA_CONFIGS[64]._replace(kv_warps=8))
    tuning = tuning._replace(fused_dq=False)
    path = tmp_path / "swept.json"
    save_configs(str(path), tuning, [64])
    assert read_configs(str(path)) == tuning
    path.write_text("[1, 2]")
    with pytest.raises(SystemExit, match="not a file of swept configurations"):
        read_configs(str(path))


def test_past_its_deadline_the_sweep_times_the_plans_own_alone(monkeypatch):
    from kernels.attention_plan import CUDA_CONFIGS, TUNING

    base = CUDA_CONFIGS[64]
    monkeypatch.setattr(bench_attention, "candidates", lambda D: [(base, True), (base._replace(kv_warps=8), False)])
    monkeypatch.setattr(bench_attention, "check", lambda *a, **k: True)
    timed = []
    monkeypatch.setattr(bench_attention, "charge", lambda m, *a: timed.append(m) or dict(fwd_ms=1.0, fwdbwd_ms=2.0))
    monkeypatch.setattr(bench_attention, "ours_method", lambda *a, tuning=None, **k: tuning.d64)
    rec = {}
    bench_attention.sweep(None, [torch.zeros(1, 4, 1, 64)] * 3, None, None, 64, None, 12, rec, TUNING, deadline=0.0)
    assert timed == [base] and rec["config"] == list(base)


def test_sweep_only_implies_the_sweep():
    args = bench_attention.get_args(["--sweep-only", "--layouts", "pmlm", "--dims", "64"])
    assert args.sweep and args.sweep_only
