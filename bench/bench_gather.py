"""Benchmark of the early-exit index, gather and scatter kernels against torch's indexing.

    python -m bench.bench_gather        # CUDA: ours vs torch; CPU: the torch paths only

Shapes: M = B*T tokens of width C = 768 (the base model) in bf16, N of them active (25%, 50%,
90%). Methods, each timed in the same run:
  index    ours: kernels.early_exit.active_index (prefix sum on the device, one count read)
           vs torch: mask.reshape(-1).nonzero().squeeze(1)
  gather   ours: gather_rows(x, index)                 vs torch: x.index_select(0, index)
  scatter  ours: scatter_rows(base, index, rows)       vs torch: base.index_copy(0, index, rows)
           (both out of place: a copy of base with N rows replaced, what autograd needs)
Bandwidth counts the bytes that must move, e the element size:
  index    GB/s = (M + 8 * N) / t                       (read the bool mask, write N long indices)
  gather   GB/s = (2 * N * C * e + 8 * N) / t          (read N rows, write N rows, read the index)
  scatter  GB/s = (2 * M * C * e + 2 * N * C * e + 8 * N) / t   (copy base, then write N rows)
Under a CPU the Triton kernels would run in the interpreter, whose timings mean nothing, so only
the torch side is timed there, and the script says so.
"""

import argparse
import sys

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_gather (--help)")

import torch

from bench.common import CUDA, DEV, bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384], help="M = B*T values")
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions on CPU")
    args = ap.parse_args()
    from bench.common import check_flags

    check_flags(ap, args, positive=("tokens", "width", "reps"))
    if CUDA:
        from kernels import early_exit as ee

        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    else:
        ee = None
        print(
            "device: CPU. The Triton kernels would run in the interpreter here, whose timings mean "
            "nothing: only the torch paths are timed. Run on a CUDA GPU for the comparison."
        )
    dtype, C = torch.bfloat16, args.width
    e = torch.tensor([], dtype=dtype).element_size()
    print(f"dtype bf16, C = {C}; GB/s: gather (2NCe + 8N) / t, scatter (2MCe + 2NCe + 8N) / t\n")
    print("| M | active | op | torch ms | torch GB/s | ours ms | ours GB/s | torch / ours |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    g = torch.Generator().manual_seed(0)
    first = True
    for M in args.tokens:
        for frac in (0.25, 0.5, 0.9):
            active = (torch.rand(M // 128, 128, generator=g) < frac).to(DEV)
            index = active.reshape(-1).nonzero().squeeze(1)
            N = index.numel()
            x = torch.randn(M, C, generator=g).to(DEV, dtype)
            rows = torch.randn(N, C, generator=g).to(DEV, dtype)
            moved = {
                "index": M + 8 * N,
                "gather": 2 * N * C * e + 8 * N,
                "scatter": 2 * M * C * e + 2 * N * C * e + 8 * N,
            }
            torch_ops = {
                "index": lambda: active.reshape(-1).nonzero().squeeze(1),
                "gather": lambda: x.index_select(0, index),
                "scatter": lambda: x.index_copy(0, index, rows),
            }
            ours = (
                {}
                if ee is None
                else {
                    "index": lambda: ee.active_index(active),
                    "gather": lambda: ee.gather_rows(x, index),
                    "scatter": lambda: ee.scatter_rows(x, index, rows),
                }
            )
            if ee is not None:  # the same numbers before any timing
                assert torch.equal(ours["index"](), torch_ops["index"]())
                assert torch.equal(ours["gather"](), torch_ops["gather"]())
                assert torch.equal(ours["scatter"](), torch_ops["scatter"]())
            if first:  # one untimed pass of every op: the first row of a run read slow on both sides
                for fn in (*torch_ops.values(), *ours.values()):
                    bench(fn, args.reps)
                first = False
            for op in ("index", "gather", "scatter"):
                t_ref = bench(torch_ops[op], args.reps)
                cells = [f"{t_ref:.4f}", f"{moved[op] / t_ref / 1e6:.1f}"]
                if op in ours:
                    t = bench(ours[op], args.reps)
                    cells += [f"{t:.4f}", f"{moved[op] / t / 1e6:.1f}", f"{t_ref / t:.2f}"]
                else:
                    cells += ["-", "-", "-"]
                print(f"| {M} | {N} ({frac:.0%}) | {op} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
