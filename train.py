"""Pretraining.

    python train.py                                   # a small PMLM on the embedded corpus
    torchrun --nproc_per_node=4 train.py --model base # the same code on 4 GPUs (or CPU processes)

Objectives: pmlm (UniLMv2: --losses ae+par | ae | par, the ablations of its section 4.6, every
one masking BERT's way, 80/10/10, as its section 4.1 does; --keep 0 gives 90/10), mlm (the
RoBERTa-style baseline: pmlm --losses ae), t5 (the T5-style encoder-decoder with span
corruption), t5-nar (the same corruption, a bidirectional decoder fed one [MASK] per target token and a length
predictor: the MLAE paper's T5-NAR, core/nar.py), mlae (core/mlae.py: encoder on the unmasked
tokens, light decoder --decoder b|a, default b) and elmer (ELMER's LPLM: --permutations exit-layer
assignments per sequence, core/elmer.py). t5, t5-nar and mlae have the same depths
(--enc-layers/--dec-layers, default 2L-1L / 4L-2L / 12L-4L at tiny / small / base, core/config.py
DEPTHS). Reads top to bottom: args -> init -> tokenizer and data -> model -> optimizer -> loop ->
save.
"""
import argparse
import dataclasses
import functools
import os
import time

import torch

from core import checkpoint
from core.config import depths, preset
from core.data import TokenStream, held_out_key, pretraining_texts, token_counts, unigram_entropy
from core.distributed import compute_cleanup, compute_init, print0
from core.errors import UserError, main_guard
from core.guards import StopSignals, check_continues, check_positions, parse_args, refuse_unused
from core.finetuning import pretraining_window, trained_positions
from core.model import EncoderDecoder, UnifiedLM, count_parameters
from core.optim import make_optimizer
from core.mlae import MLAE, VARIANTS, mlae_batch, mlae_loss_sums
from core.nar import NARModel, t5_nar_batch, t5_nar_loss_sums
from core.pmlm import KEEP, LOSSES, pmlm_batch, pmlm_loss_sums
from core.t5 import t5_batch, t5_loss_sums
from core.elmer import ELMER, elmer_depth, lplm_batch, lplm_loss_sums
from core.progress import Progress, fmt_duration
from core.tokenizer import Tokenizer
from core.training import (StepStats, Throughput, add_run_flags, attention_choice, run_digests, check_finite, corpus_tokenizer, evaluate, per_token, restore_rng,
                           rng_state, start_or_resume, train_step, wrap_ddp)

# flags that may differ when resuming: everything else comes from the checkpoint
# the version of each objective's corruption, which turns a window into an example; 2: a
# document's [EOS] is never corrupted by T5's spans, MLAE's masks or LPLM's infilling (1: it could
# be); t5-nar 3: the decoder input keeps the target's sentinels, which are not predicted (2: every
# target token [MASK] and predicted)
CORRUPTION = {"t5": 2, "t5-nar": 3, "mlae": 2, "elmer": 2}
RESUMABLE = ("steps", "stop_after", "out", "resume", "log_every", "eval_every", "save_every", "device", "dtype",
             "attention")
ENC_DEC = ("t5", "t5-nar", "mlae", "elmer")  # the objectives with an encoder and a decoder: depth flags apply


# the flags every run uses; every other flag must enter get_args' refuse_unused table, which says
# which objectives it applies to (tests/test_trust.py walks the parser against both)
ALWAYS_APPLIES = ("help", "objective", "model", "rel_pos", "data", "valid_data", "text_field", "tokenizer", "seq_len",
                  "batch_tokens", "steps", "warmup", "eval_every", "eval_examples", "micro_batch", "lr", "weight_decay",
                  "clip", "dropout", "log_every", "save_every", "stop_after", "out", "resume", "overwrite", "seed",
                  "device", "dtype", "attention")


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objective", default="pmlm", choices=["pmlm", "mlm", "t5", "t5-nar", "mlae", "elmer"])
    p.add_argument("--losses", default="ae+par", choices=LOSSES, help="PMLM ablations (UniLMv2 4.6)")
    p.add_argument("--keep", type=float, default=KEEP,
                   help="pmlm, mlm: share of the masked tokens left as they are (UniLMv2 4.1: 80%% [MASK] / 10%% "
                        "random / 10%% kept); 0 gives 90/10, which hides every target from the [P]s (equation 5)")
    p.add_argument("--model", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--dec-layers", type=int, default=None,
                   help="t5, t5-nar, mlae: decoder layers (default 1/2/4 at tiny/small/base, MLAE's); elmer: default as the encoder")
    p.add_argument("--enc-layers", type=int, default=None,
                   help="t5, t5-nar, mlae: encoder layers (default 2/4/12 at tiny/small/base); elmer: the preset's")
    p.add_argument("--decoder", default="b", choices=VARIANTS,
                   help="mlae: (b) [MASK]s with cross-attention to the latents (the paper's choice for NAR, "
                        "Table 6), (a) self-attention over latents + [MASK]s")
    p.add_argument("--cross-rel-pos", action=argparse.BooleanOptionalAction, default=True,
                   help="mlae (b): relative position bias in the cross-attention ([MASK] vs latent position ids); "
                        "t5-nar: the same, each target token's anchor being its span's sentinel's source position")
    p.add_argument("--length-grad", action=argparse.BooleanOptionalAction, default=False,
                   help="t5-nar: let the length predictor's loss reach the encoder (off: span corruption's target "
                        "length depends on the window's length alone, and that gradient collapsed the encoder)")
    p.add_argument("--permutations", type=int, default=10, help="elmer: exit-layer assignments per sequence (LPLM's k)")
    p.add_argument("--dec-len", type=int, default=32, help="elmer: [MASK] tokens the decoder is fed when fine-tuned and generating")
    p.add_argument("--separate-offramps", action="store_true", help="elmer: one off-ramp per decoder layer, not shared")
    p.add_argument("--rel-pos", action=argparse.BooleanOptionalAction, default=True,
                   help="T5-style relative position bias")
    p.add_argument("--data", default=None, help=".txt or .jsonl pretraining text (default: embedded corpus)")
    p.add_argument("--valid-data", default=None, help="held-out text (default: 2%% of --data by hash)")
    p.add_argument("--text-field", default="text", help="field of a .jsonl --data")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--tokenizer", default=None, help="an existing SentencePiece .model with the reserved ids")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per example before the appended part")
    p.add_argument("--batch-tokens", type=int, default=8192, help="global batch, in --seq-len tokens")
    p.add_argument("--steps", type=int, default=400, help="optimizer steps of --batch-tokens (the default run leaves the unigram plateau: README)")
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-examples", type=int, default=256)
    add_run_flags(p, out="checkpoints/pretrain", lr=1e-3, save_every=100)
    args = parse_args(p, argv)
    if not args.resume:  # resuming, the checkpoint's objective decides (and changed flags are refused)
        o = args.objective
        enc_dec_only = "to --objective " + ", ".join(ENC_DEC[:-1]) + " or " + ENC_DEC[-1]
        refuse_unused(args, dict(
            losses=(o == "pmlm", "to --objective pmlm (mlm is pmlm --losses ae)"),
            keep=(o in ("pmlm", "mlm"), "to --objective pmlm or mlm"),
            enc_layers=(o in ENC_DEC, enc_dec_only),
            dec_layers=(o in ENC_DEC, enc_dec_only),
            decoder=(o == "mlae", "to --objective mlae"),
            permutations=(o == "elmer", "to --objective elmer"),
            dec_len=(o == "elmer", "to --objective elmer"),
            separate_offramps=(o == "elmer", "to --objective elmer"),
            cross_rel_pos=(o == "mlae" and args.decoder == "b" or o == "t5-nar",
                           "to --objective mlae --decoder b or t5-nar (the objectives with a cross-attention bias)"),
            length_grad=(o == "t5-nar", "to --objective t5-nar (the objective with a length predictor)"),
            vocab_size=(args.tokenizer is None, "without --tokenizer (whose vocabulary is fixed)", True)))
    if args.objective == "mlm":
        args.losses = "ae"
    if not 0.0 <= args.keep <= 0.9:
        raise UserError(f"--keep {args.keep} is not a share of the masked tokens in [0, 0.9] (10% always go random)")
    return args


@main_guard
def main(argv=None):
    args = get_args(argv)
    d = compute_init(args.device, args.dtype)
    try:
        with attention_choice(args, d):
            return run(args, d)
    finally:
        compute_cleanup()


def run(args, d):
    # -----------------------------------------------------------------------------
    # resume: the checkpoint's flags win, except the ones a user may change
    args, state, ckpt_path = start_or_resume(args, ("pretrain/",), RESUMABLE, d)
    if state is not None and args.objective in ("mlae", "t5-nar"):
        args.cross_rel_pos = "cross_rel_table" in state["model"]  # as trained: older runs had no table
    if state is not None and "keep" not in state["args"]:
        args.keep = 0.1 if args.objective == "mlm" else 0.0  # written before the flag: as it trained
    if state is not None and "length_grad" not in state["args"]:
        args.length_grad = True  # written before the flag: the length loss reached the encoder
    if args.seq_len < 8:
        raise UserError(f"--seq-len {args.seq_len} is too short (at least 8)")
    examples_per_step = args.batch_tokens // args.seq_len
    if examples_per_step < d.world or examples_per_step % d.world:
        raise UserError(f"--batch-tokens {args.batch_tokens} / --seq-len {args.seq_len} = {examples_per_step} "
                        f"examples per step, which {d.world} processes cannot share evenly")
    per_rank = examples_per_step // d.world

    # -----------------------------------------------------------------------------
    # tokenizer and data
    train_texts, valid_texts = pretraining_texts(args.data, args.valid_data, args.text_field)
    if state is not None:
        tok = Tokenizer.from_tensor(state["tokenizer"])
    elif args.tokenizer:
        if not os.path.exists(args.tokenizer):
            raise UserError(f"tokenizer file not found: {args.tokenizer}")
        tok = Tokenizer.load(args.tokenizer)
    else:
        tok = corpus_tokenizer(train_texts, args.vocab_size, d)
    window = pretraining_window(args.objective, args.seq_len)
    train = TokenStream(tok.encode(train_texts), window, args.seed, sep=tok.eos_id)  # documents end with [EOS]
    valid = TokenStream(tok.encode(valid_texts), window, args.seed + 1, sep=tok.eos_id)
    entropy = unigram_entropy(valid.ids, tok.vocab_size)
    print0(d, f"data: {len(train_texts)} train documents ({len(train) / 1e6:.2f}M tokens), "
              f"{len(valid_texts)} valid ({len(valid) / 1e6:.2f}M tokens); unigram entropy of valid "
              f"{entropy:.3f} nats, the loss of a model that ignores context")

    # -----------------------------------------------------------------------------
    # model and optimizer
    t5, mlae, elmer = args.objective == "t5", args.objective == "mlae", args.objective == "elmer"
    t5nar = args.objective == "t5-nar"
    cfg = preset(args.model, vocab_size=tok.vocab_size, rel_pos=args.rel_pos, dropout=args.dropout,
                 pad_id=tok.pad_id)
    if elmer:  # the paper's 6L-6L at base
        enc = args.enc_layers or elmer_depth(args.model, cfg.n_layers)
        cfg = dataclasses.replace(cfg, n_layers=enc, n_dec_layers=args.dec_layers or enc)
    elif t5 or t5nar or mlae:  # MLAE's depths for every encoder-decoder it is compared with
        enc, dec = depths(args.model, args.enc_layers, args.dec_layers)
        cfg = dataclasses.replace(cfg, n_layers=enc, n_dec_layers=dec)
    if state is not None:
        cfg = dataclasses.replace(cfg, **state["model_config"])
    if args.seq_len > cfg.max_positions:
        raise UserError(f"--seq-len {args.seq_len} exceeds the {args.model} model's {cfg.max_positions} positions")
    if elmer:  # stored in the checkpoint: fine-tuning and generation feed the decoder this many [MASK]s
        check_positions(f"--dec-len {args.dec_len}", args.dec_len, cfg.max_positions, "lower --dec-len")
    torch.manual_seed(args.seed)
    elmer_opts = dict(dec_len=args.dec_len, separate_offramps=args.separate_offramps) if elmer else None
    model = (MLAE(cfg, args.decoder, args.cross_rel_pos) if mlae else ELMER(cfg, **elmer_opts) if elmer else
             NARModel(cfg, args.cross_rel_pos) if t5nar else
             EncoderDecoder(cfg) if t5 else UnifiedLM(cfg)).to(d.device)
    loss_sums = (mlae_loss_sums if mlae else lplm_loss_sums if elmer else
                 functools.partial(t5_nar_loss_sums, length_grad=args.length_grad) if t5nar else
                 t5_loss_sums if t5 else pmlm_loss_sums)
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    model.head.init_bias(token_counts(train.ids, cfg.vocab_size))
    start = 0
    if state is not None:
        with checkpoint.weights_of(ckpt_path):
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        restore_rng(state["rng"])
        start = state["step"]
        if args.objective in CORRUPTION and state.get("data", {}).get("corruption", 1) != CORRUPTION[args.objective]:
            print0(d, f"note: {ckpt_path} was written by an older version of the {args.objective} corruption; "
                      f"from step {start} on its examples differ from those its own version would draw")
        check_continues(start, args.steps, args.stop_after, ckpt_path, "--steps")
    ddp_model = wrap_ddp(model, d)
    digests = run_digests(args, state)
    print0(d, f"model: {args.model}, {count_parameters(model) / 1e6:.2f}M parameters, objective "
              f"{args.objective}{'' if t5 or t5nar or mlae or elmer else f' ({args.losses})'}, {d.world} process(es) on {d.device.type} ({str(d.dtype)[6:]}), "
              f"{examples_per_step} examples x {args.seq_len} tokens per step")

    def batches_of(stream, first, count):
        """This process's micro-batches for examples [first, first + count) of the stream."""
        idx = list(range(first, first + count))
        make = (lambda ix: t5_batch(stream, ix, tok)) if t5 else (lambda ix: pmlm_batch(stream, ix, tok, args.losses, keep=args.keep))
        make = (lambda ix: mlae_batch(stream, ix, tok)) if mlae else make
        make = (lambda ix: t5_nar_batch(stream, ix, tok)) if t5nar else make
        if elmer:
            make = lambda ix: lplm_batch(stream, ix, tok, len(model.dec_layers), args.permutations)
        return [make(idx[i:i + args.micro_batch]) for i in range(0, len(idx), args.micro_batch)]

    eval_share = max(1, args.eval_examples // d.world)
    eval_batches = batches_of(valid, d.rank * eval_share, eval_share)

    def save(step):
        if not d.master:
            return
        checkpoint.save(ckpt_path, dict(
            kind=f"pretrain/{args.objective}", model=model.state_dict(), model_config=cfg.to_dict(),
            args=vars(args), step=step, data=dict(next_example=step * examples_per_step, corruption=CORRUPTION.get(args.objective, 1)),
            digests=digests,
            positions=trained_positions(args.objective, args.seq_len),
            optimizer=optimizer.state_dict(), rng=rng_state(), tokenizer=tok.to_tensor(), elmer=elmer_opts),
            config_json=dict(model=cfg.to_dict(), args=vars(args)))

    # -----------------------------------------------------------------------------
    # the loop
    progress = Progress(args.steps, os.path.join(args.out, "log.jsonl") if d.master else None, start)
    speed = Throughput()
    model.train()
    stats, window = {}, StepStats()
    end = min(args.steps, args.stop_after or args.steps)
    stop = StopSignals()
    last_eval = None
    for step in range(start, end):
        micro = batches_of(train, step * examples_per_step + d.rank * per_rank, per_rank)
        step_stats = train_step(ddp_model, model, optimizer, micro, loss_sums, d, args, step)
        window.add(step_stats, step)
        speed.add(step_stats["tokens"])
        done = step + 1
        # the statistics are read (one host sync) only where they are logged, saved or evaluated
        point = done % args.log_every == 0 or done == end or done % args.save_every == 0 or done % args.eval_every == 0
        if point:
            stats, skipped, first = window.read()
            check_finite(skipped, first, done, save, ckpt_path)
        if done % args.log_every == 0 or done == end:
            loss = stats["loss"] / stats["norm"]
            rate = speed.rate()
            parts = per_token(stats)
            # the batch's own losses (what the step trained on), named so; the held-out ones are the eval lines
            print0(d, progress.line(done, loss, stats["lr"], rate, "this batch: " + " ".join(
                f"{k} {v:.3f}" for k, v in parts.items() if k != "loss")))
            if d.master:
                progress.log({**parts, **dict(step=done, loss=loss, lr=stats["lr"], tokens_per_s=rate,
                                              grad_norm=stats["grad_norm"])})
        if done % args.eval_every == 0 or done == end:
            ev = evaluate(model, eval_batches, loss_sums, d)
            rec = dict(step=done, unigram_entropy=entropy, **{f"valid_{k}": v for k, v in per_token(ev).items()})
            last_eval = rec
            print0(d, f"  held-out, step {done} | " + " | ".join(f"{k[6:]} {v:.4f}" for k, v in rec.items()
                                                                if k.startswith("valid_")) + " | " + under_entropy(rec))
            if d.master:
                progress.log(rec)
        if done % args.save_every == 0 or done == end:
            save(done)
        stop.check(d, done, save, ckpt_path, point)
    print0(d, f"done: step {end}/{args.steps} in {fmt_duration(time.time() - progress.t0)}; checkpoint {ckpt_path}"
              + (f"; held-out {under_entropy(last_eval)}" if last_eval else ""))
    return stats


def under_entropy(rec):
    """'<loss> X, D nats under the unigram entropy E' of a held-out record (negative D: above it)."""
    key = held_out_key(rec)
    if key is None:
        return ""
    gap = rec["unigram_entropy"] - rec[key]
    return f"{key[6:]} {rec[key]:.4f}, {gap:.2f} nats under the unigram entropy {rec['unigram_entropy']:.3f}"


if __name__ == "__main__":
    main()
