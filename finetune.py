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
import argparse
import dataclasses
import functools
import math
import os
import sys
import time

import torch

from core import checkpoint
from core.classify import classify_batch, classify_loss_sums
from core.config import PRESETS, ModelConfig, preset
from core.data import pretraining_texts, token_counts
from core.distributed import barrier, compute_cleanup, compute_init, print0
from core.errors import UserError, main_guard
from core.guards import HelpFormatter, best_on_disk, check_continues, check_positions, parse_args, refuse_unused
from core.architectures import ARCHS, arch_of, build_model, seq2seq_arch, seq2seq_ops
from core.finetune_flags import add_elmer_flags, add_nar_flags, check_nar_flags, unused_flags
from core.finetuning import elmer_options, scheduled_loss
from core.generation import rouge, summarize
from core.positions import DEFAULT_MAX_SRC, fit_lengths, positions_of
from core.elmer.exit_measures import exit_flags
from core.mlae.model import CROSS_INITS, SCHEDULES, init_from_pretrained
from core.model import count_parameters
from core.objectives import OBJECTIVES
from core.optim import LR_SCHEDULES, make_optimizer
from core.progress import Progress, fmt_duration
from core.tasks import TASKS, Labels, examples_for_step, load_split
from core.tokenizer import Tokenizer
from core.training import (EarlyStop, add_run_flags, attention_choice, autocast, corpus_tokenizer, evaluate,
                           restore_rng, rng_state, run_digests, start_or_resume, training_steps, wrap_ddp)

RESUMABLE = ("epochs", "stop_after", "out", "resume", "log_every", "save_every", "device", "dtype", "patience",
             "attention", "compile")
FINETUNE_LR = 1e-3  # the lowest validation loss of a grid up to pretraining's rate (docs/design.md)


def get_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--init", default="checkpoints/pretrain/last.pt",
                   help="pretrained checkpoint (train.py), or 'none': random weights, the no-pretraining ablation")
    p.add_argument("--arch", default="unilm", choices=["unilm", "t5", "elmer"],
                   help="with --init none: the architecture")
    add_elmer_flags(p)
    p.add_argument("--model", default="small", choices=sorted(PRESETS), help="with --init none: the preset")
    p.add_argument("--enc-layers", type=int, default=None,
                   help="with --init none --arch t5: encoder layers (default MLAE's: 2/4/12 at tiny/small/base)")
    p.add_argument("--dec-layers", type=int, default=None,
                   help="with --init none --arch t5: decoder layers (default MLAE's: 1/2/4 at tiny/small/base)")
    p.add_argument("--vocab-size", type=int, default=8000, help="with --init none: tokenizer of the embedded corpus")
    p.add_argument("--task", default="summarize", choices=TASKS)
    p.add_argument("--train-data", default=None, help="a .jsonl training file (default: the embedded corpus)")
    p.add_argument("--valid-data", default=None, help="a .jsonl validation file (default: the embedded corpus)")
    p.add_argument("--train-share", type=float, default=1.0,
                   help="fine-tune on a fixed share of the training examples, spread evenly over the file "
                        "(0.5: every other one); validation stays whole")
    p.add_argument("--src-field", default=None, help="source field of --train-data (summarize; default document)")
    p.add_argument("--tgt-field", default=None, help="target field (summarize; default summary)")
    p.add_argument("--text-field", default=None, help="text field (classify; default document)")
    p.add_argument("--label-field", default=None, help="label field (classify; default section)")
    p.add_argument("--cls-vector", default=None, choices=("first", "last"),
                   help="classify: the token whose vector the linear layer reads, the first ([SOS], or T5's first "
                        "text token) or the last ([EOS]); default the papers': first for a pmlm or mlm stack, "
                        "last for the encoder of an encoder-decoder (the MLAE paper, section 3.2)")
    p.add_argument("--max-src", type=int, default=None,
                   help="source tokens kept, [SOS]/[EOS] included (default: 80, the measured recipe, or less "
                        "to fit the positions the checkpoint was pretrained on; more than those is refused)")
    p.add_argument("--max-tgt", type=int, default=24, help="target tokens kept, [EOS] included")
    p.add_argument("--epochs", type=float, default=3,
                   help="the most passes over the training split (fractions allowed); the run stops earlier on "
                        "validation (--patience)")
    p.add_argument("--batch", type=int, default=64, help="global batch, in examples")
    p.add_argument("--lr-schedule", default="inverse-sqrt", choices=LR_SCHEDULES,
                   help="after warmup: MLAE's inverse square root decay (its Table 11), or UniLMv2's linear "
                        "decay to 0 at the last of --epochs")
    p.add_argument("--warmup-epochs", type=float, default=0.15,
                   help="warmup, in epochs: the same steps whatever --epochs allows (more epochs, the same schedule)")
    p.add_argument("--valid-every", type=float, default=0.5, help="validate every this many epochs")
    p.add_argument("--patience", type=int, default=2,
                   help="stop after this many validations in a row without a lower validation loss (0: never; "
                        "run all --epochs)")
    p.add_argument("--label-smoothing", type=float, default=None,
                   help="default 0.1, elmer 0 (the paper's plain cross-entropy). Smoothing e puts a floor under "
                        "an off-ramp's entropy: -(1-e+e/V)ln(1-e+e/V) - (V-1)(e/V)ln(e/V), 1.22 nats at e=0.1, "
                        "V=8000: above the paper's delta 0.5, so no token would ever exit by entropy")
    p.add_argument("--valid-examples", type=int, default=2000,
                   help="validation loss / accuracy on this many (the loss early stopping reads: enough tokens that "
                        "its noise is under the changes it tracks)")
    p.add_argument("--rouge-examples", type=int, default=200, help="quick ROUGE (greedy) on this many")
    p.add_argument("--style", default=None, choices=["seq2seq", "unilm"],
                   help="AR style: mlae seq2seq (default) or unilm; pmlm/mlm unilm (default) or seq2seq (a random "
                        "decoder: the RoBERTa baseline)")
    p.add_argument("--cross-init", default="self", choices=CROSS_INITS,
                   help="mlae/t5: cross-attention from the layer's self-attention, random, or the whole decoder random")
    p.add_argument("--mask-schedule", default=None, choices=SCHEDULES,
                   help="AR: decoder inputs masked at ratio m_t (MLAE Algorithm 1; default linear for mlae, else none)")
    p.add_argument("--mask-init", type=float, default=0.6, help="m0 of --mask-schedule")
    p.add_argument("--mask-epochs", type=float, default=3,
                   help="linear --mask-schedule: m_t falls from m0 to 0 over this many epochs, whatever --epochs")
    add_nar_flags(p)
    add_run_flags(p, out="checkpoints/finetune", lr=FINETUNE_LR, save_every=200)
    return parse_args(p, argv)


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


def tokenizer_of(args, d, train, source, cfg):
    """(tokenizer, config) of the run: the source's, or for --init none one trained now, once every flag
    is checked: the one train.py makes of the embedded corpus (so the ablation differs from a
    pretrained model in the weights only), or, with --train-data, one of that file's texts, put in
    `source` with the token counts that start the output bias."""
    if "tokenizer" in source:
        return Tokenizer.from_tensor(source["tokenizer"]), cfg
    if args.train_data is None:
        texts = pretraining_texts()[0]
    else:
        texts = train.sources + (train.targets if args.task == "summarize" else [])
    tok = corpus_tokenizer(texts, args.vocab_size, d)
    source.update(tokenizer=tok.to_tensor(), counts=token_counts([i for ids in tok.encode(texts) for i in ids],
                                                                 tok.vocab_size))
    return tok, dataclasses.replace(cfg, vocab_size=tok.vocab_size, pad_id=tok.pad_id)


def splits(args, d, summ):
    """(training split, validation split shuffled so that its head samples all of it) of the task."""
    fields = (args.src_field, args.tgt_field) if summ else (args.text_field, args.label_field)
    say = lambda msg: print0(d, msg, file=sys.stderr)  # rank 0's, with its other notes on stderr
    train = load_split(args.task, "train", args.train_data, *fields, note=say)
    if not 0 < args.train_share <= 1:
        raise UserError(f"--train-share {args.train_share} must be in (0, 1]")
    if args.train_share < 1:
        train = train.share(args.train_share)
    valid_path = args.valid_data if args.valid_data or not args.train_data else None
    if args.train_data and not args.valid_data:
        raise UserError("--train-data needs a --valid-data file too")
    check_nar_flags(args)
    return train, load_split(args.task, "valid", valid_path, *fields, note=say).shuffled()


def validation(args, d, model, arch, tok, valid, valid_batches, loss_fn, summ, done):
    """Validation loss and accuracy (all processes), then a quick greedy ROUGE (rank 0): the log record."""
    ev = evaluate(model, valid_batches, loss_fn, d)
    rec = dict(step=done, valid_loss=ev["nll"] / max(1.0, ev["n"]), valid_acc=ev["hit"] / max(1.0, ev["n"]))
    if summ and d.master and args.rouge_examples > 0:
        k = args.rouge_examples
        with autocast(d.device, d.dtype):
            preds = summarize(model, arch, tok, valid.sources[:k], args.max_src, max_len=args.max_tgt,
                              length_beam=args.length_beam, iterations=args.iterations,
                              adaptive_stop=args.adaptive_stop)
        rec.update({f"valid_{m}": float(v) for m, v in rouge(preds, valid.targets[:k]).items()})
        rec["sample"] = preds[0]
    return rec


def micro_batches(make, size, srcs, tgts, idx):
    """The examples idx of (srcs, tgts) as micro-batches of `size`, each made by make(sources, targets)."""
    return [make([srcs[i] for i in idx[j:j + size]], [tgts[i] for i in idx[j:j + size]])
            for j in range(0, len(idx), size)]


def schedule(args, d, train, valid, arch, loss_fn, state, summ):
    """(training examples, examples per process a step, steps between validations, the loss with
    MLAE's scheduled masking where it applies): --epochs in steps; warmup and the masking's span in
    epochs of their own, so that --epochs, a maximum, changes neither."""
    n = len(train)
    if args.batch % d.world or args.batch < d.world:
        raise UserError(f"--batch {args.batch} cannot be shared evenly by {d.world} processes")
    if min(len(valid), args.valid_examples) < d.world:
        raise UserError(f"{min(len(valid), args.valid_examples)} validation example(s) cannot give each of {d.world} "
                        f"processes one")
    steps_per_epoch = math.ceil(n / args.batch)
    args.steps = max(1, round(args.epochs * steps_per_epoch))
    args.warmup = max(1, round(args.warmup_epochs * steps_per_epoch))
    args.mask_steps = max(1, round(args.mask_epochs * steps_per_epoch))
    if summ:
        loss_fn = scheduled_loss(loss_fn, arch, args)
        if state is None and args.mask_schedule == "none":
            refuse_unused(args, dict(mask_init=(False, "with a --mask-schedule other than none")))
        if state is None and args.mask_schedule != "linear":
            refuse_unused(args, dict(mask_epochs=(False, "with --mask-schedule linear")))
    print0(d, f"data: {train.origin}: {n} train, {len(valid)} valid examples ({args.task}); "
              f"{steps_per_epoch} steps per epoch, {args.steps} steps")
    return n, args.batch // d.world, max(1, round(args.valid_every * steps_per_epoch)), loss_fn


def source_of(args, d, train, state):
    """(what the run starts from, the pretraining step it came from): this run's own last.pt when
    resuming, a pretrained checkpoint, or (--init none) what one would provide."""
    if state is not None:
        return state, state.get("init_step")  # the pretraining step this run started from, kept across resumes
    if args.init == "none":
        return scratch(args), None
    source = checkpoint.load(args.init, kinds=("pretrain/",))
    return source, source.get("step")  # which checkpoint of its pretraining (reproduce/runner.py reads it)


def architecture(args, source, state, summ, measure, threshold):
    """(architecture, config, ELMER's options) of the run: the source's, turned into the one it
    fine-tunes as (core/architectures.py), its lengths fitted to the positions it trained."""
    arch = arch_of(source, args.init)
    cfg = dataclasses.replace(ModelConfig.from_dict(source["model_config"]), dropout=args.dropout)
    pretrained_arch = arch
    if state is None:  # resuming, changed flags are refused against the run's own
        refuse_unused(args, unused_flags(args, arch, summ))
    arch, cfg = seq2seq_arch(arch, cfg, args.nar, args.style) if summ else (arch, cfg)
    if state is None and summ and args.nar:  # the model records it: a resume and eval.py build the same
        cfg = dataclasses.replace(cfg, cross_anchor=args.cross_anchor)
    if state is None and "model" in source:  # stay within the positions pretraining trained
        args.max_src = fit_lengths(pretrained_arch, positions_of(source), args.max_src, args.max_tgt if summ else 0)
    args.max_src = args.max_src or DEFAULT_MAX_SRC
    elmer_opts = elmer_options(arch, source, args.exit, measure, threshold, args.dec_len, args.exit_train)
    if elmer_opts and not (isinstance(elmer_opts["dec_len"], int) and elmer_opts["dec_len"] >= 2):
        raise UserError(f"{args.init} records --dec-len {elmer_opts['dec_len']!r}, which no decoder can use: "
                        f"give --dec-len (at least 2)")
    if elmer_opts:  # the decoder is fed dec_len [MASK]s at positions 0..dec_len-1
        check_positions(f"the decoder's --dec-len {elmer_opts['dec_len']}", elmer_opts["dec_len"], cfg.max_positions,
                        "give a smaller --dec-len")
    if args.label_smoothing is None:  # resolved per architecture, so the checkpoint records it
        args.label_smoothing = ARCHS[arch].label_smoothing
    if not summ and args.cls_vector is None:  # likewise: eval.py builds the classifier from the record
        args.cls_vector = ARCHS[arch].classifier_reads
    if args.max_src > cfg.max_positions or (ARCHS[arch].one_table and args.max_src + args.max_tgt > cfg.max_positions):
        raise UserError(f"--max-src {args.max_src} + --max-tgt {args.max_tgt} exceed the model's {cfg.max_positions} "
                        "positions")
    return arch, cfg, elmer_opts


def task_data(args, d, arch, tok, cfg, elmer_opts, train, valid, state, summ):
    """(labels or None, make(sources, targets) -> a micro-batch, the loss, the training ids, the
    validation ids) of the task: summarization by the architecture's operations, or classification."""
    src_ids, valid_ids = tok.encode(train.sources), tok.encode(valid.sources[:args.valid_examples])
    if summ:
        ops = seq2seq_ops(arch, sos=cfg.enc_sos, **({"dec_len": elmer_opts["dec_len"]} if elmer_opts else {}))
        batch_fn = ops.batch
        loss_fn = functools.partial(ops.loss_sums, label_smoothing=args.label_smoothing)
        tgt_ids, valid_tgt = tok.encode(train.targets), tok.encode(valid.targets[:args.valid_examples])
        make = lambda s, t: batch_fn(list(zip(s, t)), tok, args.max_src, args.max_tgt)
        labels = None
    else:
        labels = Labels(state["labels"]) if state is not None else Labels.from_targets(train.targets, valid.targets,
                                                                                       train.origin,
                                                                                       lambda m: print0(d, m))
        tgt_ids, valid_tgt = labels.ids(train.targets), labels.ids(valid.targets[:args.valid_examples])
        make = lambda s, t: classify_batch(s, t, tok, args.max_src, sos=ARCHS[arch].classify_sos)
        loss_fn = classify_loss_sums
    return labels, make, loss_fn, (src_ids, tgt_ids), (valid_ids, valid_tgt)


def model_and_optimizer(args, d, arch, cfg, labels, elmer_opts, source, state, ckpt_path, summ):
    """(model, AdamW, the step to start from, early stopping's state): the model built for its task
    and loaded from the source (or only its output bias, from scratch), or the run's own checkpoint."""
    torch.manual_seed(args.seed)
    with checkpoint.weights_of(ckpt_path if state is not None else args.init):
        model = build_model(arch, cfg, None if summ else len(labels), elmer_opts, args.cls_vector).to(d.device)
        if state is not None:
            model.load_state_dict(state["model"])
        elif "model" not in source:  # --init none: only the output bias starts from the data
            (model.encoder if labels else model).head.init_bias(source["counts"])
        elif summ:
            init_from_pretrained(model, source["model"], args.cross_init)
        else:
            model.encoder.load_state_dict(source["model"])
        optimizer = make_optimizer(model, args.lr, args.weight_decay)
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
    start, early = 0, EarlyStop(args.patience)
    if state is not None:
        restore_rng(state["rng"])
        start = state["step"]
        early = EarlyStop(args.patience, best_on_disk(args.out, state.get("best_valid_loss")),
                          state.get("since_best", 0))
        if state.get("stopped_early"):
            raise UserError(f"{ckpt_path} stopped early at step {start}: its validation loss had not improved for "
                            f"{early.since_best} validations (best.pt holds the best); there is nothing to continue")
        check_continues(start, args.steps, args.stop_after, ckpt_path, "--epochs")
    return model, optimizer, start, early


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
    print0(d, f"early stop at step {step}: no lower validation loss in {early.since_best} validations before this "
              f"--resume; best.pt holds the lowest ({early.best:.4f})")
    return early.best


def run(args, d):
    # -----------------------------------------------------------------------------
    # data, then the init: a pretrained checkpoint, this run's own last.pt when resuming, or none
    measure, threshold = exit_flags(args)  # checked before any work
    args, state, ckpt_path = start_or_resume(args, ("finetune/",), RESUMABLE, d)
    summ = args.task == "summarize"
    train, valid = splits(args, d, summ)
    source, init_step = source_of(args, d, train, state)
    arch, cfg, elmer_opts = architecture(args, source, state, summ, measure, threshold)  # every flag checked
    tok, cfg = tokenizer_of(args, d, train, source, cfg)
    labels, make, loss_fn, (src_ids, tgt_ids), (valid_ids, valid_tgt) = task_data(args, d, arch, tok, cfg, elmer_opts,
                                                                                train, valid, state, summ)
    n, per_rank, valid_every, loss_fn = schedule(args, d, train, valid, arch, loss_fn, state, summ)

    batches = functools.partial(micro_batches, make, args.micro_batch)
    valid_batches = batches(valid_ids, valid_tgt, range(d.rank, len(valid_ids), d.world))  # all, on any world size

    # -----------------------------------------------------------------------------
    # model and optimizer
    model, optimizer, start, early = model_and_optimizer(args, d, arch, cfg, labels, elmer_opts, source, state,
                                                         ckpt_path, summ)
    ddp_model = wrap_ddp(model, d)
    digests = run_digests(args, state)
    print0(d, f"model: {arch}, {count_parameters(model) / 1e6:.2f}M parameters, from "
              f"{args.init if state is None else ckpt_path}; {d.world} process(es) on {d.device.type}, "
              f"{str(d.dtype)[6:]}")

    def save(step, path=ckpt_path, with_optimizer=True, stopped_early=False):
        if not d.master:
            return
        checkpoint.save(path, dict(
            kind=f"finetune/{args.task}", arch=arch, model=model.state_dict(), model_config=cfg.to_dict(),
            args=vars(args), step=step, best_valid_loss=early.best, since_best=early.since_best,
            stopped_early=stopped_early, labels=labels.names if labels else None, init_step=init_step, digests=digests,
            optimizer=optimizer.state_dict() if with_optimizer else None, rng=rng_state(),
            tokenizer=tok.to_tensor(), elmer=elmer_opts), config_json=dict(model=cfg.to_dict(), args=vars(args)))

    validate = functools.partial(validation, args, d, model, arch, tok, valid, valid_batches, loss_fn, summ)
    if early.stop:  # resumed with more --epochs after patience ran out at the old maximum's last validation
        return stopped_at_resume(d, save, start, early)

    # -----------------------------------------------------------------------------
    # the loop
    progress = Progress(args.steps, os.path.join(args.out, "log.jsonl") if d.master else None, start)
    end = min(args.steps, args.stop_after or args.steps)

    def batches_for(step):
        idx = examples_for_step(n, step, args.batch, args.seed)[d.rank * per_rank:(d.rank + 1) * per_rank]
        loss_fn.step = step  # the mask ratio of scheduled masking (a no-op attribute otherwise)
        return batches(src_ids, tgt_ids, idx)
    # the statistics are read (one host sync) only where they are logged, saved or validated
    read_at = lambda done: any(done % k == 0 for k in (args.log_every, args.save_every, valid_every))  # noqa: E731
    for done, stats in training_steps(ddp_model, model, optimizer, loss_fn, d, args, start, end, batches_for, read_at,
                                      save, ckpt_path):
        if done % args.log_every == 0 or done == end:
            log_step(d, progress, done, stats)
        stopping = False
        if done % valid_every == 0 or done == args.steps:
            rec = validate(done)
            print0(d, "  valid | " + " | ".join(f"{k[6:]} {v:.4f}" for k, v in rec.items() if isinstance(v, float)))
            if "sample" in rec:
                print0(d, f"  sample (first validation source) | {rec['sample']}")
            if d.master:
                progress.log(rec)
            if early.update(rec["valid_loss"]):
                save(done, os.path.join(args.out, "best.pt"), with_optimizer=False)
                print0(d, f"  lowest validation loss so far ({early.best:.4f}): {os.path.join(args.out, 'best.pt')}")
            stopping = early.stop and done < args.steps
            barrier(d)
        if stopping:
            save(done, stopped_early=True)
            print0(d, f"early stop at step {done}: no lower validation loss in {early.since_best} validations; "
                      f"best.pt holds the lowest ({early.best:.4f})")
            end = done
            break
        if done == end or done % valid_every == 0 or done % args.save_every == 0:
            save(done)
    print0(d, f"done: step {end}/{args.steps} in {fmt_duration(time.time() - progress.t0)}; "
              f"checkpoints {ckpt_path}, {os.path.join(args.out, 'best.pt')}")
    return early.best


if __name__ == "__main__":
    main()
