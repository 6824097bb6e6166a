"""bench_early_exit.py --graphs: ELMER's decoder pass at static shapes (core/elmer/exit_pass.py) and its CUDA
graphs against the loop of before, at batch 1 and the larger batches, with the time of each captured
step; the rows and the targets its --json writes."""

import statistics
import sys
import time

if __name__ == "__main__" and not __package__:  # a module the benchmarks import
    sys.exit(
        "error: bench/exit_graphs.py is a module the benchmarks import, with nothing to run: "
        "run one of them, as python -m bench.bench_step (--help)"
    )

import torch

from bench.common import precision
from core.config import preset
from core.elmer.model import ELMER
from core.elmer.exit_decode import decode_exit
from core.timing import clock


def graphs_rows(args, device):
    from core.elmer.exit_pass import MASKED_MAX_TOKENS, masked_pass

    cfg = preset(args.model, vocab_size=args.vocab, n_layers=args.layers, n_dec_layers=args.layers, dropout=0.0)
    torch.manual_seed(0)
    model = ELMER(cfg, dec_len=args.dec_len).to(device).eval()
    T, L = args.dec_len, args.layers
    g = torch.Generator().manual_seed(0)
    out = dict(rows=[], targets=[])
    print(
        f"\n## The static-shape pass ({device.type}, {args.model} {L}L-{L}L, vocab {args.vocab}, T {T}, source "
        f"{args.src}, {args.dtype if device.type == 'cuda' else 'float32'}): decoder time per pass, ms (median of "
        f"{args.repeats})\n"
    )
    print("| batch | what | ms | / reference | reference |")
    print("|---|---|---|---|---|")
    for B in [args.batch] + [b for b in args.big_batches if b != args.batch]:
        src = torch.randint(6, args.vocab, (B, args.src), generator=g).to(device)
        valid = torch.ones(B, args.src, dtype=torch.bool, device=device)
        with torch.no_grad(), precision(args, device):
            memory = model.encode_source(src, valid)

        def timed(fn):
            with torch.no_grad(), precision(args, device):
                fn(), fn()
                return statistics.median(clock(device, fn) for _ in range(args.repeats))

        def plan_pass(layer, graphs, lag=None):
            p = masked_pass(model, B, args.src, T, "plan", 0.0, graphs)
            plan = torch.full((B * T,), layer, dtype=torch.long, device=device)
            return lambda: p.run(memory, valid, plan, lag=lag)

        today = timed(lambda: decode_exit(model, memory, valid, T, 0.0, layout="gather"))
        rows = {
            "today: decoder_loop, exit disabled": today,
            "masked, exit disabled, eager": timed(
                lambda: decode_exit(model, memory, valid, T, 0.0, layout="masked", graphs=False)
            ),
            "masked, exit disabled, graphs": timed(lambda: decode_exit(model, memory, valid, T, 0.0, layout="masked")),
        }
        disabled = rows["masked, exit disabled, graphs"]
        rows["masked, exit path, nobody leaves early, graphs"] = timed(plan_pass(L, True))
        rows["masked, every token leaves at layer 1, graphs"] = timed(plan_pass(1, True))
        rows["masked, nobody leaves early, graphs, stop flag read a layer late (lag 1)"] = timed(plan_pass(L, True, 1))
        rows["masked, every token leaves at layer 1, graphs, lag 1"] = timed(plan_pass(1, True, 1))
        for what, t in rows.items():
            if t is None:
                continue
            ref = today if what.startswith(("today", "masked, exit disabled")) else disabled
            print(
                f"| {B} | {what} | {1000 * t:.2f} | {t / ref:.3f} | "
                f"{'today' if ref is today else 'masked, exit disabled, graphs'} |",
                flush=True,
            )
            out["rows"].append(dict(batch=B, what=what, ms=1000 * t, ratio=t / ref))
        if B == args.batch:
            out["targets"] += [
                dict(
                    target=f"batch {B}: exit disabled, graphs / today",
                    measured=disabled / today,
                    wanted=0.5,
                    met=disabled / today <= 0.5,
                ),
                dict(
                    target=f"batch {B}: exit path, nobody leaving early / exit disabled",
                    measured=rows["masked, exit path, nobody leaves early, graphs"] / disabled,
                    wanted=1.05,
                    met=rows["masked, exit path, nobody leaves early, graphs"] / disabled <= 1.05,
                ),
                dict(
                    target=f"batch {B}: every token at layer 1 / exit disabled",
                    measured=rows["masked, every token leaves at layer 1, graphs"] / disabled,
                    wanted=0.35,
                    met=rows["masked, every token leaves at layer 1, graphs"] / disabled <= 0.35,
                ),
            ]
        print(
            f"| {B} | (decode_exit picks {'masked' if B * T <= MASKED_MAX_TOKENS else 'gathered'} here: "
            f"MASKED_MAX_TOKENS {MASKED_MAX_TOKENS}) | | | |"
        )
        if B == args.batch and device.type == "cuda":
            try:
                with torch.no_grad(), precision(args, device):
                    out["steps"] = step_times(
                        masked_pass(model, B, args.src, T, "plan", 0.0, True), memory, valid, args.repeats
                    )
            except Exception as e:  # noqa: BLE001  (a breakdown that fails is reported; the rows above stand)
                print(f"step times: failed ({type(e).__name__}: {str(e)[:200]})", flush=True)
    if out.get("steps"):
        print(
            f"\nbatch {args.batch}, the exit path's pass (graphs): each captured step replayed alone (GPU ms, CUDA "
            "events; and the host time of its replay call), one host read of the stop flag, a whole run with every "
            "token leaving at layer 1 and its host-side pieces (wall ms)\n\n| step | ms |\n|---|---|"
        )
        for name, ms in out["steps"].items():
            print(f"| {name} | {ms:.3f} |")
    print("\n| target | measured | wanted | met |\n|---|---|---|---|")
    for t in out["targets"]:
        print(f"| {t['target']} | {t['measured']:.3f} | <= {t['wanted']} | {'yes' if t['met'] else 'no'} |")
    return out


def step_times(p, memory, valid, repeats):
    """Where a graphed masked pass spends its time: the GPU time of each captured step (start, every
    layer, finish) replayed alone between two CUDA events, and the wall time of one host read of
    the stop flag (the sync the exit path adds after a layer), each the median of `repeats`."""
    p.run(memory, valid, torch.full((p.B * p.T,), p.L, dtype=torch.long, device=memory.device))  # captures
    names = ["start and layer 1"] + [f"layer {l + 1}" for l in range(1, p.L)] + ["finish"]  # MaskedExitPass._steps
    out = {}
    for name, g in zip(names, p._graphs):
        times, host = [], []
        for _ in range(repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            t0 = time.perf_counter()
            g.replay()
            host.append(1000 * (time.perf_counter() - t0))
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        out[name] = statistics.median(times)
        out[f"{name}: host time of the replay call"] = statistics.median(host)
    syncs = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        bool(p.anyone)
        syncs.append(1000 * (time.perf_counter() - t0))
    out["host read of the stop flag"] = statistics.median(syncs)
    plan = torch.ones(p.B * p.T, dtype=torch.long, device=memory.device)
    for what, fn in (
        ("run() with every token leaving at layer 1, wall", lambda: p.run(memory, valid, plan)),
        (
            "its copies of the inputs, host",
            lambda: (p.memory.copy_(memory), p.src_valid.copy_(valid), p.plan.copy_(plan)),
        ),
        ("its clones of the outputs, host", lambda: (p.tokens.clone(), p.layer_of.clone(), p.entropies.clone())),
    ):
        walls = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            walls.append(1000 * (time.perf_counter() - t0))
        out[what] = statistics.median(walls)
    return out
