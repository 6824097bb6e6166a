"""finetune.py's flags of ELMER's and of NAR fine-tuning, and which of its flags a fine-tuning run
uses: guards.refuse_unused's table (a flag given where it has no effect is refused, not silently
dropped), and the checks of the flags that shape a model from scratch or its decoding.
tests/test_trust.py walks finetune.py's parser against them."""
from .architectures import ARCHS
from .errors import UserError
from .elmer.exit_measures import MEASURES
from .mlae.nar import CROSS_ANCHORS

# the flags every run uses; every other flag enters unused_flags' table (or CHECKED_ELSEWHERE's
# checks), which says which runs it applies to (tests/test_trust.py walks the parser against them)
ALWAYS_APPLIES = ("help", "init", "task", "train_data", "valid_data", "train_share", "max_src", "epochs", "batch",
                  "warmup_epochs", "lr_schedule", "valid_every", "patience",
                  "label_smoothing", "valid_examples", "micro_batch", "lr", "weight_decay", "clip", "dropout",
                  "attention", "compile",
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


def add_elmer_flags(p):
    """The flags of an ELMER fine-tuning: its exit, its measure and threshold, its decoder's length."""
    p.add_argument("--exit", default="hard", choices=["hard", "soft"],
                   help="elmer: hard or soft early exit (ELMER 4.3)")
    p.add_argument("--exit-measure", default=None, choices=MEASURES,
                   help="elmer: what decides a token's exit at inference: the off-ramp entropy (the paper, "
                        "a vocabulary projection per layer), or O(d) measures: the cosine of h^l and h^(l-1) "
                        "(state), a learnt linear exit classifier (classifier; always trained). Default entropy")
    p.add_argument("--exit-threshold", type=float, default=None,
                   help="elmer: the measure's threshold (entropy: exit below it, default 0.5; state: cosine "
                        "above it, default 0.99; classifier: probability above it, default 0.9)")
    p.add_argument("--exit-entropy", type=float, default=None,
                   help="elmer: shorthand for --exit-measure entropy --exit-threshold X")
    p.add_argument("--exit-train", default="hard", choices=["hard", "all"],
                   help="elmer, hard exit: tokens leave during fine-tuning once their off-ramp entropy is under "
                        "the threshold (ELMER 4.1; hard), or none leaves and every off-ramp is trained (all)")
    p.add_argument("--dec-len", type=int, default=None,
                   help="elmer: [MASK] tokens fed to the decoder (default: the pretrained one, or 32)")


def add_nar_flags(p):
    """The flags of a NAR fine-tuning (CMLM) and its Mask-Predict decoding."""
    p.add_argument("--nar", action="store_true",
                   help="CMLM fine-tuning, Mask-Predict decoding (t5, t5-nar, mlae, --init none)")
    p.add_argument("--length-beam", type=int, default=3, help="--nar: length candidates")
    p.add_argument("--iterations", type=int, default=10, help="--nar: Mask-Predict iterations")
    p.add_argument("--cross-anchor", default="none", choices=CROSS_ANCHORS,
                   help="--nar: the cross-attention's position bias that MLAE (b) and T5-NAR pretrain: dropped "
                        "(none), or kept with target token i of T at (i + 1/2)/T of the source (proportional; "
                        "a fresh table where the checkpoint has none)")
    p.add_argument("--adaptive-stop", action="store_true",
                   help="--nar: a candidate stops once its masked state repeats (fairseq's behaviour); "
                        "default: all --iterations, as published")
