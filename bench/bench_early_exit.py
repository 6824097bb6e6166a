"""ELMER's early exit, timed against the same decoder with exit disabled (ELMER section 4.4).

    python -m bench.bench_early_exit --ckpt checkpoints/ft-elmer-small/best.pt     # the real decode path
    python -m bench.bench_early_exit --forced                                     # random weights, forced exits
    python -m bench.bench_early_exit --forced --model base --forced-batches 64 256   # ... at throughput batches
    python -m bench.bench_early_exit --ar                                         # NAR one pass vs AR beam search

1. --ckpt: a fine-tuned ELMER on --n test sources of the embedded corpus (batch --batch), the
   encoder run once beforehand; the decoder is core.elmer.exit_decode.decode_exit, exactly what
   generate runs, for each exit measure and threshold (--measures, --thresholds), against the
   same call with exit disabled (only the top off-ramp). Each batch's tokens are read back to the
   host before the next starts, as eval.py does: a latency, so that a pass without host syncs does
   not hide its launches behind the next one's work.
2. --forced: random weights, exits forced by a plan (a fraction f exits after layer 1, or after
   every layer), with the off-ramp work the decode path does for that plan: "cheap" (state /
   classifier: the vocabulary projection once per token, at its exit layer) or "entropy" (the
   projection on every active token at every layer).
Every exit row is interleaved with its own no-exit baseline: the two alternate --repeats times
after a warm-up, and the time ratio is the median of the per-pair ratios (a shared machine drifts
between rows, not within a pair). Beside it, the ratio of decoder multiply-adds
(core.elmer.exit_decode.decoder_macs): a time ratio below its FLOP ratio means the exit skipped work
it should have done, a bug.
3. --ar: NAR one pass (exit disabled) against AR beam search of the same size (T5 baseline, beam
   --beam, --dec-len tokens) at batch 1 and --big-batch.
4. --graphs: the static-shape pass (core/elmer/exit_pass.py, CUDA graphs on a GPU) against today's
   decoder_loop at batch --batch: exit disabled both ways, then with the exit path on and nothing
   leaving early, and with every token leaving at layer 1; and the masked layout against the
   gathered one at larger batches (where decode_exit switches: MASKED_MAX_TOKENS). --json writes
   the rows and the targets of the early-exit issue, met or not.
Clock reads are preceded by a device synchronise.
"""

import argparse
import os
import statistics
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_early_exit (--help)")

import numpy as np
import torch

import kernels  # noqa: E402
from core import checkpoint, decoding  # noqa: E402
from core.batch import pad_stack  # noqa: E402
from core.config import ModelConfig, preset  # noqa: E402
from core.distributed import resolve_device  # noqa: E402
from core.elmer.model import ELMER  # noqa: E402
from core.elmer.exit_measures import DEFAULT_THRESHOLD  # noqa: E402
from core.elmer.exit_decode import decode_exit, decoder_macs  # noqa: E402
from bench.common import precision  # noqa: E402
from bench.exit_graphs import graphs_rows  # noqa: E402
from core.model import EncoderDecoder  # noqa: E402
from core.t5 import T5Decoder  # noqa: E402
from core.timing import clock  # noqa: E402


def output_layers(tokens, layers, eos_id):
    """The exit layers of the output tokens, each row's up to and including its first [EOS], as
    eval.py counts them (the positions after it exit too, and cost FLOPs, but are not output)."""
    keep = (tokens == eos_id).long().cumsum(1) - (tokens == eos_id).long() == 0
    return layers[keep].reshape(-1).cpu()


def interleaved(device, run, base, repeats):
    """(median of per-pair time ratios run / base, median run seconds, median base seconds)."""
    run(), base()  # warm-up
    pairs = []
    for i in range(repeats):
        if i % 2:  # alternate which goes first, so that neither always gets the warmer cache
            b, a = clock(device, base), clock(device, run)
        else:
            a, b = clock(device, run), clock(device, base)
        pairs.append((a, b))
    return (
        statistics.median(a / b for a, b in pairs),
        statistics.median(a for a, _ in pairs),
        statistics.median(b for _, b in pairs),
    )


class Tok:  # what the decoders need of a tokenizer
    pad_id, sos_id, eos_id, pseudo_id, n_special = 0, 2, 3, 5, 6


# -----------------------------------------------------------------------------
# 1. the real decode path of a fine-tuned checkpoint


def real_decode(args, device):
    from core.architectures import arch_of, build_model
    from core.tasks import load_split
    from core.tokenizer import Tokenizer

    state = checkpoint.load(args.ckpt, kinds=("finetune/",))
    if arch_of(state, args.ckpt) != "elmer":
        raise SystemExit(f"error: {args.ckpt} is not an elmer checkpoint")
    cfg = ModelConfig.from_dict(state["model_config"])
    model = build_model("elmer", cfg, None, state.get("elmer"))
    model.load_state_dict(state["model"])
    model.to(device).eval()
    tok = Tokenizer.from_tensor(state["tokenizer"])
    data = load_split("summarize", "test", None).shuffled(seed=0)
    max_src = state["args"]["max_src"]
    ids = [s[: max_src - 1] + [tok.eos_id] for s in tok.encode(data.sources[: args.n])]
    T, L = model.dec_len, len(model.dec_layers)
    batches = []
    with torch.no_grad():
        for i in range(0, len(ids), args.batch):
            src, valid = pad_stack([np.array(s, dtype=np.int64) for s in ids[i : i + args.batch]], tok.pad_id)
            src, valid = src.to(device), valid.to(device)
            batches.append((model.encode_source(src, valid), valid))

    def decode(measure, thr, works=None):
        def run():
            with torch.no_grad(), precision(args, device):
                for memory, valid in batches:
                    w = {}
                    tokens, layers = decode_exit(model, memory, valid, T, thr, measure=measure, work=w)
                    tokens = tokens.cpu()  # each batch's tokens read back, as eval.py does: a latency, not a queue
                    if works is not None:
                        works.append((memory.shape[1], w, output_layers(tokens, layers.cpu(), tok.eos_id)))

        return run

    dtype = args.dtype if device.type == "cuda" else "float32"
    print(
        f"\n## The decode path of {args.ckpt} ({device.type}, {dtype}, {L} decoder layers, width {cfg.d_model}, "
        f"vocab {cfg.vocab_size}, {args.n} test sources in batches of {args.batch}, T {T})\n"
    )
    print(
        "Exit layers: of the output tokens (up to each row's first [EOS], as eval.py counts them); FLOPs and "
        "time: the whole decoder, every position.\n"
    )
    print(
        "| measure | threshold | mean exit layer | exit fraction per layer | decoder FLOPs / no exit | "
        "decoder time / no exit | exit (ms) | no exit (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for measure in args.measures:
        for thr in args.thresholds.get(measure, [DEFAULT_THRESHOLD[measure]]):
            works, off = [], []
            decode(measure, thr, works)()
            decode("entropy", 0.0, off)()
            macs = sum(decoder_macs(cfg, T, S, w) for S, w, _ in works)
            macs_off = sum(decoder_macs(cfg, T, S, w) for S, w, _ in off)
            layers = torch.cat([lay for _, _, lay in works])
            frac = torch.bincount(layers, minlength=L + 1)[1:].double() / layers.numel()
            mean = float((frac * torch.arange(1, L + 1)).sum())
            ratio, t_exit, t_off = interleaved(device, decode(measure, thr), decode("entropy", 0.0), args.repeats)
            flops = macs / macs_off
            flag = "  <- below its FLOP ratio" if ratio < flops * 0.97 else ""
            print(
                f"| {measure} | {thr:g} | {mean:.2f} | {'/'.join(f'{f:.2f}' for f in frac.tolist())} | {flops:.3f} | "
                f"{ratio:.3f}{flag} | {1000 * t_exit:.1f} | {1000 * t_off:.1f} |",
                flush=True,
            )
            rows.append(
                dict(
                    measure=measure,
                    threshold=thr,
                    mean_exit=mean,
                    flops=flops,
                    time=ratio,
                    exit_ms=1000 * t_exit,
                    off_ms=1000 * t_off,
                )
            )
    default = DEFAULT_THRESHOLD["classifier"]
    targets = [
        dict(
            target=f"trained, classifier at {r['threshold']:g}: decoder time / exit disabled",
            measured=r["time"],
            wanted=0.7,
            met=r["time"] <= 0.7,
        )
        for r in rows
        if r["measure"] == "classifier" and r["threshold"] == default
    ]
    for t in targets:
        print(f"(target {t['target']}: {t['measured']:.3f} (<= 0.7): {'met' if t['met'] else 'not met'})", flush=True)
    return dict(checkpoint=args.ckpt, dtype=dtype, n=args.n, batch=args.batch, ckpt_rows=rows, ckpt_targets=targets)


# -----------------------------------------------------------------------------
# 2. random weights, forced exits, the decode path's off-ramp work


def forced_decode(model, memory, valid, T, plan, ramps, work):
    """plan: (B*T,) the layer (1-based) each token leaves at, or None: exit disabled. ramps:
    "cheap" (projection at the exit layer only) or "entropy" (every active token, every layer)."""
    L = len(model.dec_layers)
    for k in ("queries", "ramp", "measure"):
        work.setdefault(k, [0] * L)

    def decide(l, idx, h, x_in):
        work["queries"][l] += idx.numel()
        if plan is None:
            if l == L - 1:
                model.ramp_stats(l, h)
                work["ramp"][l] += idx.numel()
            return None, None
        exit_ = plan[idx] == l + 1
        if ramps == "entropy" or l == L - 1:
            model.ramp_stats(l, h)
            work["ramp"][l] += idx.numel()
        else:
            work["measure"][l] += idx.numel()
            torch.nn.functional.cosine_similarity(h, h, dim=-1)  # an O(C) measure's cost
            out = kernels.active_index(exit_)
            if out.numel():
                model.ramp_stats(l, kernels.gather_rows(h, out))
                work["ramp"][l] += out.numel()
        return exit_, None

    model.decoder_loop(memory, valid, T, decide, gather=plan is not None)


def plan_of(kind, B, T, L, f, g, device):
    plan = torch.full((B * T,), L, dtype=torch.long)
    alive = torch.randperm(B * T, generator=g)
    for l in range(1, L if kind == "each" else 2):
        k = round(f * len(alive))
        plan[alive[:k]] = l
        alive = alive[k:]
    return plan.to(device)


def forced(args, device):
    """The forced-exit rows at each of --forced-batches; at a throughput batch (64 or more) the early-exit
    issue's target: every row's time ratio at most 1.15x its FLOP ratio."""
    cfg = preset(args.model, vocab_size=args.vocab, n_layers=args.layers, n_dec_layers=args.layers, dropout=0.0)
    torch.manual_seed(0)
    model = ELMER(cfg, dec_len=args.dec_len).to(device).eval()
    T, L = args.dec_len, args.layers
    g = torch.Generator().manual_seed(0)
    out = dict(forced=[], forced_targets=[])
    for B in args.forced_batches or [args.batch]:
        src = torch.randint(6, args.vocab, (B, args.src), generator=g).to(device)
        valid = torch.ones(B, args.src, dtype=torch.bool, device=device)
        with torch.no_grad(), precision(args, device):
            memory = model.encode_source(src, valid)
        print(
            f"\n## Forced exits, random weights ({device.type}, {args.model} width {cfg.d_model}, {L} decoder "
            "layers, "
            f"vocab {args.vocab}, batch {B}, T {T}, source {args.src}, "
            f"{args.dtype if device.type == 'cuda' else 'float32'})\n"
        )
        print("| plan | f | mean exit layer | off-ramp work | decoder FLOPs / no exit | decoder time / no exit |")
        print("|---|---|---|---|---|---|")
        off_work, rows = {}, []
        with torch.no_grad(), precision(args, device):
            forced_decode(model, memory, valid, T, None, "cheap", off_work)
        for kind in ("after-1", "each"):
            for f in args.fractions:
                plan = plan_of(kind, B, T, L, f, g, device)
                for ramps in ("cheap", "entropy"):
                    work = {}
                    with torch.no_grad(), precision(args, device):
                        forced_decode(model, memory, valid, T, plan, ramps, work)
                        ratio, _, _ = interleaved(
                            device,
                            lambda: forced_decode(model, memory, valid, T, plan, ramps, {}),
                            lambda: forced_decode(model, memory, valid, T, None, ramps, {}),
                            args.repeats,
                        )
                    flops = decoder_macs(cfg, T, args.src, work) / decoder_macs(cfg, T, args.src, off_work)
                    flag = "  <- below its FLOP ratio" if ratio < flops * 0.97 else ""
                    print(
                        f"| {kind} | {f:.2f} | {plan.float().mean().item():.2f} | {ramps} | {flops:.3f} | "
                        f"{ratio:.3f}{flag} |",
                        flush=True,
                    )
                    rows.append(
                        dict(
                            batch=B,
                            plan=kind,
                            f=f,
                            ramps=ramps,
                            mean_exit=plan.float().mean().item(),
                            flops=flops,
                            ratio=ratio,
                        )
                    )
        out["forced"] += rows
        if B >= 64:
            worst = max(rows, key=lambda r: r["ratio"] / r["flops"])
            over = worst["ratio"] / worst["flops"]
            out["forced_targets"].append(
                dict(
                    target=f"batch {B}: forced exits, the worst row's time ratio / its FLOP ratio ({worst['plan']} "
                    f"f {worst['f']:.2f}, {worst['ramps']})",
                    measured=over,
                    wanted=1.15,
                    met=over <= 1.15,
                    sense="<=",
                )
            )
            print(
                f"\nbatch {B}: worst time ratio / FLOP ratio {over:.3f} (target <= 1.15: "
                f"{'met' if over <= 1.15 else 'not met'})",
                flush=True,
            )
    return out


# -----------------------------------------------------------------------------
# 3. NAR one pass against AR beam search, same size


def nar_vs_ar(args, device):
    from core.elmer.exit_decode import generate

    cfg = preset(args.model, vocab_size=args.vocab, n_layers=args.layers, n_dec_layers=args.layers, dropout=0.0)
    torch.manual_seed(0)
    nar = ELMER(cfg, dec_len=args.dec_len).to(device).eval()
    ar = EncoderDecoder(cfg).to(device).eval()
    rng = np.random.default_rng(0)
    print(
        f"\n## NAR one pass vs AR beam search ({device.type}, {args.model}, {args.layers}L-{args.layers}L, "
        f"{args.dec_len} output tokens, beam {args.beam})\n"
    )
    print("| batch | NAR (ms) | AR beam (ms) | AR / NAR |")
    print("|---|---|---|---|")
    for B in (1, args.big_batch):
        srcs = [list(rng.integers(6, args.vocab, args.src - 1)) for _ in range(B)]
        run_nar = lambda: generate(nar, srcs, Tok, delta=0.0)
        run_ar = lambda: decoding.beam_search(
            T5Decoder(ar, srcs, Tok), args.beam, args.dec_len, args.dec_len, 1.0, Tok.eos_id, 0
        )
        with torch.no_grad():
            run_nar(), run_ar()
            t_n = statistics.median(clock(device, run_nar) for _ in range(max(1, args.repeats // 4)))
            t_a = statistics.median(clock(device, run_ar) for _ in range(max(1, args.repeats // 8)))
        print(f"| {B} | {1000 * t_n:.1f} | {1000 * t_a:.1f} | {t_a / t_n:.1f}x |", flush=True)


# -----------------------------------------------------------------------------
# 4. the static-shape pass and its graphs against today's decoder_loop


def parse_thresholds(text):
    """'entropy=0.5,1;state=0.9' -> {measure: [thresholds]}, each in its measure's range (what eval.py
    accepts: core.elmer.exit_measures.check_threshold)."""
    from core.errors import UserError
    from core.elmer.exit_measures import MEASURES, check_threshold

    out = {}
    for part in filter(None, text.split(";")):
        try:
            m, vals = part.split("=")
            m = m.strip()
            out[m] = [float(v) for v in vals.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: MEASURE=X,Y,... (e.g. 'entropy=0.5,1;state=0.99')") from None
        if m not in MEASURES:
            raise argparse.ArgumentTypeError(f"{m!r} is not a measure ({', '.join(MEASURES)})")
        for v in out[m]:
            try:
                check_threshold(m, v)
            except UserError as e:
                raise argparse.ArgumentTypeError(str(e)) from None
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", default=None, help="a fine-tuned elmer checkpoint: time its real decode path")
    p.add_argument("--n", type=int, default=32, help="--ckpt: test sources")
    p.add_argument(
        "--measures", nargs="+", default=["entropy", "state", "classifier"], choices=["entropy", "state", "classifier"]
    )
    p.add_argument(
        "--thresholds",
        type=parse_thresholds,
        default=parse_thresholds("entropy=0.5,1,2,4;state=0.999,0.995,0.99,0.98;classifier=0.95,0.9,0.8,0.6"),
        help="per measure, e.g. 'entropy=0.5,1;state=0.99,0.98'",
    )
    p.add_argument("--forced", action="store_true", help="the random-weight forced-exit rows")
    p.add_argument("--ar", action="store_true", help="NAR one pass vs AR beam search")
    p.add_argument("--model", default="small", choices=["tiny", "small", "base"], help="--forced, --ar: the width")
    p.add_argument("--layers", type=int, default=6, help="--forced, --ar: encoder and decoder layers (ELMER: 6L-6L)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--src", type=int, default=80, help="--forced, --ar: source tokens")
    p.add_argument("--dec-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=1, help="the batch of the exit rows (the paper's latency: 1)")
    p.add_argument("--big-batch", type=int, default=64, help="--ar: the throughput batch")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--repeats", type=int, default=10, help="interleaved pairs per row")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 0.9])
    p.add_argument(
        "--forced-batches",
        type=int,
        nargs="+",
        default=None,
        help="--forced: the batches of its rows (default --batch); at 64 or more each prints the "
        "throughput target, time ratio <= 1.15x FLOP ratio",
    )
    p.add_argument("--graphs", action="store_true", help="the static-shape pass and its CUDA graphs vs today's loop")
    p.add_argument("--big-batches", type=int, nargs="+", default=[64, 256], help="--graphs: the larger batches")
    p.add_argument(
        "--dtype",
        default="bfloat16",
        choices=["bfloat16", "float32"],
        help="--ckpt, --forced, --graphs on CUDA: bf16 autocast (eval.py's --dtype auto there) or float32 "
        "(the older rows of bench/RESULTS.md say which they ran)",
    )
    p.add_argument("--json", default=None, help="--ckpt, --forced, --graphs: write their rows and targets to this file")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = p.parse_args()
    from bench.common import check_flags

    check_flags(
        p,
        args,
        positive=(
            "n",
            "layers",
            "src",
            "dec_len",
            "batch",
            "big_batch",
            "beam",
            "repeats",
            "forced_batches",
            "big_batches",
        ),
        at_least=dict(vocab=16),
        inputs=("ckpt",),
    )
    if not (args.ckpt or args.forced or args.ar or args.graphs):
        p.error("nothing to time: give --ckpt CKPT, --forced, --ar and / or --graphs")
    device = resolve_device(args.device)
    print(
        f"torch {torch.__version__}, {device.type}"
        + (
            f" ({torch.cuda.get_device_name(device)})"
            if device.type == "cuda"
            else f", {torch.get_num_threads()} threads"
        )
        + f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    result = {}
    if args.ckpt:
        result.update(real_decode(args, device))
    if args.forced:
        result.update(forced(args, device))
    if args.ar:
        nar_vs_ar(args, device)
    if args.graphs:
        result.update(graphs_rows(args, device))
    if args.json and result:
        import json

        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                    torch=torch.__version__,
                    date=time.strftime("%Y-%m-%d"),
                    **result,
                ),
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
