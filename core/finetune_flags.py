"""finetune.py's own flags, each declared with its rule and, where it applies to some runs only,
the runs it applies to (core/flags.py Applies); and guards.refuse_unused's table, read off those
declarations and the architectures' (core/architectures.py Arch.add_flags): a flag given where it
has no effect is refused, not silently dropped. tests/test_trust.py walks finetune.py's parser
against the table and the flags every run uses."""

from .architectures import ARCHS
from .config import PRESETS
from .flags import ABOVE_0, AT_LEAST_0, AT_LEAST_1, FRACTION, VOCAB_SIZE, Applies, Rule, applicability, flag
from .mlae.model import CROSS_INITS, SCHEDULES
from .optim import LR_SCHEDULES
from .tasks import CLASSIFY, SUMMARIZE, TASKS


def unused_flags(p, config, arch):
    """guards.refuse_unused's table: each flag of finetune.py's parser p that applies to some runs
    only, and whether this run uses it: its config (as given, or with the defaults the fine-tuned
    architecture decides resolved) and `arch`, the checkpoint's architecture before it is turned into
    its fine-tuning one."""
    record = ARCHS[arch]
    return {dest: (a.test(config, record), a.where, a.harmless) for dest, a in applicability(p).items()}


# where the flags of one kind of run apply (Applies: (config, the checkpoint's Arch) -> whether they do)
def from_scratch(config, arch):
    return config.init == "none"


# -----------------------------------------------------------------------------
# the flags finetune.py declares itself (the architectures' own: core/architectures.py Arch.add_flags)


def finetuning_flags(p):
    """The flags every fine-tuning reads, and those of one task, which apply to it alone."""
    flag(
        p,
        "--init",
        default="checkpoints/pretrain/last.pt",
        help="pretrained checkpoint (train.py), or 'none': random weights, the no-pretraining ablation",
    )
    flag(p, "--task", default="summarize", choices=TASKS)
    flag(p, "--train-data", default=None, help="a .jsonl training file (default: the embedded corpus)")
    flag(p, "--valid-data", default=None, help="a .jsonl validation file (default: the embedded corpus)")
    flag(
        p,
        "--train-share",
        rule=Rule(lambda v: 0 < v <= 1, "in (0, 1]"),
        type=float,
        default=1.0,
        help="fine-tune on a fixed share of the training examples, spread evenly over the file "
        "(0.5: every other one); validation stays whole",
    )
    flag(
        p,
        "--src-field",
        applies=SUMMARIZE,
        default=None,
        help="source field of --train-data (summarize; default document)",
    )
    flag(p, "--tgt-field", applies=SUMMARIZE, default=None, help="target field (summarize; default summary)")
    flag(p, "--text-field", applies=CLASSIFY, default=None, help="text field (classify; default document)")
    flag(p, "--label-field", applies=CLASSIFY, default=None, help="label field (classify; default section)")
    flag(
        p,
        "--cls-vector",
        applies=CLASSIFY,
        default=None,
        choices=("first", "last"),
        help="classify: the token whose vector the linear layer reads, the first ([SOS], or T5's first "
        "text token) or the last ([EOS]); default the papers': first for a pmlm or mlm stack, "
        "last for the encoder of an encoder-decoder (the MLAE paper, section 3.2)",
    )
    flag(
        p,
        "--max-src",
        rule=Rule(lambda v: v >= 3, "at least 3"),
        type=int,
        default=None,
        help="source tokens kept, [SOS]/[EOS] included (default: 80, the measured recipe, or less "
        "to fit the positions the checkpoint was pretrained on; more than those is refused)",
    )
    flag(
        p,
        "--max-tgt",
        rule=Rule(lambda v: v >= 2, "at least 2"),
        applies=SUMMARIZE._replace(harmless=True),
        type=int,
        default=24,
        help="target tokens kept, [EOS] included",
    )
    flag(
        p,
        "--epochs",
        rule=ABOVE_0,
        type=float,
        default=3,
        help="the most passes over the training split (fractions allowed); the run stops earlier on "
        "validation (--patience)",
    )
    flag(p, "--batch", rule=AT_LEAST_1, type=int, default=64, help="global batch, in examples")
    flag(
        p,
        "--lr-schedule",
        default="inverse-sqrt",
        choices=LR_SCHEDULES,
        help="after warmup: MLAE's inverse square root decay (its Table 11), or UniLMv2's linear "
        "decay to 0 at the last of --epochs",
    )
    flag(
        p,
        "--warmup-epochs",
        rule=AT_LEAST_0,
        type=float,
        default=0.15,
        help="warmup, in epochs: the same steps whatever --epochs allows (more epochs, the same schedule)",
    )
    flag(p, "--valid-every", rule=ABOVE_0, type=float, default=0.5, help="validate every this many epochs")
    flag(
        p,
        "--patience",
        rule=AT_LEAST_0,
        type=int,
        default=2,
        help="stop after this many validations in a row without a lower validation loss (0: never; run all --epochs)",
    )
    flag(
        p,
        "--label-smoothing",
        rule=FRACTION,
        type=float,
        default=None,
        help="default 0.1, elmer 0 (the paper's plain cross-entropy). Smoothing e puts a floor under "
        "an off-ramp's entropy: -(1-e+e/V)ln(1-e+e/V) - (V-1)(e/V)ln(e/V), 1.22 nats at e=0.1, "
        "V=8000: above the paper's delta 0.5, so no token would ever exit by entropy",
    )
    flag(
        p,
        "--valid-examples",
        rule=AT_LEAST_1,
        type=int,
        default=2000,
        help="validation loss / accuracy on this many (the loss early stopping reads: enough tokens that "
        "its noise is under the changes it tracks)",
    )
    flag(
        p,
        "--rouge-examples",
        rule=AT_LEAST_0,
        applies=SUMMARIZE._replace(harmless=True),
        type=int,
        default=200,
        help="quick ROUGE (greedy) on this many",
    )


def scratch_flags(p):
    """The flags of a model from scratch (--init none), which a checkpoint brings otherwise."""
    flag(
        p,
        "--arch",
        applies=Applies(from_scratch, "with --init none (a checkpoint brings its own architecture)"),
        default="unilm",
        choices=["unilm", "t5", "elmer"],
        help="with --init none: the architecture",
    )
    flag(
        p,
        "--model",
        applies=Applies(from_scratch, "with --init none (a checkpoint brings its own size)"),
        default="small",
        choices=sorted(PRESETS),
        help="with --init none: the preset",
    )
    depths = Applies(
        lambda config, arch: from_scratch(config, arch) and arch.depth_flags,
        "to a model from scratch of --arch t5 (--init none; a checkpoint has its own depths)",
    )
    flag(
        p,
        "--enc-layers",
        rule=AT_LEAST_1,
        applies=depths,
        type=int,
        default=None,
        help="with --init none --arch t5: encoder layers (default MLAE's: 2/4/12 at tiny/small/base)",
    )
    flag(
        p,
        "--dec-layers",
        rule=AT_LEAST_1,
        applies=depths,
        type=int,
        default=None,
        help="with --init none --arch t5: decoder layers (default MLAE's: 1/2/4 at tiny/small/base)",
    )
    flag(
        p,
        "--vocab-size",
        rule=VOCAB_SIZE,
        type=int,
        default=8000,
        applies=Applies(from_scratch, "with --init none (a checkpoint brings its own tokenizer)"),
        help="with --init none: tokenizer of the embedded corpus",
    )


def seq2seq_flags(p):
    """The flags of autoregressive summarization: its style, its cross-attention's start, MLAE's
    scheduled masking (its flags read against --mask-schedule; None, before the architecture
    resolves its default, may be any)."""
    flag(
        p,
        "--style",
        default=None,
        choices=["seq2seq", "unilm"],
        applies=Applies(
            lambda config, arch: SUMMARIZE.test(config, arch) and arch.has_style,
            "to summarization from a pmlm, mlm or mlae checkpoint",
        ),
        help="AR style: mlae seq2seq (default) or unilm; pmlm/mlm unilm (default) or seq2seq (a random "
        "decoder: the RoBERTa baseline)",
    )
    flag(
        p,
        "--cross-init",
        default="self",
        choices=CROSS_INITS,
        applies=Applies(
            lambda config, arch: SUMMARIZE.test(config, arch) and not from_scratch(config, arch),
            "to summarization from a pretrained checkpoint",
        ),
        help="mlae/t5: cross-attention from the layer's self-attention, random, or the whole decoder random",
    )
    flag(
        p,
        "--mask-schedule",
        applies=SUMMARIZE,
        default=None,
        choices=SCHEDULES,
        help="AR: decoder inputs masked at ratio m_t (MLAE Algorithm 1; default linear for mlae, else none)",
    )
    flag(
        p,
        "--mask-init",
        rule=Rule(lambda v: 0 <= v <= 1, "in [0, 1]"),
        type=float,
        default=0.6,
        applies=Applies(
            lambda config, arch: SUMMARIZE.test(config, arch) and config.mask_schedule != "none",
            "to summarization with a --mask-schedule other than none",
        ),
        help="m0 of --mask-schedule",
    )
    flag(
        p,
        "--mask-epochs",
        rule=ABOVE_0,
        type=float,
        default=3,
        applies=Applies(
            lambda config, arch: SUMMARIZE.test(config, arch) and config.mask_schedule in (None, "linear"),
            "to summarization with --mask-schedule linear",
        ),
        help="linear --mask-schedule: m_t falls from m0 to 0 over this many epochs, whatever --epochs",
    )
