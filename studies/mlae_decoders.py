"""MLAE's decoder variants at one budget: (a) self-attention over latents and [MASK]s, (b) [MASK]s
with cross-attention to the latents, with and without the cross-attention's relative position bias
(MLAE paper Table 6 ablates (a) against (b)); and T5-NAR's decoder, with and without its anchors'
cross-attention bias and the length predictor's gradient into the encoder (core/mlae/nar.py). Prints the
held-out masked-token loss of each against the unigram entropy of the held-out text, the loss of a
model that ignores context.

    OMP_NUM_THREADS=1 python -m studies.mlae_decoders                   # word-cycle text, tiny, 300 steps
    OMP_NUM_THREADS=1 python -m studies.mlae_decoders --variants
    t5,t5-nar,t5-nar-bias,t5-nar+length-grad,t5-nar-bias+length-grad
    OMP_NUM_THREADS=1 python -m studies.mlae_decoders --text corpus --model small --steps 120

--text cycle is the text of tests/test_train.py (a fixed cycle of 20 words, every document
starting anywhere in it: a masked word follows from its neighbours), with its tokenizer (856 pieces
of the embedded corpus's first 1500 training documents); --text corpus is the embedded corpus.
Each variant is one `python train.py` run, printed before it starts; runs go to --out/VARIANT.
--json PATH writes the table as data (tools/records.py), which docs/mlae.md renders.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from core.data import embedded_records  # noqa: E402
from core.tokenizer import Tokenizer  # noqa: E402
from tools import records  # noqa: E402

VARIANTS = {
    "a": ["--objective", "mlae", "--decoder", "a"],
    "b+bias": ["--objective", "mlae", "--decoder", "b", "--cross-rel-pos"],
    "b-bias": ["--objective", "mlae", "--decoder", "b", "--no-cross-rel-pos"],
    "t5": ["--objective", "t5"],  # T5's AR decoder, for scale
    # T5-NAR's decoder (core/mlae/nar.py): the anchors' cross-attention bias, and whether the
    # length predictor's loss reaches the encoder
    "t5-nar": ["--objective", "t5-nar"],
    "t5-nar-bias": ["--objective", "t5-nar", "--no-cross-rel-pos"],
    "t5-nar+length-grad": ["--objective", "t5-nar", "--length-grad"],
    "t5-nar-bias+length-grad": ["--objective", "t5-nar", "--no-cross-rel-pos", "--length-grad"],
}
MLAE = ("a", "b+bias", "b-bias")
LABELS = {
    "a": "(a)",
    "b+bias": "(b) with the cross-attention bias",
    "b-bias": "(b) without it",
    "t5": "T5 (AR, teacher-forced)",
    "t5-nar": "T5-NAR: anchor bias, length loss kept out of the encoder (default)",
    "t5-nar-bias": "T5-NAR: no anchor bias",
    "t5-nar+length-grad": "T5-NAR: anchor bias, length loss into the encoder",
    "t5-nar-bias+length-grad": "T5-NAR: neither",
}
COLUMNS = [
    ("decoder", "decoder", "{}"),
    ("held-out loss (nats)", "loss", "{:.3f}"),
    ("accuracy", "acc", "{:.1%}"),
    ("unigram entropy", "entropy", "{:.3f}"),
    ("under the unigram entropy", "under", "{:.3f}"),
]
# tests/conftest.py's TINY, with a held-out set of 256 examples evaluated every 100 steps
TINY = [
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
    "50",
    "--eval-every",
    "100",
    "--eval-examples",
    "256",
    "--save-every",
    "1000",
]


def cycle_text(out):
    """The word-cycle documents and their tokenizer (tests/test_train.py test_loss_falls)."""
    words = (
        "package library python module server client network driver kernel video audio "
        "font game editor tool data file system shell terminal"
    ).split()
    rng = np.random.default_rng(0)
    docs = [" ".join(words[(o + i) % len(words)] for i in range(40)) for o in rng.integers(0, len(words), 300)]
    text, spm = os.path.join(out, "cycle.txt"), os.path.join(out, "spm.model")
    with open(text, "w") as f:
        f.write("\n".join(docs) + "\n")
    corpus = [r["document"] for r in embedded_records("train")[:1500]]
    with open(spm, "wb") as f:
        f.write(Tokenizer.train(corpus, 856).proto)
    return ["--data", text, "--tokenizer", spm]


def last_eval(run):
    with open(os.path.join(run, "log.jsonl")) as f:
        evals = [r for r in map(json.loads, f) if "valid_loss" in r]
    return evals[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default="cycle", choices=["cycle", "corpus"])
    p.add_argument("--model", default="tiny", choices=["tiny", "small"])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument(
        "--lr", default=None, help="default 3e-3 on the word cycle (the README's), train.py's 1e-3 on the corpus"
    )
    p.add_argument("--seed", default="1234")
    p.add_argument("--variants", default=",".join(MLAE), help=f"any of {', '.join(VARIANTS)}")
    p.add_argument("--out", default="checkpoints/mlae-decoders")
    p.add_argument(
        "--json", default=None, help="also write the table to this file (e.g. results/studies/mlae-decoders.json)"
    )
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    args.lr = args.lr or ("3e-3" if args.text == "cycle" else "1e-3")
    flags = [
        "--model",
        args.model,
        "--steps",
        str(args.steps),
        "--lr",
        args.lr,
        "--dropout",
        "0",
        "--seed",
        args.seed,
        "--overwrite",
    ]
    flags += (
        (cycle_text(args.out) + TINY)
        if args.text == "cycle"
        else ["--log-every", "25", "--eval-every", "50", "--save-every", "100000"]
    )
    rows = []
    for name in args.variants.split(","):
        run = os.path.join(args.out, name)
        cmd = [sys.executable, "train.py", *VARIANTS[name], *flags, "--out", run]
        print("$ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
        ev = last_eval(run)
        key = "text_" if "valid_text_loss" in ev else ""  # T5-NAR: the token loss, without the length's
        rows.append(
            {
                "decoder": LABELS.get(name, name),
                "loss": ev[f"valid_{key}loss"],
                "acc": ev[f"valid_{key}acc"],
                "entropy": ev["unigram_entropy"],
                "under": ev["unigram_entropy"] - ev[f"valid_{key}loss"],
            }
        )
    command = ["python", "-m", "studies.mlae_decoders", *sys.argv[1:]]
    print("\n" + "\n".join(records.markdown(COLUMNS, rows)))
    if args.json:
        records.write(
            args.json,
            command,
            COLUMNS,
            rows,
            note=f"{args.text} text, {args.model}, {args.steps} steps, lr {args.lr}, seed {args.seed}, "
            "one run each" + (", held-out loss over 256 examples." if args.text == "cycle" else "."),
        )


if __name__ == "__main__":
    main()
