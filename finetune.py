"""Fine-tuning a pretrained checkpoint: summarization (seq2seq) or classification.

    python finetune.py                                        # summarize with checkpoints/pretrain/last.pt
    python finetune.py --init checkpoints/t5/last.pt --out checkpoints/ft-t5
    python finetune.py --task classify --out checkpoints/ft-classify
    torchrun --nproc_per_node=4 finetune.py --init CKPT ...   # the same code on 4 processes

Summarization of a unified (PMLM / MLM) checkpoint uses UniLMv2's pseudo-mask fine-tuning
(section 3.4): "[SOS] SRC [EOS] TGT [EOS]", one [P] per target token; of a T5 checkpoint, teacher
forcing; of an MLAE checkpoint (core/mlae/model.py), seq2seq style with scheduled masking. --nar
fine-tunes a t5, t5-nar or mlae checkpoint (or --init none --arch t5: CMLM) as a CMLM decoded by
Mask-Predict (core/mlae/mask_predict.py). Classification puts a fresh linear layer on the [SOS] vector (on
[EOS] of the encoder for MLAE, T5 and T5-NAR; core/classify.py). An encoder reads its source laid
out as its pretraining laid out its text ([SOS] first for PMLM, MLM and MLAE; core/finetuning.py).

The recipe, one for every paper (after UniLMv2 appendix D and MLAE Table 11, at another rate): a peak
learning rate chosen on validation from a grid up to pretraining's (results/cpu-finetune-lr), warmup
then MLAE's inverse square root decay, label smoothing 0.1 (ELMER: none), and early stopping: the
validation loss every half epoch, best.pt at its lowest, the run ends after --patience validations
without a new lowest (or at --epochs, a maximum). docs/design.md says why each.
Reads top to bottom: args -> init -> data -> model -> optimizer -> loop -> save.
"""

import dataclasses
import functools
import math
import os
import sys
import time

import torch

from core import checkpoint
from core.classify import classify_batch, classify_loss_sums
from core.config import ModelConfig, preset
from core.data import pretraining_texts, token_counts
from core.distributed import barrier, compute_cleanup, compute_init, print0
from core.errors import UserError, main_guard
from core.guards import StopSignals, best_on_disk, check_continues, check_positions, parse_args, refuse_unused
from core.architectures import ARCHS, arch_flags, arch_of, seq2seq_arch, seq2seq_ops
from core.finetune_flags import finetuning_flags, scratch_flags, seq2seq_flags, unused_flags
from core.finetuning import Tuned, elmer_options, scheduled_loss
from core import flags
from core.flags import always_applies
from core.generation import summarize
from core.metrics import rouge
from core.positions import DEFAULT_MAX_SRC, fit_lengths, positions_of
from core.elmer.exit_measures import exit_flags
from core.mlae.model import init_from_pretrained
from core.model import count_parameters
from core.objectives import OBJECTIVES
from core.optim import lr_at, make_optimizer, set_lr
from core.progress import Progress, fmt_duration
from core.tasks import Labels, examples_for_step, load_split
from core.tokenizer import Tokenizer
from core.training import (
    EarlyStop,
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
    read_point,
    restore_rng,
    rng_state,
    run_digests,
    start_or_resume,
    wrap_ddp,
)

RESUMABLE = (
    "epochs",
    "stop_after",
    "out",
    "resume",
    "log_every",
    "save_every",
    "device",
    "dtype",
    "patience",
    "attention",
    "compile",
)
FINETUNE_LR = 1e-3  # the lowest validation loss of a grid up to pretraining's rate (docs/design.md)


def run_flags(p):
    add_run_flags(p, out="checkpoints/finetune", lr=FINETUNE_LR, save_every=200)


# who declares each flag of the script: its own sets (core/finetune_flags.py), the architectures that
# have flags of their own (ELMER's exit, the CMLM's decoding; core/architectures.py) and the set it
# shares with train.py
DECLARED_BY = dict(
    {"fine-tuning": finetuning_flags, "--init none": scratch_flags, "seq2seq": seq2seq_flags},
    **{f"architecture {n}": arch_flags(n) for n, a in ARCHS.items() if a.add_flags},
    **{"core/training.py": run_flags},
)
# the flags every run uses: those the sets every run reads declare with no Applies (every other flag's
# declaration says where it applies: core/flags.py; tests/test_trust.py walks the parser against both)
ALWAYS_APPLIES = ("help",) + always_applies(finetuning_flags) + always_applies(run_flags)


def parser():
    return flags.parser(DECLARED_BY, __doc__)


def get_args(argv=None):
    return parse_args(parser(), argv)


@main_guard
def main(argv=None):
    args = get_args(argv)
    d = compute_init(args.device, args.dtype)
    try:
        with attention_choice(args, d):
            return run(args, d)
    finally:
        compute_cleanup()


def scratch(args):
    """What a pretrained checkpoint would provide, for --init none, but the tokenizer (tokenizer_of,
    trained once every flag is checked): the preset's config at the depths of the objective's model it
    stands in for (T5 and CMLM from scratch compare with MLAE at equal depth, ELMER's 6L-6L at base)."""
    cfg = OBJECTIVES[ARCHS[args.arch].scratch_as].shape(preset(args.model, vocab_size=args.vocab_size), args)
    return dict(kind="scratch", arch=args.arch, model_config=cfg.to_dict())


def tokenizer_of(args, d, train, source, tuned):
    """(tokenizer, the model it sizes) of the run: the source's, or for --init none one trained now, once
    every flag is checked: the one train.py makes of the embedded corpus (so the ablation differs from
    a pretrained model in the weights only), or, with --train-data, one of that file's texts, put in
    `source` with the token counts that start the output bias."""
    if "tokenizer" in source:
        return Tokenizer.from_tensor(source["tokenizer"]), tuned
    if args.train_data is None:
        texts = pretraining_texts()[0]
    else:
        texts = train.sources + (train.targets if args.task == "summarize" else [])
    tok = corpus_tokenizer(texts, args.vocab_size, d)
    source.update(
        tokenizer=tok.to_tensor(), counts=token_counts([i for ids in tok.encode(texts) for i in ids], tok.vocab_size)
    )
    return tok, tuned._replace(cfg=dataclasses.replace(tuned.cfg, vocab_size=tok.vocab_size, pad_id=tok.pad_id))


def splits(args, d, summ):
    """(training split, validation split shuffled so that its head samples all of it) of the task."""
    fields = (args.src_field, args.tgt_field) if summ else (args.text_field, args.label_field)
    say = lambda msg: print0(d, msg, file=sys.stderr)  # rank 0's, with its other notes on stderr
    train = load_split(args.task, "train", args.train_data, *fields, note=say)
    if args.train_share < 1:
        train = train.share(args.train_share)
    valid_path = args.valid_data if args.valid_data or not args.train_data else None
    if args.train_data and not args.valid_data:
        raise UserError("--train-data needs a --valid-data file too")
    return train, load_split(args.task, "valid", valid_path, *fields, note=say).shuffled()


def micro_batches(make, size, srcs, tgts, idx):
    """The examples idx of (srcs, tgts) as micro-batches of `size`, each made by make(sources, targets)."""
    return [
        make([srcs[i] for i in idx[j : j + size]], [tgts[i] for i in idx[j : j + size]])
        for j in range(0, len(idx), size)
    ]


def steps_of(args, n):
    """--epochs, warmup and the masking's span in steps of --batch over n training examples: warmup and
    the masking's span in epochs of their own, so that --epochs, a maximum, changes neither."""
    steps_per_epoch = math.ceil(n / args.batch)
    return dict(
        steps=max(1, round(args.epochs * steps_per_epoch)),
        warmup=max(1, round(args.warmup_epochs * steps_per_epoch)),
        mask_steps=max(1, round(args.mask_epochs * steps_per_epoch)),
    )


def check_shares(batch, valid_examples, d):
    """--batch and the validation examples against the processes that share them."""
    if batch % d.world or batch < d.world:
        raise UserError(f"--batch {batch} cannot be shared evenly by {d.world} processes")
    if valid_examples < d.world:
        raise UserError(f"{valid_examples} validation example(s) cannot give each of {d.world} processes one")


def source_of(args, d, train, state):
    """(what the run starts from, the pretraining step it came from): this run's own last.pt when
    resuming, a pretrained checkpoint, or (--init none) what one would provide."""
    if state is not None:
        return state, state.get("init_step")  # the pretraining step this run started from, kept across resumes
    if args.init == "none":
        return scratch(args), None
    source = checkpoint.load(args.init, kinds=("pretrain/",))
    return source, source.get("step")  # which checkpoint of its pretraining (reproduce/runner.py reads it)


def architecture(args, source, state, summ, measure, threshold, n_train):
    """(the model the run fine-tunes, the run's resolved config): the source's architecture, turned
    into the one it fine-tunes as (core/architectures.py), its lengths fitted to the positions it
    trained. The flags this run would not use are refused as given, then against the defaults the
    architecture decides (the masking's against its schedule), which are resolved here so that the
    checkpoint records them (and eval.py builds the classifier from the record); last, the steps of
    --epochs over the n_train training examples."""
    pretrained_arch = arch_of(source, args.init)
    cfg = dataclasses.replace(ModelConfig.from_dict(source["model_config"]), dropout=args.dropout)
    if state is None:  # resuming, changed flags are refused against the run's own
        refuse_unused(args, unused_flags(parser(), args, pretrained_arch))
    arch, cfg = seq2seq_arch(pretrained_arch, cfg, args.nar, args.style) if summ else (pretrained_arch, cfg)
    args = args.resolved(
        label_smoothing=ARCHS[arch].label_smoothing if args.label_smoothing is None else args.label_smoothing,
        cls_vector=ARCHS[arch].classifier_reads if not summ and args.cls_vector is None else args.cls_vector,
        mask_schedule=ARCHS[arch].schedule if summ and args.mask_schedule is None else args.mask_schedule,
    )
    if state is None:  # again under the defaults resolved (the masking's schedule); the notes are said
        refuse_unused(args, {k: v for k, v in unused_flags(parser(), args, pretrained_arch).items() if not v[2]})
    if state is None and summ and args.nar:  # the model records it: a resume and eval.py build the same
        cfg = dataclasses.replace(cfg, cross_anchor=args.cross_anchor)
    max_src = args.max_src
    if state is None and "model" in source:  # stay within the positions pretraining trained
        max_src = fit_lengths(pretrained_arch, positions_of(source), max_src, args.max_tgt if summ else 0)
    max_src = max_src or DEFAULT_MAX_SRC
    elmer_opts = elmer_options(arch, source, args.exit, measure, threshold, args.dec_len, args.exit_train)
    if elmer_opts and not (isinstance(elmer_opts["dec_len"], int) and elmer_opts["dec_len"] >= 2):
        raise UserError(
            f"{args.init} records --dec-len {elmer_opts['dec_len']!r}, which no decoder can use: "
            f"give --dec-len (at least 2)"
        )
    if elmer_opts:  # the decoder is fed dec_len [MASK]s at positions 0..dec_len-1
        check_positions(
            f"the decoder's --dec-len {elmer_opts['dec_len']}",
            elmer_opts["dec_len"],
            cfg.max_positions,
            "give a smaller --dec-len",
        )
    if max_src > cfg.max_positions or (ARCHS[arch].one_table and max_src + args.max_tgt > cfg.max_positions):
        raise UserError(
            f"--max-src {max_src} + --max-tgt {args.max_tgt} exceed the model's {cfg.max_positions} positions"
        )
    return Tuned(arch, cfg, elmer_opts), args.resolved(max_src=max_src, **steps_of(args, n_train))


def labels_of(d, train, valid, state):
    """The classes of a classification: the resumed run's own, or those of the training split (a
    note on rank 0 names the validation labels it lacks)."""
    if state is not None:
        return Labels(state["labels"])
    return Labels.from_targets(train.targets, valid.targets, train.origin, lambda m: print0(d, m))


def task_data(config, tuned, tok, train, valid, labels):
    """(make(sources, targets) -> a micro-batch, the loss, the training ids, the validation ids) of the
    task: summarization by the fine-tuned architecture's operations, or classification into labels."""
    n_valid = config.valid_examples
    src_ids, valid_ids = tok.encode(train.sources), tok.encode(valid.sources[:n_valid])
    if config.task == "summarize":
        ops = seq2seq_ops(
            tuned.arch, sos=tuned.cfg.enc_sos, **({"dec_len": tuned.elmer["dec_len"]} if tuned.elmer else {})
        )
        loss_fn = functools.partial(ops.loss_sums, label_smoothing=config.label_smoothing)
        tgt_ids, valid_tgt = tok.encode(train.targets), tok.encode(valid.targets[:n_valid])
        make = lambda s, t: ops.batch(list(zip(s, t)), tok, config.max_src, config.max_tgt)
    else:
        tgt_ids, valid_tgt = labels.ids(train.targets), labels.ids(valid.targets[:n_valid])
        make = lambda s, t: classify_batch(s, t, tok, config.max_src, sos=ARCHS[tuned.arch].classify_sos)
        loss_fn = classify_loss_sums
    return make, loss_fn, (src_ids, tgt_ids), (valid_ids, valid_tgt)


def model_and_optimizer(config, d, tuned, labels, source, resumed_from=None):
    """(model, AdamW): the model built for its task (a classifier of `labels`, or the summarizer where
    there are none), its weights those of `source`: the run's own last.pt when `resumed_from` names it
    (the optimizer's state too), a pretrained checkpoint, or for --init none only the output bias, from
    the data's token counts."""
    torch.manual_seed(config.seed)
    with checkpoint.weights_of(resumed_from or config.init):
        model = tuned.build(None if labels is None else len(labels), config.cls_vector).to(d.device)
        if resumed_from:
            model.load_state_dict(source["model"])
        elif "model" not in source:  # --init none: only the output bias starts from the data
            (model.encoder if labels else model).head.init_bias(source["counts"])
        elif labels is None:
            init_from_pretrained(model, source["model"], config.cross_init)
        else:
            model.encoder.load_state_dict(source["model"])
        optimizer = make_optimizer(model, config.lr, config.weight_decay)
        if resumed_from:
            optimizer.load_state_dict(source["optimizer"])
    return model, optimizer


def resume_point(config, state, ckpt_path):
    """(the step to start from, early stopping's state): 0 and a fresh one, or the resumed run's, its
    random generators restored."""
    if state is None:
        return 0, EarlyStop(config.patience)
    restore_rng(state["rng"])
    start = state["step"]
    early = EarlyStop(
        config.patience, best_on_disk(config.out, state.get("best_valid_loss")), state.get("since_best", 0)
    )
    if state.get("stopped_early"):
        raise UserError(
            f"{ckpt_path} stopped early at step {start}: its validation loss had not improved for "
            f"{early.since_best} validations (best.pt holds the best); there is nothing to continue"
        )
    return start, early


def log_step(d, progress, done, stats):
    """The progress line of step `done` and its log.jsonl record."""
    loss, rate = stats["nll"] / stats["n"], stats["tokens_per_s"]
    print0(d, progress.line(done, loss, stats["lr"], rate, f"acc {stats['hit'] / stats['n']:.3f}"))
    if d.master:
        progress.log(dict(step=done, loss=loss, lr=stats["lr"], tokens_per_s=rate, grad_norm=stats["grad_norm"]))


def stopped_at_resume(d, save, step, early):
    """A run resumed with more --epochs whose last validation had already used up its patience: it
    stops where a run given those epochs from the start stopped, with no step more."""
    save(step, stopped_early=True)
    print0(
        d,
        f"early stop at step {step}: no lower validation loss in {early.since_best} validations before this "
        f"--resume; best.pt holds the lowest ({early.best:.4f})",
    )
    return early.best


def run(args, d):
    # -----------------------------------------------------------------------------
    # data, then the init: a pretrained checkpoint, this run's own last.pt when resuming, or none
    measure, threshold = exit_flags(args)  # checked before any work
    args, state, ckpt_path = start_or_resume(args, ("finetune/",), RESUMABLE, d)
    summ = args.task == "summarize"
    train, valid = splits(args, d, summ)
    source, init_step = source_of(args, d, train, state)
    tuned, args = architecture(args, source, state, summ, measure, threshold, len(train))
    tok, tuned = tokenizer_of(args, d, train, source, tuned)
    labels = None if summ else labels_of(d, train, valid, state)
    make, loss_sums, (src_ids, tgt_ids), (valid_ids, valid_tgt) = task_data(args, tuned, tok, train, valid, labels)
    check_shares(args.batch, min(len(valid), args.valid_examples), d)
    if summ:  # MLAE's scheduled masking, its ratio falling over the run's resolved mask_steps
        loss_sums = scheduled_loss(loss_sums, tuned.arch, args)
    steps_per_epoch = math.ceil(len(train) / args.batch)
    print0(d, args.line())  # the run's config, resolved: with its schedule, before any step
    print0(
        d,
        f"data: {train.origin}: {len(train)} train, {len(valid)} valid examples ({args.task}); "
        f"{steps_per_epoch} steps per epoch, {args.steps} steps",
    )

    batches = functools.partial(micro_batches, make, args.micro_batch)
    valid_batches = batches(valid_ids, valid_tgt, range(d.rank, len(valid_ids), d.world))  # all, on any world size
    per_rank = args.batch // d.world

    # -----------------------------------------------------------------------------
    # model and optimizer
    model, optimizer = model_and_optimizer(
        args, d, tuned, labels, source, resumed_from=ckpt_path if state is not None else None
    )
    start, early = resume_point(args, state, ckpt_path)
    if state is not None:
        check_continues(start, args.steps, args.stop_after, ckpt_path, "--epochs")
    ddp_model = wrap_ddp(model, d)
    digests = run_digests(args, state)
    print0(
        d,
        f"model: {tuned.arch}, {count_parameters(model) / 1e6:.2f}M parameters, from "
        f"{args.init if state is None else ckpt_path}; {d.world} process(es) on {d.device.type}, "
        f"{str(d.dtype)[6:]}",
    )

    def save(step, path=ckpt_path, with_optimizer=True, stopped_early=False):
        if not d.master:
            return
        recorded = vars(args)  # the resolved config, with the steps of its epochs (reproduce/runstate.py reads them)
        checkpoint.save(
            path,
            dict(
                kind=f"finetune/{args.task}",
                arch=tuned.arch,
                model=model.state_dict(),
                model_config=tuned.cfg.to_dict(),
                args=recorded,
                step=step,
                best_valid_loss=early.best,
                since_best=early.since_best,
                stopped_early=stopped_early,
                labels=labels.names if labels else None,
                init_step=init_step,
                digests=digests,
                optimizer=optimizer.state_dict() if with_optimizer else None,
                rng=rng_state(),
                tokenizer=tok.to_tensor(),
                elmer=tuned.elmer,
            ),
            config_json=dict(model=tuned.cfg.to_dict(), args=recorded),
        )

    if early.stop:  # resumed with more --epochs after patience ran out at the old maximum's last validation
        return stopped_at_resume(d, save, start, early)

    # -----------------------------------------------------------------------------
    # the loop: the flags it reads
    steps, warmup, peak_lr, lr_schedule = args.steps, args.warmup, args.lr, args.lr_schedule
    clip, seed, batch_size = args.clip, args.seed, args.batch
    log_every, save_every = args.log_every, args.save_every
    valid_every = max(1, round(args.valid_every * steps_per_epoch))  # validations' cadence, in steps
    rouge_examples = args.rouge_examples if summ and d.master else 0  # a quick greedy ROUGE on rank 0
    max_src, decoding = (
        args.max_src,
        dict(
            max_len=args.max_tgt,
            length_beam=args.length_beam,
            iterations=args.iterations,
            adaptive_stop=args.adaptive_stop,
        ),
    )
    best_path = os.path.join(args.out, "best.pt")
    end = min(steps, args.stop_after or steps)
    progress = Progress(steps, os.path.join(args.out, "log.jsonl") if d.master else None, start)
    model.train()
    step_model = compiled(ddp_model, args.compile, d)  # what the steps call; `model` is saved and evaluated
    window, speed = StepStats(), Throughput()

    def validate(done):
        """Validation loss and accuracy (all processes), then a quick greedy ROUGE (rank 0): the log record."""
        ev = evaluate(model, valid_batches, loss_sums, d)
        rec = dict(step=done, valid_loss=ev["nll"] / max(1.0, ev["n"]), valid_acc=ev["hit"] / max(1.0, ev["n"]))
        if rouge_examples > 0:
            with autocast(d.device, d.dtype):
                preds = summarize(model, tuned.arch, tok, valid.sources[:rouge_examples], max_src, **decoding)
            rec.update({f"valid_{m}": float(v) for m, v in rouge(preds, valid.targets[:rouge_examples]).items()})
            rec["sample"] = preds[0]
        return rec

    with StopSignals() as stop:  # SIGINT/SIGTERM: the step ends, last.pt is saved, the run exits
        for step in range(start, end):
            idx = examples_for_step(len(train), step, batch_size, seed)[d.rank * per_rank : (d.rank + 1) * per_rank]
            loss_sums.step = step  # the mask ratio of scheduled masking (a no-op attribute otherwise)
            micro = batches(src_ids, tgt_ids, idx)
            lr = lr_at(step, peak_lr, warmup, steps, lr_schedule)
            set_lr(optimizer, lr)
            torch.manual_seed(dropout_seed(seed, step, d))
            # forward and backward of each micro-batch, the gradients accumulated; every loss is divided by the
            # step's count of targets (loss_norm), so any split into micro-batches and processes gives one gradient.
            # One autocast region for the step (each weight cast once); the backward passes run with autocast off.
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

            # logging, validation (best.pt, early stopping), checkpoints: the statistics are read from the device
            # (one host sync) only there
            point = read_point(done, end, log_every, save_every, valid_every)
            if point:
                stats, skipped, first = window.read()
                check_finite(skipped, first, done, save, ckpt_path)  # saved, then stopped
                stats["tokens_per_s"] = speed.rate()
            if done % log_every == 0 or done == end:
                log_step(d, progress, done, stats)
            stopping = False
            if done % valid_every == 0 or done == steps:
                rec = validate(done)
                print0(d, "  valid | " + " | ".join(f"{k[6:]} {v:.4f}" for k, v in rec.items() if isinstance(v, float)))
                if "sample" in rec:
                    print0(d, f"  sample (first validation source) | {rec['sample']}")
                if d.master:
                    progress.log(rec)
                if early.update(rec["valid_loss"]):
                    save(done, best_path, with_optimizer=False)
                    print0(d, f"  lowest validation loss so far ({early.best:.4f}): {best_path}")
                stopping = early.stop and done < steps
                barrier(d)
            if stopping:
                save(done, stopped_early=True)
                print0(
                    d,
                    f"early stop at step {done}: no lower validation loss in {early.since_best} validations; "
                    f"best.pt holds the lowest ({early.best:.4f})",
                )
                end = done
                break
            if done == end or done % valid_every == 0 or done % save_every == 0:
                save(done)
            stop.check(d, done, save, ckpt_path, point)
    print0(
        d,
        f"done: step {end}/{steps} in {fmt_duration(time.time() - progress.t0)}; checkpoints {ckpt_path}, {best_path}",
    )
    return early.best


if __name__ == "__main__":
    main()
