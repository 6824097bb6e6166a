"""Every number typed in the README, docs/, bench/RESULTS.md and CHANGELOG.md is pinned to the one
place it comes from (tools/typed_numbers.py, tools/typed_sources.py), and the check fails a number
that is not: an edited number, an integer included, fails even where another file of the same folder
holds it."""

import json
import math
import os

import pytest

from tools import source_kinds as sk
from tools import typed_numbers as tn


def test_every_typed_number_agrees_with_its_source():
    bad = tn.problems()
    assert not bad, (
        "\n".join(f"{d}:{line}: {n}: {why}" for d, line, n, why in bad)
        + "\n(render the number from its result file, or pin it in tools/typed_sources.py)"
    )


def read(doc):
    with open(os.path.join(tn.ROOT, doc)) as f:
        return f.read()


@pytest.mark.parametrize(
    "doc,typed,edited",
    [
        ("README.md", "5.4M parameters", "6.4M parameters"),
        ("README.md", "5.4M parameters", "8.4M parameters"),
        ("README.md", "5.4M parameters", "4.1M parameters"),
        ("README.md", "62,588 packages", "72,588 packages"),
        ("docs/design.md", "(62,588 after cleaning)", "(72,588 after cleaning)"),
        ("bench/RESULTS.md", "take 0.62x the chain's", "take 0.72x the chain's"),
    ],
)
def test_an_edited_number_fails(doc, typed, edited):
    """The edits issue 71 found passing: each number as typed is pinned in its document, so the new
    one has no pin (and the old pin, where it was typed once, is no longer used)."""
    text = read(doc)
    assert text.count(typed) == 1, typed
    bad = tn.problems({doc: text.replace(typed, edited)})
    number = next(w.strip("(") for w in edited.split() if w.strip("(")[0].isdigit())
    assert any(d == doc and n == number for d, _, n, _ in bad), bad


def test_a_changed_source_fails(monkeypatch):
    """A pin holds the number to its field: the same text against another value of the field fails."""
    pins = dict(tn.SOURCES["README.md"])
    pins["5.4M"] = sk.Field("results/cpu-budget/results.json", "runs/sum-t5/metrics/params_M")  # 7.52
    monkeypatch.setitem(tn.SOURCES, "README.md", pins)
    bad = tn.problems()
    assert [(d, n) for d, _, n, _ in bad] == [("README.md", "5.4M"), ("README.md", "5.4M")], bad
    assert "runs/sum-t5/metrics/params_M" in bad[0][3]


def test_what_counts_as_typed():
    text = (
        "Held out 6.89 at step 800, 15% masked, 1.94x the decoder, 5.4M and 64k, section 4.1 and 4.6, Table 10,\n"
        "`--lr 1.5e-4` in code, [a link](results/x-0.5.json), <!-- a comment 0.7 -->\n"
        "<!-- render: table results/x.json -->\n| 0.123 |\n<!-- /render -->\n"
        "```bash\n0.9\n```\n−0.26 and 1,600.5, lr 1e-3, torch 2.13.0, 3.5-3.8\n"
        "call 2, 36fa0ad, 2026-11-25 to 27, bf16 on an H200, 6L-6L, OMP_NUM_THREADS=1\n"
        "1. a list item\n```\na diagram's 62,588\n```\n"
    )
    assert [n for _, n, _ in tn.typed(text)] == [
        "6.89",
        "800",
        "15%",
        "1.94x",
        "5.4M",
        "64k",
        "−0.26",
        "1,600.5",
        "1e-3",
        "2.13.0",
        "3.5",
        "3.8",
        "62,588",
    ]
    assert [line for line, _, _ in tn.typed(text)] == [1, 1, 1, 1, 1, 1, 9, 9, 9, 9, 9, 9, 13]


def test_agreement_is_by_rounding_as_printed():
    assert sk.agrees_with_value("0.77", sk.entropy_floor(0.1, 97))
    assert not sk.agrees_with_value("0.78", sk.entropy_floor(0.1, 97))  # the drift this check found
    assert sk.agrees_with_value("13%", 0.132) and sk.agrees_with_value("13.2%", 13.2)
    assert sk.agrees_with_value("−0.26", 0.26) and sk.agrees_with_value("0.29", -math.log(3 / 4))
    assert not sk.agrees_with_value("1.87x", sk.entropy_exit_cost(4))
    assert sk.agrees_with_value("5.4M", 5.41) and sk.agrees_with_value("5.4M", 5_412_000)
    assert not sk.agrees_with_value("6.4M", 5.41) and not sk.agrees_with_value("62,588", 62_587)
    assert sk.agrees_with_value("64k", 65536) and sk.agrees_with_value("1.5e-4", 0.00015)
    assert sk.agrees("3.11", "Python 3.11.7, torch 2.13.0+cpu") and sk.agrees("2.13.0", "torch 2.13.0+cpu")
    assert not sk.agrees("3.1", "Python 3.11.7")


def test_a_field_is_a_named_value_of_a_named_file(tmp_path, monkeypatch):
    (tmp_path / "r.json").write_text(
        json.dumps(dict(rows=[dict(batch=1, what="a b", ms=2.5), dict(batch=64, what="a b", ms=7.25)], secs=710.1))
    )
    (tmp_path / "run.log").write_text("step 1 | loss 5.4321\nprofile, N 4096: its kernels 0.421 ms, 33 launches\n")
    monkeypatch.setattr(sk, "ROOT", str(tmp_path))
    sk._text.cache_clear()
    try:
        assert sk.field_values(sk.Field("r.json", "rows/batch=64&what=a b/ms")) == ([7.25], "")
        assert sk.field_values(sk.Field("r.json", "rows/what^=a/ms")) == ([2.5], "")
        assert sk.field_values(sk.Field("r.json", "secs", div=60))[0] == [710.1 / 60]
        assert sk.field_values(sk.Field("run.log", "profile,", after="its kernels")) == ([0.421], "")
        assert sk.field_values(sk.Field("run.log", "loss"))[0] == [1.0, 5.4321]
        assert "has no field" in sk.field_values(sk.Field("r.json", "rows/batch=2/ms"))[1]
        assert "no line holding" in sk.field_values(sk.Field("run.log", "nothing"))[1]
        assert tn.check_source("12", sk.Field("r.json", "secs", div=60)) == ""
        assert "it is not r.json" in tn.check_source("11", sk.Field("r.json", "secs", div=60))
    finally:
        sk._text.cache_clear()


@pytest.mark.parametrize(
    "code",
    [
        'BIG = 2 ** 30\nB = dict(model="small", steps=1600, epochs=6)  # the cpu budget\n',
        'BIG = 2**30\nB = dict(\n    model="small",\n    steps=1600,\n    epochs=6,\n)  # the cpu budget\n',
    ],
)
def test_a_pin_in_code_holds_however_the_code_is_laid_out(code, tmp_path, monkeypatch):
    """ruff format's spacing and wrapping leave a .py file's pins their values: blanks do not count,
    and a call wrapped over lines is read as its statement (code pins take one number, after=)."""
    (tmp_path / "plan.py").write_text(code)
    monkeypatch.setattr(sk, "ROOT", str(tmp_path))
    sk._text.cache_clear()
    try:
        assert sk.field_values(sk.Field("plan.py", "BIG = 2 **", after="**")) == ([30.0], "")
        assert sk.field_values(sk.Field("plan.py", 'model="small", steps=', after="epochs=")) == ([6.0], "")
        assert "no line holding" in sk.field_values(sk.Field("plan.py", 'model="tiny", steps='))[1]
    finally:
        sk._text.cache_clear()


def test_one_number_two_meanings_is_pinned_by_its_words():
    pins = {"64": "a", "64 @ batch 64 and": "b", "64 @ D 64": "c"}
    line = "At batch 64 and 256, and at D 64, and 64 alone"
    found = [tn.pin_of(n, where, pins)[1] for _, n, where in tn.typed(line) if n == "64"]
    assert found == ["b", "c", "a"]
    with pytest.raises(SystemExit, match="do not hold its number"):
        tn.pin_of("64", (line, 9, 11), {"64 @ batch": "x"})


def test_a_source_that_does_not_back_its_number_is_named():
    assert tn.check_source("0.5", sk.Paper("ELMER Figure 2")) == ""
    assert "names no paper" in tn.check_source("0.5", sk.Paper("a blog"))
    assert "names no place" in tn.check_source("0.5", sk.Paper("ELMER"))
    assert "formula gives" in tn.check_source("0.78", lambda: sk.entropy_floor(0.1, 97))
    assert "cannot be read" in tn.check_source("0.5", sk.Field("results/no-such-file.json", "x"))
    assert tn.check_source("1", sk.Word("a batch of one")) == ""
    assert "0 or 1 only" in tn.check_source("2", sk.Word("two"))
