"""tools/five_minutes.py, the README's five-minute path: each command run and timed in the
repository root, its last lines kept; the README's block rendered from that record."""

import json
import os

from tools import five_minutes, render_release


def test_each_step_is_run_timed_and_its_last_lines_of_stdout_kept(tmp_path):
    steps = [
        five_minutes.Step("a first line", ["-c", "print('a'); print(); print('b')"], keep=1),
        five_minutes.Step(
            "both lines", ["-c", "import sys; print('c'); print('d'); print('e', file=sys.stderr)"], keep=2
        ),
    ]
    record = five_minutes.run(steps, "a test machine", root=str(tmp_path))
    assert [s["output"] for s in record["steps"]] == [["b"], ["c", "d"]]  # stdout's, not the progress on stderr
    assert all(s["seconds"] >= 0 for s in record["steps"]) and record["machine"] == "a test machine"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record))
    shown = render_release.five_minutes(str(path))
    assert shown.startswith("1. A first line (0 s):\n\n   ```bash\n   python -c ") and "\n   b\n" in shown
    assert "\n   c\n   d\n   ```" in shown and f"at {record['commit']} on {record['date']} (a test machine" in shown


def test_a_failing_step_stops_the_path_and_names_it(tmp_path):
    steps = [five_minutes.Step("fails", ["-c", "import sys; sys.exit('no such file')"], keep=1)]
    try:
        five_minutes.run(steps, "m", root=str(tmp_path))
    except SystemExit as e:
        assert "exited 1" in str(e) and "no such file" in str(e)
    else:
        raise AssertionError("a failing step was recorded")


def test_without_the_release_it_says_what_to_make_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(five_minutes, "ROOT", str(tmp_path))
    out = tmp_path / "record"
    assert five_minutes.main(["--out", str(out), "--machine", "m"]) == 2
    assert "releases/pmlm-small/pretrained.pt.xz" in capsys.readouterr().err and not out.exists()


def test_the_record_the_readme_renders_ran_the_path_as_it_is_now():
    """results/five-minute/run.json holds the commands of STEPS, in order: a changed step is run again."""
    with open(os.path.join(five_minutes.ROOT, "results", "five-minute", "run.json")) as f:
        ran = [s["command"] for s in json.load(f)["steps"]]
    assert ran == [s.command for s in five_minutes.STEPS]
