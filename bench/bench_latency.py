"""Decoding latency at batch 1 of fine-tuned summarizers, timed interleaved on the same sources,
with the FLOPs each decoding did beside the time (MLAE Table 3, ELMER Table 3: NAR against AR).

    python -m bench.bench_latency BASE.pt CKPT.pt ... [--n 20] [--repeats 5] [--beam 5]

The first checkpoint is the baseline of the ratios. Every checkpoint decodes the same --n sources
(eval.py's --limit sample of the test split, or of --data) one at a time, with eval.py's decoding: beam --beam
for AR, Mask-Predict with the fine-tuning's length candidates and iterations for NAR, one pass for
ELMER. --repeats rounds; within a round each source is decoded by every checkpoint in turn, the
order rotated from source to source, so that a shared machine's drift falls on all of them alike.
A checkpoint's time in a round is its sum over the sources; its time ratio is the median over the
rounds of that sum over the baseline's. FLOPs: torch.utils.flop_counter over one decoding of every
source with the reference attention (the Triton kernels are invisible to the counter; the work is
the same), 2 per multiply-add. NAR against AR is not equal work: AR decodes token by token, so its
time ratio may sit far from its FLOP ratio; that gap, the sequential steps, is what the papers
measure. Clock reads are preceded by a device synchronise (core.timing.clock). --dtype is
eval.py's (auto: bf16 autocast where eval.py would use it), so the time is that of the decoding
whose ROUGE eval.py reports; FLOPs are counted the same in either dtype.
"""

import argparse
import os
import statistics
import sys

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_latency (--help)")

import torch
from torch.utils.flop_counter import FlopCounterMode

import eval as evaluate  # noqa: E402
import kernels  # noqa: E402
from core import checkpoint  # noqa: E402
from core.decodings import decoding_of  # noqa: E402
from core.evaluation import examples, load_decoder  # noqa: E402
from core.distributed import resolve_device, resolve_dtype  # noqa: E402
from core.errors import UserError, main_guard  # noqa: E402
from core.timing import clock  # noqa: E402
from core.training import add_dtype_flag  # noqa: E402


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="fine-tuned summarization checkpoints; the first is the baseline")
    p.add_argument("--data", default=None, help="a .jsonl file of sources (default: the embedded corpus's test split)")
    p.add_argument("--n", type=int, default=20, help="sources (eval.py's --limit sample), decoded one at a time")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds over the sources")
    p.add_argument("--beam", type=int, default=5, help="AR beam size (eval.py's default)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    add_dtype_flag(p)
    args = p.parse_args(argv)
    from bench.common import check_flags

    check_flags(p, args, positive=("n", "repeats", "beam"), inputs=("data",))
    return args


def decoder_of(path, args, device, dtype):
    """(a function decoding one source, its table row) for one checkpoint, as eval.py decodes."""
    ck = checkpoint.read_finetuned(path)
    if ck.task != "summarize":
        raise UserError(f"{path} is a {ck.state['kind']} checkpoint: the latency benchmark times summarizers")
    kind = decoding_of(ck.arch)
    gen = kind.settings(evaluate.get_args([path, "--beam", str(args.beam)]), ck.state, path)[0]
    _, params, _, decode = load_decoder(ck, device, dtype, 1, gen)
    row = dict(
        model=os.path.basename(os.path.dirname(os.path.abspath(path))),
        arch=ck.arch,
        decoding=kind.label(gen),
        params_M=params / 1e6,
    )
    return lambda src: decode([src]), row


def flops_of(run, sources):
    """FLOPs (2 per multiply-add) of decoding every source once, with the reference attention."""
    with kernels.use_backend("reference"), FlopCounterMode(display=False) as counter:
        for s in sources:
            run(s)
    return counter.get_total_flops()


@main_guard
def main(argv=None):
    args = get_args(argv)
    device = resolve_device(args.device)
    data = ["--data", args.data] if args.data else []
    dtype = resolve_dtype(args.dtype, device)
    sources = examples("summarize", evaluate.get_args(data + ["--limit", str(args.n)])).sources
    runs, rows = [], []
    for path in args.checkpoints:
        run, row = decoder_of(path, args, device, dtype)
        runs.append(run)
        rows.append(row)
    with torch.no_grad():  # each decoder runs in the compute dtype (load_decoder)
        for run, row in zip(runs, rows):
            row["flops"] = flops_of(run, sources)
            run(sources[0])  # warm-up
        rounds = []
        for r in range(args.repeats):
            spent = [0.0] * len(runs)
            for i, src in enumerate(sources):
                for j in range(len(runs)):
                    k = (i + j + r) % len(runs)  # rotate who goes first
                    spent[k] += clock(device, lambda: runs[k](src))
            rounds.append(spent)
            print(
                f"\r  round {r + 1}/{args.repeats}",
                end="" if r + 1 < args.repeats else "\n",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"\n{len(sources)} test sources at batch 1, {args.repeats} interleaved rounds, {device.type} "
        f"({str(dtype)[6:]}, --dtype {args.dtype}), "
        f"{torch.get_num_threads()} thread(s); ratios against {rows[0]['model']}\n"
    )
    print("| run | arch | decoding | params (M) | ms / sample | time ratio | GFLOPs / sample | FLOP ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for j, row in enumerate(rows):
        ms = statistics.median(s[j] for s in rounds) / len(sources) * 1e3
        ratio = statistics.median(s[j] / s[0] for s in rounds)
        row.update(ms=ms, time_ratio=ratio, flop_ratio=row["flops"] / rows[0]["flops"])
        print(
            f"| {row['model']} | {row['arch']} | {row['decoding']} | {row['params_M']:.2f} | {ms:.1f} | {ratio:.2f} "
            "| "
            f"{row['flops'] / len(sources) / 1e9:.3f} | {row['flop_ratio']:.2f} |"
        )
    return rows


if __name__ == "__main__":
    main()
