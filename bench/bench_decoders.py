"""Mask-Predict and AR beam search at batch 1: today's eager decoding against static shapes and
CUDA graphs (core/mlae/mask_predict.py NARDecoder, core/static_beam.py), beside ELMER's one pass of the same size,
in one run.

    python -m bench.bench_decoders                                   # small, 6L-6L, on this device
    python -m bench.bench_decoders --model base --json out.json      # what bench/gpu_check.py --part decode runs

Random weights: the time of a decoding depends on its shapes, not on what the model learnt. So that
every variant does the same work, the length predictor is set to rank --dec-len, --dec-len - 1, ...
first: eager Mask-Predict then runs at --dec-len positions, as the static one always does, and a
source of --src tokens plus [EOS] is a multiple of the static path's source bucket (64) unless
--src says otherwise (the FLOP ratio printed beside each time ratio counts the padding). The three
Mask-Predict variants must return the same tokens, which the run checks.

Rows, each the median of --repeats interleaved pairs against eager Mask-Predict (the ratio is the
median of the per-pair ratios): static shapes (eager kernels), graphs (CUDA only: one replay per
decoding, every iteration and the re-masking between them), ELMER's one pass (exit disabled:
core/exit_measures.generate, graphs on CUDA) and AR
beam search (T5 and UniLMv2's PMLM decoder, beam --beam, --dec-len tokens, the EOS banned by min_len
so every beam runs every step) eager, at static shapes and (CUDA) as one graph replay per step; the static AR
searches must return the eager one's tokens, which the run checks. With both under graphs the
ELMER / AR latency ratio is printed. --json writes the rows and the early-exit issue's targets
(Mask-Predict and AR beam: graphs >= 2x eager at batch 1), met or not.
"""

import argparse
import json
import sys
import time

if __name__ == "__main__" and not __package__:  # run as a file, its imports would not resolve
    sys.exit("error: run it from the repository root as a module: python -m bench.bench_decoders (--help)")

import numpy as np
import torch

from bench.bench_early_exit import Tok, interleaved  # noqa: E402
from core import decoding  # noqa: E402
from core.config import preset  # noqa: E402
from core.distributed import resolve_device  # noqa: E402
from core.elmer.model import ELMER  # noqa: E402
from core.model import EncoderDecoder, UnifiedLM  # noqa: E402
from core.graphs import source_bucket  # noqa: E402
from core.mlae.mask_predict import NARDecoder, mask_predict  # noqa: E402
from core.mlae.nar import NARModel  # noqa: E402
from core.unilm.seq2seq import PMLMDecoder  # noqa: E402
from core.static_beam import static_beam_t5  # noqa: E402
from core.unilm.static_beam import static_beam_pmlm  # noqa: E402
from core.t5 import T5Decoder  # noqa: E402

MASK = 4


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small", choices=["tiny", "small", "base"], help="the width")
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--src", type=int, default=127, help="source tokens (plus [EOS])")
    p.add_argument("--dec-len", type=int, default=32, help="output positions")
    p.add_argument("--iterations", type=int, default=10, help="Mask-Predict iterations")
    p.add_argument("--length-beam", type=int, default=3, help="Mask-Predict length candidates")
    p.add_argument("--beam", type=int, default=4, help="AR beam size")
    p.add_argument("--repeats", type=int, default=10, help="interleaved pairs per row")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--json", default=None, help="write the rows and the target here")
    a = p.parse_args(argv)
    for name in ("layers", "vocab", "src", "dec_len", "iterations", "length_beam", "beam", "repeats"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.vocab <= 6 + MASK:
        p.error(f"--vocab {a.vocab}: the sources draw from ids 6 and up, so it must be > 10")
    from bench.common import check_flags

    check_flags(p, a)
    return a


def targets_of(rows, K):
    """The graphs' targets (eager / graphs, at least 2x, for Mask-Predict and each AR beam search);
    prints ELMER's one pass against each AR search where both ran under graphs."""
    by = {r["what"]: r for r in rows}
    graphed = next((r for r in rows if "CUDA graphs" in r["what"] and r["what"].startswith("Mask")), None)
    elmer_row = next(r for r in rows if r["what"].startswith("ELMER"))
    targets = [
        dict(
            target="Mask-Predict batch 1: eager / graphs (at least)",
            measured=None if graphed is None else 1 / graphed["ratio"],
            wanted=2.0,
            met="not measured (no GPU)" if graphed is None else bool(1 / graphed["ratio"] >= 2.0),
        )
    ]
    for arch in ("T5", "PMLM"):
        ar_graphed = by.get(f"AR beam {K} ({arch}), static shapes, CUDA graphs")
        ar_eager_row = by[f"AR beam {K} ({arch}), eager"]
        gain = None if ar_graphed is None else ar_eager_row["ratio"] / ar_graphed["ratio"]
        targets.append(
            dict(
                target=f"AR beam {K} ({arch}) batch 1: eager / graphs (at least)",
                measured=gain,
                wanted=2.0,
                met="not measured (no GPU)" if gain is None else bool(gain >= 2.0),
            )
        )
        if ar_graphed is not None:  # both decoders under graphs: the NAR / AR latency ratio (a report, not a target)
            print(
                f"ELMER one pass / AR beam {K} ({arch}), both under CUDA graphs: "
                f"{elmer_row['ratio'] / ar_graphed['ratio']:.3f}"
            )
    return targets


def main(argv=None):
    args = get_args(argv)
    device = resolve_device(args.device)
    cfg = preset(
        args.model,
        vocab_size=args.vocab,
        n_layers=args.layers,
        n_dec_layers=args.layers,
        dropout=0.0,
        max_positions=max(args.src + args.dec_len + 2, 64),
    )  # PMLM: source and target share positions
    torch.manual_seed(0)
    nar = NARModel(cfg).to(device).eval()
    with torch.no_grad():  # the length predictor ranks dec_len, dec_len - 1, ... first: eager runs at dec_len too
        nar.length.bias.fill_(-1e4)
        nar.length.bias[: args.dec_len + 1] = torch.arange(args.dec_len + 1, device=device).float() * 10
    elmer = ELMER(cfg, dec_len=args.dec_len).to(device).eval()
    ar = EncoderDecoder(cfg).to(device).eval()
    pmlm = UnifiedLM(cfg).to(device).eval()
    src = [list(np.random.default_rng(0).integers(6, args.vocab, args.src))]
    S = args.src + 1
    S_pad = source_bucket(S)

    def mp(**flags):
        return lambda: mask_predict(
            NARDecoder(nar, src, Tok, **flags), MASK, args.length_beam, args.iterations, max_len=args.dec_len
        )

    from core.elmer.exit_decode import generate

    eager = mp()
    variants = [("Mask-Predict, static shapes", mp(static=True), S_pad / S)]
    if device.type == "cuda":
        variants.append(("Mask-Predict, static shapes, CUDA graphs", mp(graphs=True), S_pad / S))
    # AR beam search, eager and at fixed shapes: T5 and UniLMv2's PMLM decoder ([P] queries, one stack)
    K, T = args.beam, args.dec_len
    eager_ar = {
        "T5": lambda: decoding.beam_search(T5Decoder(ar, src, Tok), K, T, T, 1.0, Tok.eos_id, 0),
        "PMLM": lambda: decoding.beam_search(PMLMDecoder(pmlm, src, Tok), K, T, T, 1.0, Tok.eos_id, 0),
    }
    static_ar = {
        "T5": lambda g: lambda: static_beam_t5(ar, src, Tok, K, T, T, 1.0, "pow", 0, graphs=g),
        "PMLM": lambda g: lambda: static_beam_pmlm(pmlm, src, Tok, K, T, T, 1.0, "pow", 0, graphs=g),
    }
    variants.append(
        (
            "ELMER one pass, exit disabled" + (", CUDA graphs" if device.type == "cuda" else ""),
            lambda: generate(elmer, src, Tok, delta=0.0),
            None,
        )
    )
    for arch in ("T5", "PMLM"):
        variants += [
            (f"AR beam {K} ({arch}), eager", eager_ar[arch], None),
            (f"AR beam {K} ({arch}), static shapes", static_ar[arch](False), None),
        ]
        if device.type == "cuda":
            variants.append((f"AR beam {K} ({arch}), static shapes, CUDA graphs", static_ar[arch](True), None))
    with torch.no_grad():
        same = {name: fn() == eager() for name, fn, _ in variants if name.startswith("Mask-Predict")}
        for arch in ("T5", "PMLM"):
            want = eager_ar[arch]()[0]
            same.update(
                {
                    name: fn()[0] == want
                    for name, fn, _ in variants
                    if name.startswith(f"AR beam {K} ({arch})") and "static" in name
                }
            )
    env = (
        f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}, torch {torch.__version__}, "
        f"{args.model} {args.layers}L-{args.layers}L, V {args.vocab}, source {S} tokens, {args.dec_len} positions, "
        f"{args.iterations} iterations x {args.length_beam} lengths, batch 1"
    )
    print(f"## Decoders at batch 1 ({env})\n")
    print(
        "| decoder | ms | eager Mask-Predict ms | time / eager Mask-Predict | work / eager Mask-Predict | tokens "
        "equal |"
    )
    print("|---|---|---|---|---|---|")
    rows = []
    with torch.no_grad():
        for name, fn, work in variants:
            ratio, t, t_base = interleaved(device, fn, eager, args.repeats)
            rows.append(
                dict(what=name, ms=1000 * t, base_ms=1000 * t_base, ratio=ratio, work=work, same=same.get(name))
            )
            shown_work = "-" if work is None else f"{work:.2f}"
            shown_same = "-" if name not in same else ("yes" if same[name] else "NO")
            print(
                f"| {name} | {1000 * t:.2f} | {1000 * t_base:.2f} | {ratio:.3f} | {shown_work} | {shown_same} |",
                flush=True,
            )
    if not all(same.values()):
        print("error: a static decoder returned other tokens than its eager one", file=sys.stderr)
    targets = targets_of(rows, K)
    for t in targets:
        shown = "-" if t["measured"] is None else f"{t['measured']:.2f}"
        print(
            f"target {t['target']}: {shown}, wanted >= {t['wanted']:g}: "
            f"{t['met'] if isinstance(t['met'], str) else ('met' if t['met'] else 'not met')}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    device=env.split(",")[0],
                    torch=torch.__version__,
                    date=time.strftime("%Y-%m-%d"),
                    setting=env,
                    rows=rows,
                    targets=targets,
                ),
                f,
                indent=1,
            )
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
