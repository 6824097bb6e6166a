"""What a call on a lent GPU needs around its measurements (bench/gpu_check.py's parts): the
wheels the GPU image lacks, Triton's and Inductor's compilation caches carried from one machine to
the next, and the report, markdown rows for bench/RESULTS.md and a log of every command run.
"""

import importlib.util
import os
import subprocess
import sys
import time

if __name__ == "__main__" and not __package__:  # a module the benchmarks import
    sys.exit(
        "error: bench/gpu_lease.py is the module python -m bench.gpu_check imports, with nothing to run: "
        "run that (--help)"
    )

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# module -> the distribution that provides it: what the code and the tests import beyond torch
NEEDED = {
    "numpy": "numpy",
    "sentencepiece": "sentencepiece",
    "rouge_score": "rouge-score",
    "nltk": "nltk",
    "absl": "absl-py",
    "pytest": "pytest",
    "triton": "triton",
}
# read off the GPU image's package list (the device's KINDS.md): present there, except these
GPU_IMAGE_LACKS = ["rouge-score", "nltk"]


def use_cache(folder):
    """Point Triton's and Inductor's caches (this process's and every child's) into `folder`."""
    folder = os.path.abspath(os.path.join(ROOT, folder))
    for var, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor")):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
        os.environ[var] = os.path.join(folder, sub)
    return folder


def pack_cache(folder, out):
    """OUT/gpu-cache.tgz holding `folder` as gpu-cache/, to be unpacked into checkpoints/ and carried."""
    import tarfile

    path = os.path.join(out, "gpu-cache.tgz")
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname="gpu-cache")
    return path


def missing_here():
    """The distributions of NEEDED that this Python cannot import."""
    return sorted({dist for mod, dist in NEEDED.items() if importlib.util.find_spec(mod) is None})


def wheel_commands(dists):
    """(build on a machine with network, install on the GPU machine). rouge-score publishes only a
    source archive, so its wheel is built (pure Python, any interpreter); --no-deps: the image has
    the rest (absl-py, numpy, six, click, joblib, regex, tqdm)."""
    build = f"python3 -m pip wheel --no-deps -w wheels {' '.join(dists)}"
    install = "python3 -m pip install --no-index --no-deps wheels/*.whl"
    return build, install


def print_wheels():
    here = missing_here()
    build, install = wheel_commands(GPU_IMAGE_LACKS)
    print(f"the GPU image lacks: {', '.join(GPU_IMAGE_LACKS)}")
    print(f"  build them here (network):   {build}")
    print(f"  install them there (no network; wheels/ travels with the working tree):   {install}")
    print(f"missing in this Python ({sys.version.split()[0]}): {', '.join(here) or 'nothing'}")


# -----------------------------------------------------------------------------
# the log and the rows


class Report:
    def __init__(self, out):
        os.makedirs(out, exist_ok=True)
        self.log_path, self.rows_path = os.path.join(out, "gpu_check.log"), os.path.join(out, "results.md")

    def log(self, text):
        with open(self.log_path, "a") as f:
            f.write(text if text.endswith("\n") else text + "\n")

    def rows(self, title, header, rows):
        lines = [f"\n### {title}\n", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
        with open(self.rows_path, "a") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)

    def run(self, cmd, env=None, timeout=560):
        """Run a command, its output to the log; (status, output, seconds)."""
        t0 = time.time()
        self.log(f"$ {' '.join(cmd)}")
        try:
            r = subprocess.run(
                cmd, cwd=ROOT, env=dict(os.environ, **(env or {})), capture_output=True, text=True, timeout=timeout
            )
            status, out = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            status, out = (
                "timeout",
                (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""),
            )
        self.log(out)
        return status, out, time.time() - t0


def environment():
    import torch
    import triton

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return (
        f"{device}, torch {torch.__version__}, triton {triton.__version__}, "
        f"Python {sys.version.split()[0]}, commit {commit}, {time.strftime('%Y-%m-%d')}"
    )


def timed_steps(rep, steps, budget, env=None):
    """Run (title, command, cap seconds) in order, each within what is left of `budget`; a step with
    under 20 s left is skipped and says so. Rows: title, status, seconds, its last line. env: the
    variables the commands run with (default: the GPU's, Triton compiling rather than interpreting)."""
    t0, rows = time.time(), []
    for title, cmd, cap in steps:
        left = budget - (time.time() - t0)
        if left < 20:
            rows.append([title, "skipped (budget spent)", "0", "-"])
            continue
        print(f"== {title}", flush=True)
        status, out, secs = rep.run(
            cmd, env=dict(env or {"TRITON_INTERPRET": "0"}, PYTHONUNBUFFERED="1"), timeout=min(cap, left)
        )
        tail = [l for l in out.strip().splitlines() if l.strip()][-1:] or ["-"]
        print(out[-4000:], flush=True)
        rows.append([title, status, f"{secs:.0f}", tail[0].replace("|", "/")[:140]])
    return rows
