import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

# Triton kernels run under the interpreter on machines without a GPU; this must be set before
# triton is first imported, which is why it lives here and not in the kernel tests
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# where a test runs a Triton kernel: the GPU where there is one, else the CPU's interpreter
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# -----------------------------------------------------------------------------
# the ahead-of-time compile of every kernel (tools/aot.py) that tests/test_compile.py reads: minutes
# of single-threaded compiles, started in the background as soon as the tests are collected, at a
# lower priority than the tests, so that it takes the cores the other tests leave idle; the tests
# that read it run last, by when it has finished or is close to

AOT = pytest.StashKey[dict]()


def start_aot(folder):
    """tools.aot --loops --json in a subprocess at nice 10, with the real compiler (TRITON_INTERPRET
    unset) and a Triton cache of its own: {process, rows (the JSON it writes), log (its output)}."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_CACHE_DIR", os.path.join(folder, "triton-cache"))
    job = dict(rows=os.path.join(folder, "rows.json"), log=os.path.join(folder, "aot.log"), folder=folder)
    with open(job["log"], "w") as log:
        job["process"] = subprocess.Popen(
            [sys.executable, "-m", "tools.aot", "--loops", "--json", job["rows"]],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.nice(10),
            start_new_session=True,
        )
    return job


def aot_rows(config, timeout=900):
    """The rows of the compile started at collection (started here if it was not), once it ends."""
    job = config.stash.get(AOT, None)
    if job is None:
        job = config.stash[AOT] = start_aot(tempfile.mkdtemp(prefix="aot-"))
    try:
        job["process"].wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(job)
    with open(job["log"]) as f:
        out = f.read()
    print(out)
    assert os.path.exists(job["rows"]), f"tools.aot wrote no result:\n{out[-6000:]}"
    with open(job["rows"]) as f:
        return json.load(f)


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(config, items):
    reading = [i for i in items if "rows" in getattr(i, "fixturenames", ()) and i.path.name == "test_compile.py"]
    if reading and not config.option.collectonly:
        compile_tests = [i for i in items if i.path.name == "test_compile.py"]
        items[:] = [i for i in items if i.path.name != "test_compile.py"] + compile_tests
        config.stash[AOT] = start_aot(tempfile.mkdtemp(prefix="aot-"))


def stop(job):
    """Kill the compile and its worker processes (its own process group)."""
    if job["process"].poll() is None:
        os.killpg(job["process"].pid, signal.SIGKILL)
        job["process"].wait()


def pytest_unconfigure(config):
    job = config.stash.get(AOT, None)
    if job is not None:
        stop(job)  # where the session stopped before the compile's tests
        shutil.rmtree(job["folder"], ignore_errors=True)


@pytest.fixture(scope="session")
def text_file(tmp_path_factory):
    """A small pretraining file: 1500 documents of the embedded corpus's train split."""
    from core.data import embedded_records

    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n".join(r["document"] for r in embedded_records("train")[:1500]) + "\n")
    return str(path)


@pytest.fixture(scope="session")
def tokenizer(text_file):
    from core.data import read_texts
    from core.tokenizer import Tokenizer

    return Tokenizer.train(read_texts(text_file), 600)


def write_task_files(root, sizes):
    """JSONL files cut from the embedded corpus (its field names), one per split: sizes maps a
    split to its example count. Returns {split: path}."""
    from core.data import embedded_records

    paths = {}
    for split, n in sizes.items():
        paths[split] = os.path.join(str(root), f"{split}.jsonl")
        with open(paths[split], "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in embedded_records(split)[:n])
    return paths


def read_log(out_dir):
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        return [json.loads(l) for l in f]


# flags of a training run that takes seconds on a CPU; float32 whatever the CPU, so that the
# exactness tests (resume, 1 vs 2 processes) compare like with like (tests/test_dtype.py covers bf16)
TINY = [
    "--dtype",
    "float32",
    "--model",
    "tiny",
    "--vocab-size",
    "600",
    "--seq-len",
    "48",
    "--batch-tokens",
    "384",
    "--micro-batch",
    "4",
    "--warmup",
    "2",
    "--log-every",
    "1",
    "--eval-every",
    "3",
    "--eval-examples",
    "8",
    "--save-every",
    "100",
]


# the fine-tuning checkpoints of tests/test_finetune.py and tests/test_release.py: built once a session


@pytest.fixture(scope="session")
def task_files(tmp_path_factory):
    """Small JSONL train/valid/test files cut from the embedded corpus (with its field names)."""
    return write_task_files(tmp_path_factory.mktemp("tasks"), dict(train=160, valid=24, test=12))


@pytest.fixture(scope="session")
def pretrained(text_file, tmp_path_factory):
    """Tiny PMLM, T5 and T5-NAR checkpoints after a few steps each."""
    import train

    out = {}
    for objective in ("pmlm", "t5", "t5-nar"):
        path = str(tmp_path_factory.mktemp(objective))
        train.main(["--data", text_file, "--objective", objective, "--steps", "4", "--out", path] + TINY)
        out[objective] = os.path.join(path, "last.pt")
    return out


# flags of a fine-tuning that takes seconds on a CPU
FT = [
    "--epochs",
    "2",
    "--batch",
    "32",
    "--micro-batch",
    "16",
    "--max-src",
    "32",
    "--max-tgt",
    "12",
    "--rouge-examples",
    "8",
    "--valid-examples",
    "16",
    "--log-every",
    "2",
    "--lr",
    "1e-3",
]


@pytest.fixture(scope="session")
def finetuned(pretrained, text_file, task_files, tmp_path_factory):
    """A short fine-tuning of each way of decoding (AR from the PMLM and from T5, Mask-Predict,
    ELMER's early exit) and of a classifier (T5's encoder)."""
    import finetune
    import train

    root = tmp_path_factory.mktemp("finetuned")
    elmer = str(root / "pre-elmer")
    train.main(
        [
            "--data",
            text_file,
            "--objective",
            "elmer",
            "--dec-len",
            "8",
            "--permutations",
            "2",
            "--steps",
            "1",
            "--out",
            elmer,
        ]
        + TINY
    )
    runs = dict(
        unilm=(pretrained["pmlm"], []),
        t5=(pretrained["t5"], []),
        nar=(pretrained["t5-nar"], ["--nar"]),
        elmer=(os.path.join(elmer, "last.pt"), []),
        classify=(pretrained["t5"], ["--task", "classify"]),
    )  # a PMLM's [SOS] this short: one class
    for name, (init, extra) in runs.items():
        finetune.main(
            [
                "--init",
                init,
                "--train-data",
                task_files["train"],
                "--valid-data",
                task_files["valid"],
                "--out",
                str(root / name),
            ]
            + FT
            + ["--rouge-examples", "0"]
            + extra
        )
    return {name: str(root / name / "best.pt") for name in runs}
