"""Benchmark of the fused off-ramp against the PyTorch chain logits -> softmax -> entropy / argmax.

    python -m bench.bench_offramp       # CUDA: ours vs torch; CPU: the torch chain only

An ELMER off-ramp (Li et al. 2022, sections 4.1, 4.3) on N active tokens of width C = 768 against
the tied (V, C) embedding, V = 8000 (the embedded corpus's vocabulary), bf16 on CUDA. Methods:
  ours   kernels.early_exit.offramp: vocabulary tiles through an online max / sum, no (N, V) tensor;
  torch  z = F.linear(h, W, b).float(); lse = z.logsumexp(-1); p = z.softmax(-1);
         entropy = lse - (p * z).sum(-1); argmax = z.argmax(-1)   (kernels/reference.py's chain,
         with the matmul in the input dtype as autocast would run it).
Throughput: TFLOP/s = 2 * N * V * C / t (the matmul; the softmax's O(N V) work is not counted).
A second table times the training loss, forward + backward:
  ours   kernels.offramp_loss.offramp_cross_entropy (the gradients computed in the forward, --chunk
         token rows at a time, by default default_chunk(V): the chain's three products, one
         (chunk, V) block of logits);
  torch  F.cross_entropy(F.linear(h, W, b).float(), y)
  TFLOP/s = 6 * N * V * C / t for both: the chain's three matmuls (logits, dh, dW), ours the
  same three. Before timing, ours is checked against the chain in float32 (loss and the three
  gradients, relative to their scale).
Memory: on CUDA the peak allocated above the inputs during one call (torch.cuda.max_memory_allocated),
against the (N, V) float32 logits' 4 N V bytes. Under a CPU the Triton kernel would run in the
interpreter, whose timings mean nothing: only the torch chain is timed there (in float32).
"""

import argparse
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_offramp (--help)")

import torch
import torch.nn.functional as F

from bench.common import CUDA, DEV, bench  # noqa: E402


def torch_chain(h, w, b):
    z = F.linear(h, w, b).float()  # (N, V)
    lse = z.logsumexp(-1)
    p = z.softmax(-1)
    return z.argmax(-1), lse - (p * z).sum(-1), lse


def peak_extra(fn):
    """Bytes allocated at the peak of fn() above what was allocated before it (CUDA only)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--tokens", type=int, nargs="+", default=[512, 4096, 16384] if CUDA else [512, 4096], help="N values"
    )
    ap.add_argument("--vocab", type=int, nargs="+", default=[8000], help="V values (the issue's: 8000 50000)")
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions on CPU")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="CUDA: also profile the training loss of ours and "
        "the chain at each N (kernels' GPU time per call against the wall time per call)",
    )
    ap.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="token rows per chunk of the training loss (default: kernels.offramp_loss.default_chunk(V))",
    )
    args = ap.parse_args()
    from bench.common import check_flags

    check_flags(ap, args, positive=("tokens", "width", "reps", "chunk"), at_least=dict(vocab=2))
    for V in args.vocab:
        run(args, V)


def run(args, V):
    C = args.width
    if CUDA:
        from kernels import early_exit as ee
        from kernels import offramp_loss as ol

        dtype = torch.bfloat16
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16")
    else:
        ee, dtype = None, torch.float32
        print(
            "device: CPU, float32. The Triton kernel would run in the interpreter here, whose timings "
            "mean nothing: only the torch chain is timed. Run on a CUDA GPU for the comparison."
        )
    print(
        f"V = {V}, C = {C}; TFLOP/s = 2 N V C / t; memory: peak above the inputs, (N, V) float32 logits = 4 N V bytes\n"
    )
    print("| N | torch ms | torch TFLOP/s | torch peak MB | ours ms | ours TFLOP/s | ours peak MB | torch / ours |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(V, C, generator=g) * C**-0.5).to(DEV, dtype)
    b = torch.randn(V, generator=g).to(DEV)
    for N in args.tokens:
        h = torch.randn(N, C, generator=g).to(DEV, dtype)
        flops = 2 * N * V * C
        ref = lambda: torch_chain(h, w, b.to(dtype))  # noqa: E731
        t_ref = bench(ref, args.reps)
        cells = [f"{t_ref:.3f}", f"{flops / t_ref / 1e9:.2f}", f"{peak_extra(ref) / 2**20:.1f}" if CUDA else "-"]
        if ee is not None:
            ours = lambda: ee.offramp(h, w, b)  # noqa: E731
            arg, ent, lse = ours()
            arg_r, ent_r, lse_r = torch_chain(h.float(), w.float(), b)
            assert (lse - lse_r).abs().max() < 1e-2 and (ent - ent_r).abs().max() < 1e-2, "ours disagrees"
            t = bench(ours, args.reps)
            cells += [f"{t:.3f}", f"{flops / t / 1e9:.2f}", f"{peak_extra(ours) / 2**20:.1f}", f"{t_ref / t:.2f}"]
        else:
            cells += ["-", "-", "-", "-"]
        print(f"| {N} | " + " | ".join(cells) + f" |   (N, V) logits: {4 * N * V / 2**20:.0f} MB")

    print("\ntraining loss, forward + backward; TFLOP/s = 6 N V C / t\n")
    print("| N | torch ms | torch TFLOP/s | torch peak MB | ours ms | ours TFLOP/s | ours peak MB | torch / ours |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for N in args.tokens:
        h = torch.randn(N, C, generator=g).to(DEV, dtype).requires_grad_()
        wl, bl = w.clone().requires_grad_(), b.clone().requires_grad_()
        y = torch.randint(0, V, (N,), generator=g).to(DEV)
        flops = 6 * N * V * C

        def ref():
            F.cross_entropy(F.linear(h, wl, bl.to(dtype)).float(), y).backward()

        t_ref = bench(ref, args.reps)
        cells = [f"{t_ref:.3f}", f"{flops / t_ref / 1e9:.2f}", f"{peak_extra(ref) / 2**20:.1f}" if CUDA else "-"]
        if ee is not None:
            chunk = args.chunk or ol.default_chunk(V)

            def ours():
                ol.offramp_cross_entropy(h, wl, bl, y, chunk=chunk).backward()

            check_loss(ol, h, wl, bl, y, chunk)
            t = bench(ours, args.reps)
            peak_ref, peak = peak_extra(ref), peak_extra(ours)
            cells += [f"{t:.3f}", f"{flops / t / 1e9:.2f}", f"{peak / 2**20:.1f}", f"{t_ref / t:.2f}"]
            if args.profile:
                profile(f"V {V} N {N}, chunk {chunk}", {"ours": ours, "torch": ref})
            if N >= 4096:
                met = t_ref / t >= 1.2 and peak <= peak_ref / 4
                print(
                    f"target V {V} N {N}: fwd+bwd {t_ref / t:.2f}x the chain (>= 1.2), peak memory "
                    f"{peak / peak_ref:.2f} "
                    f"of the chain's (<= 0.25): {'met' if met else 'not met'}"
                )
        else:
            cells += ["-", "-", "-", "-"]
        print(f"| {N} | " + " | ".join(cells) + " |")


def profile(title, fns, calls=5):
    """Per call of each fn: the wall time, the GPU time of its kernels, and its kernels by GPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e3 / calls
        kernels = {}
        for e in p.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                k = kernels.setdefault(e.name[:70], [0.0, 0])
                k[0] += e.device_time / 1e3 / calls
                k[1] += 1
        gpu = sum(v[0] for v in kernels.values())
        print(
            f"\nprofile, {title}, {name}: wall {wall:.3f} ms per call, its kernels {gpu:.3f} ms of GPU time, "
            f"{sum(v[1] for v in kernels.values()) / calls:.0f} launches"
        )
        for k, (ms, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:8]:
            print(f"  {ms:8.3f} ms  x{n // calls:<3d} {k}")


def check_loss(ol, h, w, b, y, chunk):
    """Ours against the chain in float32 on the same inputs: the loss and the gradients to h, W
    and b, each within 2e-2 of its largest value (bf16 operands). Stops the run if not."""
    got, want = [], []
    for fn, out in (
        (lambda a, c, d: ol.offramp_cross_entropy(a, c, d, y, chunk=chunk), got),
        (lambda a, c, d: F.cross_entropy(F.linear(a.float(), c.float(), d.float()), y), want),
    ):
        hh, ww, bb = (t.detach().clone().requires_grad_() for t in (h, w, b))
        loss = fn(hh, ww, bb)
        loss.backward()
        out += [loss.detach(), hh.grad, ww.grad, bb.grad]
    for name, a, r in zip(("loss", "dh", "dW", "db"), got, want):
        err = (a.float() - r.float()).abs().max().item()
        assert err <= 2e-2 * r.float().abs().max().item() + 1e-6, f"training loss: {name} off by {err:.3g}"


if __name__ == "__main__":
    main()
