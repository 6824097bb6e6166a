"""What a first run on a GPU machine meets, checked on the CPU: the scripts import without
rouge-score, a failed Triton import is said once, a process per GPU that does not exist is refused,
a suite started with SIGINT ignored still gives its child the default handler, and a torchrun
worker's own error reaches the user as its `error:` line."""

import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, TINY
from core.errors import UserError
from test_safety import default_sigint

ENV = dict(os.environ, OMP_NUM_THREADS="1")


def python(code):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)


def test_scripts_import_without_rouge_score():
    r = python(
        "import sys; sys.modules['rouge_score'] = None\n"
        "import train, finetune, eval\n"
        "from core.metrics import rouge\n"
        "from core.errors import UserError\n"
        "try:\n    rouge(['a'], ['a'])\nexcept UserError as e:\n    print('refused:', e)\n"
    )
    assert r.returncode == 0, r.stderr
    assert "refused: ROUGE needs the rouge-score package" in r.stdout, r.stdout


def test_failed_triton_import_is_said_once_on_cuda():
    """No GPU is needed: the backend is resolved from the device type alone."""
    r = python(
        "import sys; sys.modules['triton'] = None\n"
        "import torch, kernels\n"
        "cuda = torch.device('cuda')\n"
        "print(kernels.resolve_backend('auto', cuda), kernels.resolve_backend('auto', cuda))\n"
        "print(kernels.resolve_backend('auto', torch.device('cpu')))\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["reference", "reference", "reference"]
    warnings = [l for l in r.stderr.splitlines() if l.startswith("warning: ")]
    assert len(warnings) == 1 and "Triton" in warnings[0] and "reference" in warnings[0], r.stderr


def test_local_rank_past_the_gpus_is_refused(monkeypatch):
    from core import distributed

    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match="local rank 1.*1 GPU"):
        distributed.compute_init("cuda")


def test_child_gets_default_sigint_under_an_ignoring_parent():
    """The SIGINT test's child: with SIGINT ignored here (a suite run from a background shell), the
    child still starts with the default handler, so the signal it is sent stops it."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
        plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        given = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, preexec_fn=default_sigint)
    finally:
        signal.signal(signal.SIGINT, before)
    assert plain.stdout.strip() == "False"  # inherited: ignored (what made the test hang)
    assert given.stdout.strip() == "True"


ONE_RANK_FAILS = """
import os, sys
sys.path.insert(0, os.getcwd())
import train
from core.errors import UserError
real = train.TokenStream
def stream(*a, **k):
    if os.environ.get("RANK") == "1":
        raise UserError("data file unreadable on process 1 only")
    return real(*a, **k)
train.TokenStream = stream
train.main()
"""


def test_torchrun_one_rank_error_reaches_the_user(text_file, tmp_path):
    """Only process 1 meets the error, after process 0 has gone on to wait for it in a collective:
    process 1 keeps the group open until it has printed its line, so its `error:` line is said,
    before any report of process 0 losing contact."""
    script = tmp_path / "one_rank_fails.py"
    script.write_text(ONE_RANK_FAILS)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
            "--data",
            text_file,
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "o"),
            "--steps",
            "2",
        ]
        + TINY,
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0
    lines = r.stderr.splitlines()
    errors = [i for i, l in enumerate(lines) if l.startswith("error: ")]
    assert [lines[i] for i in errors] == [
        "error: data file unreadable on process 1 only (process 1 of 2: this stopped the run)"
    ], r.stderr[-3000:]
    lost = [i for i, l in enumerate(lines) if "Connection closed by peer" in l or l.startswith("stopped: ")]
    assert all(i > errors[0] for i in lost), r.stderr[-3000:]
