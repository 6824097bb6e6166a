"""Every number typed in the README, docs/, bench/RESULTS.md and CHANGELOG.md agrees with its
source (tools/typed_numbers.py), and the check finds a number that does not."""
import math

from tools import typed_numbers as tn


def test_every_typed_number_agrees_with_its_source():
    bad = tn.problems()
    assert not bad, "\n".join(f"{d}:{line}: {n}: {why}" for d, line, n, why in bad) + \
        "\n(render the number from its result file, or name its source in tools/typed_numbers.py SOURCES)"


def test_what_counts_as_typed():
    text = ("Held out 6.89 at step 800, 15% masked, 1.94x the decoder, section 4.1 and 4.6, Table 10,\n"
            "`--lr 1.5e-4` in code, [a link](results/x-0.5.json), <!-- a comment 0.7 -->\n"
            "<!-- render: table results/x.json -->\n| 0.123 |\n<!-- /render -->\n"
            "```\n0.9\n```\n−0.26 and 1,600.5\n")
    assert [n for _, n in tn.typed(text)] == ["6.89", "15%", "1.94x", "−0.26", "1,600.5"]
    assert [line for line, _ in tn.typed(text)] == [1, 1, 1, 9, 9]


def test_agreement_is_by_rounding_as_printed():
    assert tn.agrees_with_value("0.77", tn.entropy_floor(0.1, 97))
    assert not tn.agrees_with_value("0.78", tn.entropy_floor(0.1, 97))  # the drift this check found
    assert tn.agrees_with_value("13%", 0.132) and tn.agrees_with_value("13.2%", 13.2)
    assert tn.agrees_with_value("−0.26", 0.26) and tn.agrees_with_value("0.29", -math.log(3 / 4))
    assert not tn.agrees_with_value("1.87x", tn.entropy_exit_cost(4))


def test_a_section_cites_the_files_of_its_render_blocks(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "run.json").write_text('{"loss": 5.4321}')
    (tmp_path / "results" / "RUN.md").write_text("took 12.5 min")
    monkeypatch.setattr(tn, "ROOT", str(tmp_path))
    tn._numbers_of.clear()
    text = ("# A\nloss 5.43 after 12.5 min, then 7.1\n<!-- render: table results/run.json -->\n"
            "<!-- /render -->\n# B\nloss 5.43 again\n")
    sections = tn.cited(text)
    assert sections[1][2] == ["results/RUN.md", "results/run.json"] and sections[2][2] == []
    ok = {n: any(tn.agrees_with_file(n, p) for p in next(s for a, b, s in sections if a <= line <= b))
          for line, n in tn.typed(text) if line == 2}
    assert ok == {"5.43": True, "12.5": True, "7.1": False}
    tn._numbers_of.clear()


def test_a_source_that_does_not_back_its_number_is_named():
    assert tn.check_source("0.5", tn.Paper("ELMER Figure 2")) == ""
    assert "names no paper" in tn.check_source("0.5", tn.Paper("a blog"))
    assert "formula gives" in tn.check_source("0.78", lambda: tn.entropy_floor(0.1, 97))
    assert "does not exist" in tn.check_source("0.5", "results/no-such-file.json")
    assert tn.check_source("0.1", ("results/no-such-file.json", "core/pmlm.py")) == ""
