import json
import os
import sys

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
TINY = ["--dtype", "float32", "--model", "tiny", "--vocab-size", "600", "--seq-len", "48", "--batch-tokens", "384",
        "--micro-batch", "4", "--warmup", "2", "--log-every", "1", "--eval-every", "3",
        "--eval-examples", "8", "--save-every", "100"]
