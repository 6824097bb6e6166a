"""Training throughput of train.py's PMLM step in float32 against bf16 autocast (`--dtype`), and
optionally against torch.compile, measured in one run.

    OMP_NUM_THREADS=1 python -m bench.bench_dtype --repeats 6            # float32 vs bfloat16, interleaved
    OMP_NUM_THREADS=1 python -m bench.bench_dtype --compile --steps 40   # + torch.compile, compile time included

One "run" is a forward and backward pass and an optimizer step over one micro-batch of the real
pretraining data (the embedded corpus, --micro-batch x --seq-len tokens, the `small` preset). The
two dtypes alternate run by run, so both see the same load on a shared machine; the speed-up is
the median of the per-pair ratios. The loss of the first batch is printed for both: bf16 autocast
changes it by rounding only. --compile times `--steps` steps end to end from a fresh model, the
compilation included, against the same steps uncompiled: what a short CPU run would gain.
--json PATH writes the dtype comparison as data (tools/records.py), which docs/design.md renders.
"""

import argparse
import statistics
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_dtype (--help)")

import torch

from core.config import preset  # noqa: E402
from core.data import TokenStream, pretraining_texts  # noqa: E402
from core.distributed import Dist, native_bf16_cpu  # noqa: E402
from core.objectives import OBJECTIVES  # noqa: E402
from core.model import UnifiedLM  # noqa: E402
from core.optim import make_optimizer  # noqa: E402
from core.unilm.pmlm import pmlm_batch, pmlm_loss_sums  # noqa: E402
from core.training import autocast, corpus_tokenizer  # noqa: E402
from tools import records  # noqa: E402

COLUMNS = [
    ("dtype", "dtype", "{}"),
    ("tokens/s, median", "rate", "{:,.0f}"),
    ("loss of batch 0", "loss", "{:.4f}"),
    ("tokens/s against float32, median of the pairs", "ratio", "{:.2f}x"),
]


def make_model(tok, model, device, seed=0):
    torch.manual_seed(seed)
    m = UnifiedLM(preset(model, vocab_size=tok.vocab_size)).to(device)
    return m, make_optimizer(m, lr=1e-3, weight_decay=0.01)


def step(model, opt, batch, dtype, device):
    """One optimizer step; returns the mean loss of the batch."""
    with autocast(device, dtype):
        sums = pmlm_loss_sums(model, batch)
    n = max(1.0, float(sums["ae_n"] + sums.get("par_n", 0)))
    (sums["loss"] / n).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(sums["loss"].detach()) / n


def compare_dtypes(tok, args, device, batches, tokens):
    """float32 and bf16 autocast, alternating run by run."""
    dtypes = (torch.float32, torch.bfloat16)
    models = {dt: make_model(tok, args.model, device) for dt in dtypes}
    first = {dt: step(*models[dt], batches[0], dt, device) for dt in dtypes}  # warm-up, and the loss of batch 0
    times = {dt: [] for dt in dtypes}
    for r in range(args.repeats):
        for dt in dtypes if r % 2 == 0 else dtypes[::-1]:
            t = time.perf_counter()
            step(*models[dt], batches[1 + r], dt, device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[dt].append(time.perf_counter() - t)
            print(f"  pair {r + 1}, {str(dt)[6:]}: {times[dt][-1]:.2f} s", flush=True)
    ratio = statistics.median(a / b for a, b in zip(times[torch.float32], times[torch.bfloat16]))
    rows = [
        {
            "dtype": str(dt)[6:],
            "rate": tokens / statistics.median(times[dt]),
            "loss": first[dt],
            "ratio": 1.0 if dt == torch.float32 else ratio,
        }
        for dt in dtypes
    ]
    print("\n".join(records.markdown(COLUMNS, rows)))
    print(f"bfloat16 / float32 tokens/s, median of {args.repeats} interleaved pairs: {ratio:.2f}x")
    if args.json:
        records.write(
            args.json,
            ["python", "-m", "bench.bench_dtype", *sys.argv[1:]],
            COLUMNS,
            rows,
            note=f"`{args.model}` PMLM, one optimizer step of {tokens:,} tokens per run, {args.repeats} "
            f"interleaved pairs; native bf16: {native_bf16_cpu() if device.type == 'cpu' else 'cuda'}.",
            dtype="float32 against bfloat16 autocast",
        )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small")
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=6, help="interleaved pairs of runs (0: no dtype comparison)")
    p.add_argument("--compile", action="store_true", help="also time torch.compile end to end")
    p.add_argument("--steps", type=int, default=40, help="--compile: steps of each end-to-end run")
    p.add_argument("--json", default=None, help="also write the dtype comparison to this file")
    args = p.parse_args()
    from bench.common import check_flags

    check_flags(p, args, positive=("micro_batch", "steps"), at_least=dict(repeats=0, seq_len=8))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    d = Dist(0, 1, 0, device)
    texts, _ = pretraining_texts(None, None, "text")
    tok = corpus_tokenizer(texts, 8000, d)
    stream = TokenStream(tok.encode(texts[:20000]), OBJECTIVES["pmlm"].window(args.seq_len), 0, sep=tok.eos_id)
    batches = [
        pmlm_batch(stream, range(i * args.micro_batch, (i + 1) * args.micro_batch), tok).to(device)
        for i in range(max(args.repeats, args.steps) + 1)
    ]
    tokens = args.micro_batch * args.seq_len
    print(
        f"{device.type}, torch {torch.__version__}, {torch.get_num_threads()} threads, native bf16: "
        f"{native_bf16_cpu() if device.type == 'cpu' else 'cuda'}; {args.model}, {tokens} tokens per run"
    )

    if args.repeats > 0:
        compare_dtypes(tok, args, device, batches, tokens)
    if args.compile:
        dt = torch.bfloat16 if (device.type == "cuda" or native_bf16_cpu()) else torch.float32
        rows = []
        for compiled in (False, True):
            model, opt = make_model(tok, args.model, device)
            run_model = torch.compile(model) if compiled else model
            t = time.perf_counter()
            for i in range(args.steps):
                step(run_model, opt, batches[i], dt, device)
            rows.append(time.perf_counter() - t)
        print(
            f"{args.steps} steps end to end ({str(dt)[6:]}): eager {rows[0]:.1f} s, torch.compile {rows[1]:.1f} s "
            f"(compilation included): {rows[0] / rows[1]:.2f}x"
        )


if __name__ == "__main__":
    main()
