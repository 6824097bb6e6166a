"""Trust, round 5, the tools: the ahead-of-time compile and the bench scripts refuse nonsense in one
line before their long work (exit 2, no traceback), and say so when nothing matched. Each script's
main runs in this process with its command line in sys.argv, as `python -m` would run it (an
exception escaping it fails the test); tests/test_layout.py runs the bench files themselves."""

import importlib
import subprocess
import sys

import pytest

from conftest import ROOT


def run(*argv, timeout=120):
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def run_main(module, argv, monkeypatch, capsys):
    """`python -m module argv...`'s exit status and stderr, from its main() called in this process."""
    monkeypatch.setattr(sys, "argv", [module, *argv])
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    try:
        code = importlib.import_module(module).main() or 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--cases", "("], "not a regular expression"),
        (["--only", "reference"], "no compile cases in reference"),
        (["--json", "/proc/nope/x.json"], "cannot be written"),
        (["--only", "yardstick", "--cases", "nothing-matches"], "no compile case matched"),
    ],
)
def test_aot_refuses_before_compiling(argv, words, monkeypatch, capsys):
    code, err = run_main("tools.aot", argv, monkeypatch, capsys)
    assert code == 2 and words in err and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize(
    "argv,words",
    [
        (["-m", "bench.bench_gather", "--reps", "0"], "--reps 0: must be at least 1"),
        (["-m", "bench.bench_offramp", "--vocab", "0"], "--vocab 0: must be at least 2"),
        (["-m", "bench.bench_early_exit", "--forced", "--measures", "bogus"], "invalid choice: 'bogus'"),
        (["-m", "bench.bench_early_exit", "--forced", "--thresholds", "state=2"], "must be in [-1, 1]"),
        (["-m", "bench.bench_early_exit", "--forced", "--json", "README.md/x.json"], "is a file, not a folder"),
        (["-m", "bench.bench_attention", "--smoke", "--configs", "no-such.json"], "no-such.json: no such file"),
        (["-m", "bench.bench_attention", "--smoke", "--deadline", "-5"], "--deadline -5"),
        (["-m", "bench.bench_decoders", "--device", "cuda"], "no CUDA device"),
        (["-m", "bench.bench_step", "--steps", "0"], "--steps must be at least 1"),
        (["-m", "bench.bench_step", "--steps", "2", "--rounds", "3"], "--steps 2 is fewer than --rounds 3"),
    ],
)
def test_bench_scripts_refuse_before_measuring(argv, words, monkeypatch, capsys):
    if "cuda" in argv:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    code, err = run_main(argv[1], argv[2:], monkeypatch, capsys)
    assert code == 2 and words in err and "Traceback" not in err, err[-2000:]


def test_profile_step_is_not_a_script():
    r = run("-m", "bench.profile_step", "--steps", "3")
    assert r.returncode != 0 and "python -m bench.bench_step" in r.stderr and "Traceback" not in r.stderr
