"""ELMER's early exit, timed: does an exited token really stop costing? (ELMER section 4.4)

    python bench/bench_early_exit.py                 # CPU or the first CUDA GPU, about a minute
    python bench/bench_early_exit.py --model base    # the paper's width (6L-6L, 768)

Random weights (speed does not depend on them; exits are forced, not decided by the entropy).
One source of --src tokens, the decoder fed [MASK] x --dec-len, --layers encoder and decoder layers.

1. Decoder time against the fraction of tokens exited, relative to the same decoder with exit
   disabled (every token through every layer, plain (B, T) layout, one off-ramp at the top):
     after-1  a fraction f of the tokens exits after layer 1 (issue 14's target: f = 0.5 of 6
              layers, decoder time <= 0.65x no exit);
     each     a fraction f of the still-active tokens exits after every layer.
   Two columns: the layers alone (the gather / attention / FFN / scatter, the part the exit
   skips) and the layers plus an off-ramp (kernels.offramp) on the active tokens after every
   layer, which hard exit needs to decide and is a full vocabulary projection.
2. NAR one pass (ELMER with exit disabled: every layer, one off-ramp at the top) against AR beam search (the T5 baseline of
   the same size, beam 4, made to generate --dec-len tokens) at batch 1 (latency) and batch 64
   (throughput), both measured in this run; the ratio is printed.
Clock reads are preceded by a device synchronise; the median of --repeats runs after a warm-up.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from core import decoding  # noqa: E402
from core.config import preset  # noqa: E402
from core.elmer import ELMER  # noqa: E402
from core.model import EncoderDecoder  # noqa: E402
from core.t5 import T5Decoder  # noqa: E402


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device, fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class Tok:  # what the decoders need of a tokenizer
    pad_id, sos_id, eos_id, n_special = 0, 2, 3, 6


# -----------------------------------------------------------------------------
# 1. decoder time against the fraction exited

def decoder_time(model, memory, valid, T, exit_plan, ramps, repeats, device):
    """exit_plan: (B*T,) long, the layer (1-based) after which each token exits; None: exit
    disabled (plain layout, one off-ramp at the top)."""
    L = len(model.dec_layers)

    def decide(l, idx, h):
        if ramps or l == L - 1:
            model.ramp_stats(l, h)
        if exit_plan is None:
            return None, None
        return exit_plan[idx] == l + 1, None

    run = lambda: model.decoder_loop(memory, valid, T, decide, gather=exit_plan is not None)
    with torch.no_grad():
        return timed(device, run, repeats)


def plan_after_first(B, T, L, f, g, device):
    plan = torch.full((B * T,), L, dtype=torch.long)
    plan[torch.randperm(B * T, generator=g)[:round(f * B * T)]] = 1
    return plan.to(device)


def plan_each(B, T, L, f, g, device):
    plan = torch.full((B * T,), L, dtype=torch.long)
    alive = torch.randperm(B * T, generator=g)
    for l in range(1, L):
        k = round(f * len(alive))
        plan[alive[:k]] = l
        alive = alive[k:]
    return plan.to(device)


def sweep(args, device):
    cfg = preset(args.model, vocab_size=args.vocab, n_layers=args.layers, n_dec_layers=args.layers, dropout=0.0)
    torch.manual_seed(0)
    model = ELMER(cfg, dec_len=args.dec_len).to(device).eval()
    B, T, L = args.batch, args.dec_len, args.layers
    g = torch.Generator().manual_seed(0)
    src = torch.randint(6, args.vocab, (B, args.src), generator=g).to(device)
    valid = torch.ones(B, args.src, dtype=torch.bool, device=device)
    with torch.no_grad():
        memory = model.encode_source(src, valid)
    print(f"\n## Decoder time against the fraction exited ({device.type}, {args.model} width {cfg.d_model}, "
          f"{L} decoder layers, vocab {args.vocab}, batch {B}, T {T}, source {args.src})\n")
    base = {r: decoder_time(model, memory, valid, T, None, r, args.repeats, device) for r in (False, True)}
    print(f"exit disabled: layers {1000 * base[False]:.2f} ms, layers + off-ramp at every layer "
          f"{1000 * base[True]:.2f} ms (the no-exit reference below has one off-ramp, at the top)\n")
    print("| plan | f | mean exit layer | layers (ms) | ratio | layers + off-ramps (ms) | ratio |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for name, make in (("after-1", plan_after_first), ("each", plan_each)):
        for f in args.fractions:
            plan = make(B, T, L, f, g, device)
            t_l = decoder_time(model, memory, valid, T, plan, False, args.repeats, device)
            t_r = decoder_time(model, memory, valid, T, plan, True, args.repeats, device)
            mean = plan.float().mean().item()
            print(f"| {name} | {f:.2f} | {mean:.2f} | {1000 * t_l:.2f} | {t_l / base[False]:.3f} | "
                  f"{1000 * t_r:.2f} | {t_r / base[False]:.3f} |", flush=True)
            rows.append((name, f, t_l / base[False], t_r / base[False]))
    return rows


# -----------------------------------------------------------------------------
# 2. NAR one pass against AR beam search, same size

def nar_vs_ar(args, device):
    cfg = preset(args.model, vocab_size=args.vocab, n_layers=args.layers, n_dec_layers=args.layers, dropout=0.0)
    torch.manual_seed(0)
    nar = ELMER(cfg, dec_len=args.dec_len).to(device).eval()
    ar = EncoderDecoder(cfg).to(device).eval()
    rng = np.random.default_rng(0)
    print(f"\n## NAR one pass vs AR beam search ({device.type}, {args.model}, {args.layers}L-{args.layers}L, "
          f"both {sum(p.numel() for p in ar.parameters()) / 1e6:.1f}M parameters without ELMER's extras, "
          f"{args.dec_len} output tokens, beam {args.beam})\n")
    print("| batch | NAR (ms) | AR beam (ms) | AR / NAR |")
    print("|---|---|---|---|")
    for B in (1, args.big_batch):
        srcs = [list(rng.integers(6, args.vocab, args.src - 1)) for _ in range(B)]

        def run_nar():
            from core.elmer import generate
            generate(nar, srcs, Tok, delta=0.0)

        def run_ar():
            dec = T5Decoder(ar, srcs, Tok)
            decoding.beam_search(dec, args.beam, args.dec_len, args.dec_len, 1.0, Tok.eos_id, 0)

        with torch.no_grad():
            t_n = timed(device, run_nar, args.repeats if B == 1 else 1)
            t_a = timed(device, run_ar, max(1, args.repeats // 4) if B == 1 else 1)
        print(f"| {B} | {1000 * t_n:.1f} | {1000 * t_a:.1f} | {t_a / t_n:.1f}x |", flush=True)
        if B > 1:
            print(f"\nthroughput at batch {B}: NAR {B / t_n:.1f}, AR beam {B / t_a:.1f} samples/s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers (ELMER: 6L-6L)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--src", type=int, default=128, help="source tokens")
    p.add_argument("--dec-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=1, help="batch of the decoder sweep")
    p.add_argument("--big-batch", type=int, default=64, help="batch of the throughput comparison")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.1, 0.25, 0.5, 0.75, 0.9])
    p.add_argument("--skip-ar", action="store_true", help="only the decoder sweep")
    p.add_argument("--skip-sweep", action="store_true", help="only NAR vs AR")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = p.parse_args()
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    print(f"torch {torch.__version__}, {device.type}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else
             f", {torch.get_num_threads()} threads") + f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if not args.skip_sweep:
        sweep(args, device)
    if not args.skip_ar:
        nar_vs_ar(args, device)


if __name__ == "__main__":
    main()
