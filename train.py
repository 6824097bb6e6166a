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
from core.flags import AT_LEAST_0, AT_LEAST_1, VOCAB_SIZE, Rule, declared, flag, parser
from core.guards import StopSignals, check_continues, check_positions, parse_args, refuse_unused
from core.model import count_parameters
from core.objectives import OBJECTIVES, flag_table, objective_flags
from core.optim import lr_at, make_optimizer, set_lr
from core.progress import Progress, fmt_duration
from core.tokenizer import Tokenizer
from core.training import (
    StepStats,
    StepSums,
    Throughput,
    accumulating,
    add_run_flags,
    attention_choice,
    autocast,
    check_finite,
    compiled,
    corpus_tokenizer,
    dropout_seed,
    evaluate,
    loss_norm,
    per_token,
    read_point,
    restore_rng,
    rng_state,
    run_digests,
    start_or_resume,
    wrap_ddp,
)

# flags that may differ when resuming: everything else comes from the checkpoint
RESUMABLE = (
    "steps",
    "stop_after",
    "out",
    "resume",
    "log_every",
    "eval_every",
    "save_every",
    "device",
    "dtype",
    "attention",
    "compile",
)


def pretraining_flags(p):
    """The flags every pretraining run reads (but --vocab-size, which a given --tokenizer fixes);
    each objective declares its own beside its record (core/objectives.py)."""
    flag(
        p,
        "--objective",
        default="pmlm",
        choices=list(OBJECTIVES),
        help="; ".join(f"{n}: {o.paper}" for n, o in OBJECTIVES.items()),
    )
    flag(p, "--model", default="small", choices=["tiny", "small", "base"])
    flag(p, "--rel-pos", action=argparse.BooleanOptionalAction, default=True, help="T5-style relative position bias")
    flag(p, "--data", default=None, help=".txt or .jsonl pretraining text (default: embedded corpus)")
    flag(p, "--valid-data", default=None, help="held-out text (default: 2%% of --data by hash)")
    flag(p, "--text-field", default="text", help="field of a .jsonl --data")
    flag(p, "--vocab-size", rule=VOCAB_SIZE, type=int, default=8000)
    flag(p, "--tokenizer", default=None, help="an existing SentencePiece .model with the reserved ids")
    flag(
        p,
        "--seq-len",
        rule=Rule(lambda v: v >= 8, "at least 8"),
        type=int,
        default=128,
        help="tokens per example before the appended part",
    )
    flag(p, "--batch-tokens", rule=AT_LEAST_1, type=int, default=8192, help="global batch, in --seq-len tokens")
    flag(
        p,
        "--steps",
        rule=AT_LEAST_1,
        type=int,
        default=400,
        help="optimizer steps of --batch-tokens (the default run leaves the unigram plateau: docs/design.md)",
    )
    flag(p, "--warmup", rule=AT_LEAST_0, type=int, default=40)
    flag(p, "--eval-every", rule=AT_LEAST_1, type=int, default=50)
    flag(p, "--eval-examples", rule=AT_LEAST_1, type=int, default=256)


def run_flags(p):
    add_run_flags(p, out="checkpoints/pretrain", lr=1e-3, save_every=100)


# who declares each flag of the script: its own set, the set it shares with finetune.py, and each
# objective's record (tests/test_flags.py: every flag by exactly one of them)
DECLARED_BY = dict(
    {"train.py": pretraining_flags, "core/training.py": run_flags},
    **{f"objective {n}": objective_flags(n) for n, o in OBJECTIVES.items() if o.add_flags},
)
# the flags every run uses; every other flag is named by the objectives it applies to
# (core/objectives.py `flags`; tests/test_trust.py walks the parser against both)
ALWAYS_APPLIES = ("help",) + tuple(f for f in declared(pretraining_flags) + declared(run_flags) if f != "vocab_size")


def get_args(argv=None):
    """The run's flags, checked and frozen: those that apply to the objective, and the ones it sets itself."""
    args = parse_args(parser(DECLARED_BY, __doc__), argv)
    if not args.resume:  # resuming, the checkpoint's objective decides (and changed flags are refused)
        refuse_unused(
            args,
            dict(
                flag_table(args),
                vocab_size=(args.tokenizer is None, "without --tokenizer (whose vocabulary is fixed)", True),
            ),
        )
    return args.resolved(**OBJECTIVES[args.objective].fixes)  # mlm is pmlm --losses ae


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
    print0(
        d,
        f"data: {len(train_texts)} train documents ({len(train) / 1e6:.2f}M tokens), "
        f"{len(valid_texts)} valid ({len(valid) / 1e6:.2f}M tokens); unigram entropy of valid "
        f"{entropy:.3f} nats, the loss of a model that ignores context",
    )
    return tok, train, valid, entropy


def model_config(args, obj, state, vocab_size, pad_id=0):
    """The model's config: the preset at the objective's depths, or the checkpoint's when resuming."""
    cfg = obj.shape(
        preset(args.model, vocab_size=vocab_size, rel_pos=args.rel_pos, dropout=args.dropout, pad_id=pad_id), args
    )
    return cfg if state is None else dataclasses.replace(cfg, **state["model_config"])


def check_room(args, obj, cfg):
    """--seq-len and --dec-len against the model's positions (which no vocabulary changes): checked
    before the tokenizer and the data, so that a bad flag is the first line, not one after work."""
    if args.seq_len > cfg.max_positions:
        raise UserError(f"--seq-len {args.seq_len} exceeds the {args.model} model's {cfg.max_positions} positions")
    # stored in the checkpoint: fine-tuning and generation feed the decoder this many [MASK]s
    opts = obj.options(args)
    if opts is not None:
        check_positions(f"--dec-len {opts['dec_len']}", opts["dec_len"], cfg.max_positions, "lower --dec-len")


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
            print0(
                d,
                f"note: {ckpt_path} was written by an older version of the {args.objective} corruption; "
                f"from step {start} on its examples differ from those its own version would draw",
            )
        check_continues(start, args.steps, args.stop_after, ckpt_path, "--steps")
    return cfg, model, optimizer, start


def run(args, d):
    # -----------------------------------------------------------------------------
    # resume: the checkpoint's flags win, except the ones a user may change
    args, state, ckpt_path = start_or_resume(args, ("pretrain/",), RESUMABLE, d)
    obj = OBJECTIVES[args.objective]
    examples_per_step = args.batch_tokens // args.seq_len
    if examples_per_step < d.world or examples_per_step % d.world:
        raise UserError(
            f"--batch-tokens {args.batch_tokens} / --seq-len {args.seq_len} = {examples_per_step} "
            f"examples per step, which {d.world} processes cannot share evenly"
        )
    per_rank = examples_per_step // d.world
    check_room(args, obj, model_config(args, obj, state, args.vocab_size))
    print0(d, args.line())  # the resolved config: what the run reads and its checkpoints save

    # -----------------------------------------------------------------------------
    # tokenizer and data, model and optimizer
    tok, train, valid, entropy = tokenizer_and_data(args, d, obj, state)
    cfg, model, optimizer, start = model_and_optimizer(args, d, obj, tok, train, state, ckpt_path)
    loss_sums = obj.loss(args)
    ddp_model = wrap_ddp(model, d)
    digests = run_digests(args, state)
    elmer_opts = obj.options(args)
    print0(
        d,
        f"model: {args.model}, {count_parameters(model) / 1e6:.2f}M parameters, objective "
        f"{args.objective}{f' ({args.losses})' if 'keep' in obj.flags else ''}, {d.world} process(es) on "
        f"{d.device.type} ({str(d.dtype)[6:]}), {examples_per_step} examples x {args.seq_len} tokens per step",
    )

    def batches_of(stream, first, count):
        """This process's micro-batches for examples [first, first + count) of the stream."""
        idx = list(range(first, first + count))
        return [
            obj.batch(stream, idx[i : i + args.micro_batch], tok, args, model)
            for i in range(0, len(idx), args.micro_batch)
        ]

    eval_share = max(1, args.eval_examples // d.world)
    eval_batches = batches_of(valid, d.rank * eval_share, eval_share)

    def save(step):
        if not d.master:
            return
        checkpoint.save(
            ckpt_path,
            dict(
                kind=f"pretrain/{args.objective}",
                model=model.state_dict(),
                model_config=cfg.to_dict(),
                args=vars(args),
                step=step,
                data=dict(next_example=step * examples_per_step, corruption=obj.corruption),
                digests=digests,
                positions=obj.positions(args.seq_len),
                optimizer=optimizer.state_dict(),
                rng=rng_state(),
                tokenizer=tok.to_tensor(),
                elmer=elmer_opts,
            ),
            config_json=dict(model=cfg.to_dict(), args=vars(args)),
        )

    # -----------------------------------------------------------------------------
    # the loop: the flags it reads
    steps, warmup, peak_lr, clip, seed = args.steps, args.warmup, args.lr, args.clip, args.seed
    log_every, eval_every, save_every = args.log_every, args.eval_every, args.save_every
    end = min(steps, args.stop_after or steps)
    progress = Progress(steps, os.path.join(args.out, "log.jsonl") if d.master else None, start)
    model.train()
    step_model = compiled(ddp_model, args.compile, d)  # what the steps call; `model` is saved and evaluated
    window, speed = StepStats(), Throughput()
    last_eval, last = None, {}
    with StopSignals() as stop:  # SIGINT/SIGTERM: the step ends, last.pt is saved, the run exits
        for step in range(start, end):
            micro = batches_of(train, step * examples_per_step + d.rank * per_rank, per_rank)
            lr = lr_at(step, peak_lr, warmup, steps, "linear")
            set_lr(optimizer, lr)
            torch.manual_seed(dropout_seed(seed, step, d))
            # forward and backward of each micro-batch, the gradients accumulated; every loss is divided by the
            # step's count of targets (loss_norm), so any split into micro-batches and processes gives one gradient.
            # One autocast region for the step: autocast keeps its bf16 copy of each weight until its outermost
            # region ends, so the weights are cast once a step; the backward passes run with autocast off.
            norm, sums = loss_norm(micro, d), StepSums()
            with autocast(d.device, d.dtype):
                for j, batch in enumerate(micro):
                    with accumulating(step_model, d, last=j == len(micro) - 1):
                        out = loss_sums(step_model, batch.to(d.device))
                        with torch.autocast(d.device.type, enabled=False):
                            # DDP averages gradients over processes: multiplying by world makes that a sum
                            (out["loss"] * (d.world / norm)).backward()
                    sums.add(out, batch.n_tokens)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            stats = sums.total(norm, grad_norm, lr, d)
            optimizer.found_inf = stats["skipped"]  # a non-finite loss or gradient: the fused AdamW skips the step
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            window.add(stats, step)
            speed.add(stats["tokens"])
            done = step + 1

            # logging, evaluation, checkpoints: the statistics are read from the device (one host sync) only there
            point = read_point(done, end, log_every, save_every, eval_every)
            if point:
                stats, skipped, first = window.read()
                check_finite(skipped, first, done, save, ckpt_path)  # saved, then stopped
                stats["tokens_per_s"] = speed.rate()
                last = stats
            if done % log_every == 0 or done == end:
                loss, rate = stats["loss"] / stats["norm"], stats["tokens_per_s"]
                parts = per_token(stats)
                # the batch's own losses (what the step trained on), named so; the held-out ones are the eval lines
                print0(
                    d,
                    progress.line(
                        done,
                        loss,
                        stats["lr"],
                        rate,
                        "this batch: " + " ".join(f"{k} {v:.3f}" for k, v in parts.items() if k != "loss"),
                    ),
                )
                if d.master:
                    progress.log(
                        {
                            **parts,
                            **dict(
                                step=done, loss=loss, lr=stats["lr"], tokens_per_s=rate, grad_norm=stats["grad_norm"]
                            ),
                        }
                    )
            if done % eval_every == 0 or done == end:
                ev = evaluate(model, eval_batches, loss_sums, d)
                rec = dict(step=done, unigram_entropy=entropy, **{f"valid_{k}": v for k, v in per_token(ev).items()})
                last_eval = rec
                print0(
                    d,
                    f"  held-out, step {done} | "
                    + " | ".join(f"{k[6:]} {v:.4f}" for k, v in rec.items() if k.startswith("valid_"))
                    + " | "
                    + under_entropy(rec),
                )
                if d.master:
                    progress.log(rec)
            if done % save_every == 0 or done == end:
                save(done)
            stop.check(d, done, save, ckpt_path, point)
    print0(
        d,
        f"done: step {end}/{steps} in {fmt_duration(time.time() - progress.t0)}; checkpoint {ckpt_path}"
        + (f"; held-out {under_entropy(last_eval)}" if last_eval else ""),
    )
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
