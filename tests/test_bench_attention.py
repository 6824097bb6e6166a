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
        return dict(layout=name, D=D, methods={})
    monkeypatch.setattr(bench_attention, "bench", bench)
    monkeypatch.setattr(bench_attention, "targets", lambda records: [])
    with pytest.raises(RuntimeError):
        bench_attention.main(["--smoke", "--layouts", "pmlm,s2s-1k", "--dims", "64", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert [r["layout"] for r in saved["records"]] == ["pmlm"] and saved["complete"] is False
    done.clear()
    monkeypatch.setattr(bench_attention, "bench", lambda name, D, *rest: dict(layout=name, D=D, methods={}))
    bench_attention.main(["--smoke", "--layouts", "pmlm,s2s-1k", "--dims", "64", "--json", str(path)])
    saved = json.loads(path.read_text())
    assert [r["layout"] for r in saved["records"]] == ["pmlm", "s2s-1k"] and saved["complete"] is True


def test_flex_is_also_timed_with_its_table_frozen():
    """Whether the gradient of the table Flex's score_mod reads is what costs Flex: the same Flex
    with a table that asks no gradient, beside it."""
    from bench.attention_cases import layout
    rows = {m.label: m for m, _ in bench_attention.methods(layout("pmlm", "cpu", True), 64, [], True)}
    assert rows["flex"].bias_grad and not rows["flex, bias table frozen"].bias_grad
    assert "flex, bias table frozen" not in {m.label for m, _ in bench_attention.methods(
        layout("pmlm", "cpu", True), 64, [], False)}


def test_the_sweep_times_only_candidates_that_match_and_keeps_the_fastest(monkeypatch):
    """A candidate that fails its check against the reference is not timed; the fastest of the rest
    is put in force for the rest of the run, its backward structure (FUSED_DQ) with it."""
    from kernels import attention_plan
    from kernels.attention_plan import CUDA_CONFIGS
    monkeypatch.setattr(attention_plan, "OVERRIDE", {})
    monkeypatch.setattr(attention_plan, "FUSED_DQ", True)
    base = CUDA_CONFIGS[64]
    wrong, slow, fast = base._replace(BNK=128), base, base._replace(kv_warps=8)
    monkeypatch.setattr(bench_attention, "candidates", lambda D: [(wrong, True), (slow, True), (fast, False)])
    timed = []

    def check(meta, table, q, k, v, label="", fatal=True):
        assert not fatal
        return attention_plan.OVERRIDE[64] != wrong

    def charge(method, leaves, table, dout, time_fn, n_layers):
        cfg = attention_plan.OVERRIDE[64]
        timed.append((cfg, attention_plan.FUSED_DQ))
        return dict(fwd_ms=1.0, fwdbwd_ms=2.0 if cfg == fast else 3.0)
    monkeypatch.setattr(bench_attention, "check", check)
    monkeypatch.setattr(bench_attention, "charge", charge)
    monkeypatch.setattr(bench_attention, "ours_method", lambda *a, **k: None)
    rec, leaves = {}, [torch.zeros(1, 4, 1, 64) for _ in range(3)]
    bench_attention.sweep(None, leaves, None, None, 64, None, 12, rec)
    assert timed == [(slow, True), (fast, False)]
    assert attention_plan.OVERRIDE[64] == fast and attention_plan.FUSED_DQ is False
    assert rec["config"] == list(fast) and rec["fused_dq"] is False and len(rec["sweep"]) == 2


def test_swept_configurations_travel_in_a_file_and_apply_only_where_asked(monkeypatch, tmp_path):
    from bench.attention_cases import configs_in_force, read_configs, save_configs
    from kernels import attention_plan
    monkeypatch.setattr(attention_plan, "OVERRIDE", {64: attention_plan.CUDA_CONFIGS[64]._replace(kv_warps=8)})
    monkeypatch.setattr(attention_plan, "FUSED_DQ", False)
    path = tmp_path / "swept.json"
    save_configs(str(path))
    saved = read_configs(str(path))
    assert saved == {64: attention_plan.OVERRIDE[64], "fused_dq": False}
    monkeypatch.setattr(attention_plan, "OVERRIDE", {})
    monkeypatch.setattr(attention_plan, "FUSED_DQ", True)
    with configs_in_force(saved):
        assert attention_plan.config(torch.device("cuda"), 64).kv_warps == 8 and attention_plan.FUSED_DQ is False
    assert attention_plan.OVERRIDE == {} and attention_plan.FUSED_DQ is True
    with configs_in_force(None):
        assert attention_plan.config(torch.device("cuda"), 64) == attention_plan.CUDA_CONFIGS[64]
    path.write_text("[1, 2]")
    with pytest.raises(SystemExit, match="not a file of swept configurations"):
        read_configs(str(path))


def test_past_its_deadline_the_sweep_times_the_plans_own_alone(monkeypatch):
    from kernels import attention_plan
    from kernels.attention_plan import CUDA_CONFIGS
    monkeypatch.setattr(attention_plan, "OVERRIDE", {})
    base = CUDA_CONFIGS[64]
    monkeypatch.setattr(bench_attention, "candidates", lambda D: [(base, True), (base._replace(kv_warps=8), False)])
    monkeypatch.setattr(bench_attention, "check", lambda *a, **k: True)
    timed = []
    monkeypatch.setattr(bench_attention, "charge",
                        lambda *a: timed.append(attention_plan.OVERRIDE[64]) or dict(fwd_ms=1.0, fwdbwd_ms=2.0))
    monkeypatch.setattr(bench_attention, "ours_method", lambda *a, **k: None)
    rec = {}
    bench_attention.sweep(None, [torch.zeros(1, 4, 1, 64)] * 3, None, None, 64, None, 12, rec, deadline=0.0)
    assert timed == [base] and rec["config"] == list(base)


def test_sweep_only_implies_the_sweep():
    args = bench_attention.get_args(["--sweep-only", "--layouts", "pmlm", "--dims", "64"])
    assert args.sweep and args.sweep_only
