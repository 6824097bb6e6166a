"""bench/bench_attention.py's record: written after each layout, so that a run cut short by its
lease keeps the layouts it finished (the timing itself needs a GPU: bench/gpu_check.py)."""
import json

import pytest

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
