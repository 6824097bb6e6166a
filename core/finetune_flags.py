"""Which of finetune.py's flags a fine-tuning run uses: guards.refuse_unused's table (a flag given
where it has no effect is refused, not silently dropped), and the checks of the flags that shape a
model from scratch or its decoding. tests/test_trust.py walks finetune.py's parser against them."""
from .architectures import ARCHS
from .errors import UserError

# the flags every run uses; every other flag enters unused_flags' table (or CHECKED_ELSEWHERE's
# checks), which says which runs it applies to (tests/test_trust.py walks the parser against them)
ALWAYS_APPLIES = ("help", "init", "task", "train_data", "valid_data", "train_share", "max_src", "epochs", "batch",
                  "warmup_epochs", "lr_schedule", "valid_every", "patience",
                  "label_smoothing", "valid_examples", "micro_batch", "lr", "weight_decay", "clip", "dropout",
                  "attention",
                  "log_every", "save_every", "stop_after", "out", "resume", "overwrite", "seed", "device", "dtype")
CHECKED_ELSEWHERE = ("enc_layers", "dec_layers", "adaptive_stop")  # check_nar_flags


def unused_flags(args, arch, summ):
    """guards.refuse_unused's table: each option's flags, and whether this run (a checkpoint of
    `arch`, before it is turned into its fine-tuning architecture) uses them."""
    scratch_run, elmer, nar = args.init == "none", ARCHS[arch].decode == "elmer", summ and args.nar
    return dict(
        arch=(scratch_run, "with --init none (a checkpoint brings its own architecture)"),
        model=(scratch_run, "with --init none (a checkpoint brings its own size)"),
        vocab_size=(scratch_run, "with --init none (a checkpoint brings its own tokenizer)"),
        exit=(elmer, "to an elmer checkpoint (or --init none --arch elmer)"),
        exit_entropy=(elmer and args.exit == "hard", "to an elmer checkpoint with --exit hard"),
        exit_train=(elmer and args.exit == "hard", "to an elmer checkpoint with --exit hard (under soft exit no "
                                                    "token leaves in training)"),
        exit_measure=(elmer, "to an elmer checkpoint (or --init none --arch elmer)"),
        # soft exit with the entropy measure decodes every layer (threshold 0): another would be recorded unused
        exit_threshold=(elmer and (args.exit == "hard" or args.exit_measure not in (None, "entropy")),
                        "to an elmer checkpoint with --exit hard, or soft with a cheap --exit-measure"),
        dec_len=(elmer, "to an elmer checkpoint (or --init none --arch elmer)"),
        nar=(summ, "to --task summarize"),
        length_beam=(nar, "with --nar"),
        iterations=(nar, "with --nar"),
        cross_anchor=(nar, "with --nar"),
        style=(summ and ARCHS[arch].has_style, "to summarization from a pmlm, mlm or mlae checkpoint"),
        cross_init=(summ and not scratch_run, "to summarization from a pretrained checkpoint"),
        mask_schedule=(summ, "to --task summarize"),
        mask_init=(summ, "to --task summarize"),
        mask_epochs=(summ, "to --task summarize"),
        rouge_examples=(summ, "to --task summarize", True),
        max_tgt=(summ, "to --task summarize", True),
        src_field=(summ, "to --task summarize"),
        tgt_field=(summ, "to --task summarize"),
        text_field=(not summ, "to --task classify"),
        label_field=(not summ, "to --task classify"),
        cls_vector=(not summ, "to --task classify"))


def check_nar_flags(args):
    """The flags that shape a model from scratch, or its decoding, where they have no effect."""
    if args.init != "none" or not ARCHS[args.arch].depth_flags:
        for flag in ("enc_layers", "dec_layers"):
            if getattr(args, flag) is not None:
                raise UserError(f"--{flag.replace('_', '-')} sets the depth of a model from scratch (--init none "
                                f"--arch t5); a pretrained checkpoint has its own")
    elif args.enc_layers is not None and args.enc_layers < 1:
        raise UserError(f"--enc-layers {args.enc_layers} must be at least 1")
    if args.adaptive_stop and not args.nar:
        raise UserError("--adaptive-stop changes Mask-Predict decoding: it needs --nar")
