"""Pretraining.

    python train.py                                   # a small PMLM on the embedded corpus
    torchrun --nproc_per_node=4 train.py --model base # the same code on 4 GPUs (or CPU processes)

Objectives (core/objectives.py, one record each, which this script dispatches through): pmlm
(UniLMv2: --losses ae+par | ae | par, the ablations of its section 4.6, every one masking BERT's
way, 80/10/10, as its section 4.1 does; --keep 0 gives 90/10), mlm (the RoBERTa-style baseline:
pmlm --losses ae), t5 (the T5-style encoder-decoder with span corruption), t5-nar (the same
corruption, a bidirectional decoder fed one [MASK] per target token and a length predictor: the
MLAE paper's T5-NAR, core/mlae/nar.py), mlae (core/mlae/model.py: encoder on the unmasked tokens, light
decoder --decoder b|a, default b) and elmer (ELMER's LPLM: --permutations exit-layer assignments
per sequence, core/elmer/model.py). t5, t5-nar and mlae have the same depths (--enc-layers/--dec-layers,
default 2L-1L / 4L-2L / 12L-4L at tiny / small / base, core/config.py DEPTHS). Reads top to bottom:
args -> init -> tokenizer and data -> model -> optimizer -> loop -> save.
"""
import argparse
import dataclasses
import os
import time

import torch

from core import checkpoint
from core.config import preset
from core.data import TokenStream, held_out_key, pretraining_texts, token_counts, unigram_entropy
from core.distributed import compute_cleanup, compute_init, print0
from core.errors import UserError, main_guard
from core.guards import HelpFormatter, check_continues, check_positions, parse_args, refuse_unused
from core.mlae.model import VARIANTS
from core.model import count_parameters
from core.objectives import OBJECTIVES
from core.optim import make_optimizer
from core.unilm.pmlm import KEEP, LOSSES
from core.progress import Progress, fmt_duration
from core.tokenizer import Tokenizer
from core.training import (add_run_flags, attention_choice, corpus_tokenizer, evaluate, per_token, restore_rng,
                           rng_state, run_digests, start_or_resume, training_steps, wrap_ddp)

# flags that may differ when resuming: everything else comes from the checkpoint
RESUMABLE = ("steps", "stop_after", "out", "resume", "log_every", "eval_every", "save_every", "device", "dtype",
             "attention", "compile")


# the flags every run uses; every other flag is named by the objectives it applies to
# (core/objectives.py `flags`; tests/test_trust.py walks the parser against both)
ALWAYS_APPLIES = ("help", "objective", "model", "rel_pos", "data", "valid_data", "text_field", "tokenizer", "seq_len",
                  "batch_tokens", "steps", "warmup", "eval_every", "eval_examples", "micro_batch", "lr", "weight_decay",
                  "clip", "dropout", "log_every", "save_every", "stop_after", "out", "resume", "overwrite", "seed",
                  "device", "dtype", "attention", "compile")


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--objective", default="pmlm", choices=list(OBJECTIVES),
                   help="; ".join(f"{n}: {o.paper}" for n, o in OBJECTIVES.items()))
    p.add_argument("--losses", default="ae+par", choices=LOSSES, help="PMLM ablations (UniLMv2 4.6)")
    p.add_argument("--keep", type=float, default=KEEP,
                   help="pmlm, mlm: share of the masked tokens left as they are (UniLMv2 4.1: 80%% [MASK] / 10%% "
                        "random / 10%% kept); 0 gives 90/10, which hides every target from the [P]s (equation 5)")
    p.add_argument("--model", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--dec-layers", type=int, default=None,
                   help="t5, t5-nar, mlae: decoder layers (default 1/2/4 at tiny/small/base, MLAE's); elmer: default "
                        "as the encoder")
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
    p.add_argument("--dec-len", type=int, default=32,
                   help="elmer: [MASK] tokens the decoder is fed when fine-tuned and generating")
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
    p.add_argument("--steps", type=int, default=400,
                   help="optimizer steps of --batch-tokens (the default run leaves the unigram plateau: "
                        "docs/design.md)")
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-examples", type=int, default=256)
    add_run_flags(p, out="checkpoints/pretrain", lr=1e-3, save_every=100)
    args = parse_args(p, argv)
    if not args.resume:  # resuming, the checkpoint's objective decides (and changed flags are refused)
        refuse_unused(args, dict(objective_flags(args),
                                 vocab_size=(args.tokenizer is None, "without --tokenizer (whose vocabulary is fixed)",
                                             True)))
    if args.objective == "mlm":  # mlm is pmlm --losses ae
        args.losses = "ae"
    if not 0.0 <= args.keep <= 0.9:
        raise UserError(f"--keep {args.keep} is not a share of the masked tokens in [0, 0.9] (10% always go random)")
    return args


# what an objective's flag needs, said where a run of another objective is given it
NEEDS = dict(losses=" (mlm is pmlm --losses ae)", cross_rel_pos=" (the objectives with a cross-attention bias)",
             length_grad=" (the objective with a length predictor)")


def objective_flags(args):
    """refuse_unused's table: each flag an objective record names, whether it applies to this run."""
    table = {}
    for flag in sorted({f for o in OBJECTIVES.values() for f in o.flags}):
        owners = sorted(n for n, o in OBJECTIVES.items() if flag in o.flags)
        applies = flag in OBJECTIVES[args.objective].flags
        if flag == "cross_rel_pos":  # MLAE's decoder (a) has no cross-attention
            applies = applies and not (args.objective == "mlae" and args.decoder == "a")
            owners = ["mlae --decoder b" if n == "mlae" else n for n in owners]
        table[flag] = (applies, "to --objective " + " or ".join(owners) + NEEDS.get(flag, ""))
    return table


@main_guard
def main(argv=None):
    args = get_args(argv)
    d = compute_init(args.device, args.dtype)
    try:
        with attention_choice(args, d):
            return run(args, d)
    finally:
        compute_cleanup()


def tokenizer_and_data(args, d, obj, state):
    """(tokenizer, training stream, held-out stream, the held-out text's unigram entropy): the
    checkpoint's tokenizer when resuming, a given one, or one trained on the corpus."""
    train_texts, valid_texts = pretraining_texts(args.data, args.valid_data, args.text_field)
    if state is not None:
        tok = Tokenizer.from_tensor(state["tokenizer"])
    elif args.tokenizer:
        if not os.path.exists(args.tokenizer):
            raise UserError(f"tokenizer file not found: {args.tokenizer}")
        tok = Tokenizer.load(args.tokenizer)
    else:
        tok = corpus_tokenizer(train_texts, args.vocab_size, d)
    window = obj.window(args.seq_len)
    train = TokenStream(tok.encode(train_texts), window, args.seed, sep=tok.eos_id)  # documents end with [EOS]
    valid = TokenStream(tok.encode(valid_texts), window, args.seed + 1, sep=tok.eos_id)
    entropy = unigram_entropy(valid.ids, tok.vocab_size)
    print0(d, f"data: {len(train_texts)} train documents ({len(train) / 1e6:.2f}M tokens), "
              f"{len(valid_texts)} valid ({len(valid) / 1e6:.2f}M tokens); unigram entropy of valid "
              f"{entropy:.3f} nats, the loss of a model that ignores context")
    return tok, train, valid, entropy


def model_config(args, obj, state, vocab_size, pad_id=0):
    """The model's config: the preset at the objective's depths, or the checkpoint's when resuming."""
    cfg = obj.shape(preset(args.model, vocab_size=vocab_size, rel_pos=args.rel_pos, dropout=args.dropout,
                           pad_id=pad_id), args)
    return cfg if state is None else dataclasses.replace(cfg, **state["model_config"])


def check_room(args, obj, cfg):
    """--seq-len and --dec-len against the model's positions (which no vocabulary changes): checked
    before the tokenizer and the data, so that a bad flag is the first line, not one after work."""
    if args.seq_len > cfg.max_positions:
        raise UserError(f"--seq-len {args.seq_len} exceeds the {args.model} model's {cfg.max_positions} positions")
    # stored in the checkpoint: fine-tuning and generation feed the decoder this many [MASK]s
    if "dec_len" in obj.flags:
        check_positions(f"--dec-len {args.dec_len}", args.dec_len, cfg.max_positions, "lower --dec-len")


def model_and_optimizer(args, d, obj, tok, train, state, ckpt_path):
    """(config, model, AdamW, the step to start from): fresh, the output bias at the training text's
    unigram frequencies, or the checkpoint's when resuming."""
    cfg = model_config(args, obj, state, tok.vocab_size, tok.pad_id)
    torch.manual_seed(args.seed)
    model = obj.model(cfg, args).to(d.device)
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    model.head.init_bias(token_counts(train.ids, cfg.vocab_size))
    start = 0
    if state is not None:
        with checkpoint.weights_of(ckpt_path):
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        restore_rng(state["rng"])
        start = state["step"]
        if state.get("data", {}).get("corruption", 1) != obj.corruption:
            print0(d, f"note: {ckpt_path} was written by an older version of the {args.objective} corruption; "
                      f"from step {start} on its examples differ from those its own version would draw")
        check_continues(start, args.steps, args.stop_after, ckpt_path, "--steps")
    return cfg, model, optimizer, start


def run(args, d):
    # -----------------------------------------------------------------------------
    # resume: the checkpoint's flags win, except the ones a user may change
    args, state, ckpt_path = start_or_resume(args, ("pretrain/",), RESUMABLE, d)
    obj = OBJECTIVES[args.objective]
    if args.seq_len < 8:
        raise UserError(f"--seq-len {args.seq_len} is too short (at least 8)")
    examples_per_step = args.batch_tokens // args.seq_len
    if examples_per_step < d.world or examples_per_step % d.world:
        raise UserError(f"--batch-tokens {args.batch_tokens} / --seq-len {args.seq_len} = {examples_per_step} "
                        f"examples per step, which {d.world} processes cannot share evenly")
    per_rank = examples_per_step // d.world
    check_room(args, obj, model_config(args, obj, state, args.vocab_size))

    # -----------------------------------------------------------------------------
    # tokenizer and data, model and optimizer
    tok, train, valid, entropy = tokenizer_and_data(args, d, obj, state)
    cfg, model, optimizer, start = model_and_optimizer(args, d, obj, tok, train, state, ckpt_path)
    loss_sums = obj.loss(args)
    ddp_model = wrap_ddp(model, d)
    digests = run_digests(args, state)
    elmer_opts = dict(dec_len=args.dec_len,
                      separate_offramps=args.separate_offramps) if "dec_len" in obj.flags else None
    print0(d, f"model: {args.model}, {count_parameters(model) / 1e6:.2f}M parameters, objective "
              f"{args.objective}{f' ({args.losses})' if 'keep' in obj.flags else ''}, {d.world} process(es) on "
              f"{d.device.type} ({str(d.dtype)[6:]}), {examples_per_step} examples x {args.seq_len} tokens per step")

    def batches_of(stream, first, count):
        """This process's micro-batches for examples [first, first + count) of the stream."""
        idx = list(range(first, first + count))
        return [obj.batch(stream, idx[i:i + args.micro_batch], tok, args, model)
                for i in range(0, len(idx), args.micro_batch)]

    eval_share = max(1, args.eval_examples // d.world)
    eval_batches = batches_of(valid, d.rank * eval_share, eval_share)

    def save(step):
        if not d.master:
            return
        checkpoint.save(ckpt_path, dict(
            kind=f"pretrain/{args.objective}", model=model.state_dict(), model_config=cfg.to_dict(),
            args=vars(args), step=step, data=dict(next_example=step * examples_per_step, corruption=obj.corruption),
            digests=digests,
            positions=obj.positions(args.seq_len),
            optimizer=optimizer.state_dict(), rng=rng_state(), tokenizer=tok.to_tensor(), elmer=elmer_opts),
            config_json=dict(model=cfg.to_dict(), args=vars(args)))

    # -----------------------------------------------------------------------------
    # the loop
    progress = Progress(args.steps, os.path.join(args.out, "log.jsonl") if d.master else None, start)
    end = min(args.steps, args.stop_after or args.steps)
    last_eval, last = None, {}
    # the statistics are read (one host sync) only where they are logged, saved or evaluated
    read_at = lambda done: any(done % k == 0 for k in (args.log_every, args.save_every, args.eval_every))  # noqa: E731
    batches_for = lambda step: batches_of(train, step * examples_per_step + d.rank * per_rank, per_rank)  # noqa: E731
    for done, stats in training_steps(ddp_model, model, optimizer, loss_sums, d, args, start, end, batches_for, read_at,
                                      save, ckpt_path):
        last = stats or last
        if done % args.log_every == 0 or done == end:
            loss, rate = stats["loss"] / stats["norm"], stats["tokens_per_s"]
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
    print0(d, f"done: step {end}/{args.steps} in {fmt_duration(time.time() - progress.t0)}; checkpoint {ckpt_path}"
              + (f"; held-out {under_entropy(last_eval)}" if last_eval else ""))
    return last


def under_entropy(rec):
    """'<loss> X, D nats under (or above) the unigram entropy E' of a held-out record."""
    key = held_out_key(rec)
    if key is None:
        return ""
    gap = rec["unigram_entropy"] - rec[key]
    side = "under" if gap >= 0 else "above"
    return f"{key[6:]} {rec[key]:.4f}, {abs(gap):.2f} nats {side} the unigram entropy {rec['unigram_entropy']:.3f}"


if __name__ == "__main__":
    main()
