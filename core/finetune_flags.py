"""Which of finetune.py's flags a fine-tuning run uses (the flags are declared by finetune.py, the
architectures' records and core/training.py): guards.refuse_unused's table (a flag given where it
has no effect is refused, not silently dropped), and the checks of the flags that shape a model
from scratch or its decoding.
tests/test_trust.py walks finetune.py's parser against them."""
from .architectures import ARCHS
from .config import PRESETS
from .errors import UserError
from .flags import ABOVE_0, AT_LEAST_0, AT_LEAST_1, FRACTION, VOCAB_SIZE, Rule, flag
from .mlae.model import CROSS_INITS, SCHEDULES
from .optim import LR_SCHEDULES
from .tasks import TASKS

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
    scratch_run, elmer, nar = args.init == "none", ARCHS[arch].exits, summ and args.nar
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


# -----------------------------------------------------------------------------
# the flags finetune.py declares itself (the architectures' own: core/architectures.py Arch.add_flags)

def finetuning_flags(p):
    """The flags every fine-tuning reads (those of one task apply to it alone: unused_flags)."""
    flag(p, "--init", default="checkpoints/pretrain/last.pt",
         help="pretrained checkpoint (train.py), or 'none': random weights, the no-pretraining ablation")
    flag(p, "--task", default="summarize", choices=TASKS)
    flag(p, "--train-data", default=None, help="a .jsonl training file (default: the embedded corpus)")
    flag(p, "--valid-data", default=None, help="a .jsonl validation file (default: the embedded corpus)")
    flag(p, "--train-share", rule=Rule(lambda v: 0 < v <= 1, "in (0, 1]"), type=float, default=1.0,
         help="fine-tune on a fixed share of the training examples, spread evenly over the file "
              "(0.5: every other one); validation stays whole")
    flag(p, "--src-field", default=None, help="source field of --train-data (summarize; default document)")
    flag(p, "--tgt-field", default=None, help="target field (summarize; default summary)")
    flag(p, "--text-field", default=None, help="text field (classify; default document)")
    flag(p, "--label-field", default=None, help="label field (classify; default section)")
    flag(p, "--cls-vector", default=None, choices=("first", "last"),
         help="classify: the token whose vector the linear layer reads, the first ([SOS], or T5's first "
              "text token) or the last ([EOS]); default the papers': first for a pmlm or mlm stack, "
              "last for the encoder of an encoder-decoder (the MLAE paper, section 3.2)")
    flag(p, "--max-src", rule=Rule(lambda v: v >= 3, "at least 3"), type=int, default=None,
         help="source tokens kept, [SOS]/[EOS] included (default: 80, the measured recipe, or less "
              "to fit the positions the checkpoint was pretrained on; more than those is refused)")
    flag(p, "--max-tgt", rule=Rule(lambda v: v >= 2, "at least 2"), type=int, default=24,
         help="target tokens kept, [EOS] included")
    flag(p, "--epochs", rule=ABOVE_0, type=float, default=3,
         help="the most passes over the training split (fractions allowed); the run stops earlier on "
              "validation (--patience)")
    flag(p, "--batch", rule=AT_LEAST_1, type=int, default=64, help="global batch, in examples")
    flag(p, "--lr-schedule", default="inverse-sqrt", choices=LR_SCHEDULES,
         help="after warmup: MLAE's inverse square root decay (its Table 11), or UniLMv2's linear "
              "decay to 0 at the last of --epochs")
    flag(p, "--warmup-epochs", rule=AT_LEAST_0, type=float, default=0.15,
         help="warmup, in epochs: the same steps whatever --epochs allows (more epochs, the same schedule)")
    flag(p, "--valid-every", rule=ABOVE_0, type=float, default=0.5, help="validate every this many epochs")
    flag(p, "--patience", rule=AT_LEAST_0, type=int, default=2,
         help="stop after this many validations in a row without a lower validation loss (0: never; "
              "run all --epochs)")
    flag(p, "--label-smoothing", rule=FRACTION, type=float, default=None,
         help="default 0.1, elmer 0 (the paper's plain cross-entropy). Smoothing e puts a floor under "
              "an off-ramp's entropy: -(1-e+e/V)ln(1-e+e/V) - (V-1)(e/V)ln(e/V), 1.22 nats at e=0.1, "
              "V=8000: above the paper's delta 0.5, so no token would ever exit by entropy")
    flag(p, "--valid-examples", rule=AT_LEAST_1, type=int, default=2000,
         help="validation loss / accuracy on this many (the loss early stopping reads: enough tokens that "
              "its noise is under the changes it tracks)")
    flag(p, "--rouge-examples", rule=AT_LEAST_0, type=int, default=200, help="quick ROUGE (greedy) on this many")


def scratch_flags(p):
    """The flags of a model from scratch (--init none), which a checkpoint brings otherwise."""
    flag(p, "--arch", default="unilm", choices=["unilm", "t5", "elmer"],
         help="with --init none: the architecture")
    flag(p, "--model", default="small", choices=sorted(PRESETS), help="with --init none: the preset")
    flag(p, "--enc-layers", rule=AT_LEAST_1, type=int, default=None,
         help="with --init none --arch t5: encoder layers (default MLAE's: 2/4/12 at tiny/small/base)")
    flag(p, "--dec-layers", rule=AT_LEAST_1, type=int, default=None,
         help="with --init none --arch t5: decoder layers (default MLAE's: 1/2/4 at tiny/small/base)")
    flag(p, "--vocab-size", rule=VOCAB_SIZE, type=int, default=8000,
         help="with --init none: tokenizer of the embedded corpus")


def seq2seq_flags(p):
    """The flags of autoregressive summarization: its style, its cross-attention's start, MLAE's
    scheduled masking."""
    flag(p, "--style", default=None, choices=["seq2seq", "unilm"],
         help="AR style: mlae seq2seq (default) or unilm; pmlm/mlm unilm (default) or seq2seq (a random "
              "decoder: the RoBERTa baseline)")
    flag(p, "--cross-init", default="self", choices=CROSS_INITS,
         help="mlae/t5: cross-attention from the layer's self-attention, random, or the whole decoder random")
    flag(p, "--mask-schedule", default=None, choices=SCHEDULES,
         help="AR: decoder inputs masked at ratio m_t (MLAE Algorithm 1; default linear for mlae, else none)")
    flag(p, "--mask-init", rule=Rule(lambda v: 0 <= v <= 1, "in [0, 1]"), type=float, default=0.6,
         help="m0 of --mask-schedule")
    flag(p, "--mask-epochs", rule=ABOVE_0, type=float, default=3,
         help="linear --mask-schedule: m_t falls from m0 to 0 over this many epochs, whatever --epochs")
