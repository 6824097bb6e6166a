"""The architectures a checkpoint holds, one record each: what finetune.py and eval.py build, feed
and decode for it, looked up by name (ARCHS). The scripts name no architecture themselves.

A pretrained checkpoint's architecture comes from its objective (core/objectives.py); fine-tuning
for summarization turns some into another (`summarize_as`: MLAE into its seq2seq or UniLM style, a
PMLM/MLM stack into RoBERTa's encoder under a random decoder, any encoder-decoder into a CMLM with
--nar); a fine-tuned checkpoint records the architecture it became.

    unilm        one stack (PMLM, MLM): UniLMv2's pseudo-mask fine-tuning (section 3.4)
    t5           encoder-decoder, teacher forcing
    t5-nar       T5 pretrained with a NAR decoder (MLAE 4.4): fine-tuned with --nar only
    mlae-a/-b    a pretrained MLAE of either decoder: classification reads its encoder
    mlae-s2s     MLAE fine-tuned seq2seq-style: an encoder-decoder with T5's operations
    mlae-unilm   MLAE fine-tuned UniLM-style: latents and target in one decoder stack
    roberta-s2s  a PMLM/MLM stack as the encoder of an encoder-decoder with a random decoder
    nar          a CMLM (T5-NAR, MLAE NAR, or from scratch), decoded by Mask-Predict
    elmer        ELMER's NAR encoder-decoder with early exit (its options: the checkpoint's "elmer")
"""

import dataclasses
import functools
from typing import Callable, NamedTuple, Optional

from . import t5
from .elmer import model as elmer
from .mlae import mask_predict, nar
from .unilm import seq2seq
from .classify import Classifier, EncoderClassifier
from .config import decoder_depth
from .errors import UserError
from .elmer.exit_measures import MEASURES
from .flags import AT_LEAST_1, DEC_LEN, Applies, Rule, flag
from .mlae.model import MLAE, MLAEUniLM, MLAEUniLMDecoder
from .mlae.nar import CROSS_ANCHORS
from .model import EncoderDecoder, UnifiedLM
from .objectives import objective_of
from .tasks import SUMMARIZE


class Seq2SeqOps(NamedTuple):
    """The seq2seq operations of one architecture. max_src counts every source token, the special
    ones included: "[SOS] SRC [EOS]" for unilm and for an encoder pretrained after [SOS]
    (cfg.enc_sos), "SRC [EOS]" for t5."""

    batch: Callable  # (pairs of id lists, tok, max_src, max_tgt) -> Batch
    loss_sums: Callable  # (model, batch, label_smoothing) -> dict of sums
    decoder: Callable  # (model, source id lists, tok) -> an IncrementalDecoder
    n_special: int  # special tokens around a source

    def truncate(self, ids, max_src):
        return list(ids)[: max_src - self.n_special]


def t5_ops(decoder):
    """T5's teacher-forced operations, with this architecture's step decoder."""

    def ops(dec_len, sos):
        batch = functools.partial(t5.t5_seq2seq_batch, sos=sos)
        return Seq2SeqOps(batch, t5.t5_seq2seq_loss_sums, decoder, 1 + sos)

    return ops


def unilm_ops(dec_len, sos):
    batch = lambda pairs, tok, max_src, max_tgt: seq2seq.seq2seq_batch(pairs, tok, max_src - 2, max_tgt)  # noqa: E731
    return Seq2SeqOps(batch, seq2seq.seq2seq_loss_sums, seq2seq.PMLMDecoder, 2)


def nar_ops(dec_len, sos):
    return Seq2SeqOps(functools.partial(nar.nar_batch, sos=sos), nar.nar_loss_sums, mask_predict.NARDecoder, 1 + sos)


def elmer_ops(dec_len, sos):
    batch = lambda pairs, tok, max_src, max_tgt: elmer.elmer_seq2seq_batch(pairs, tok, max_src, max_tgt, dec_len)  # noqa: E731
    return Seq2SeqOps(batch, elmer.elmer_seq2seq_loss_sums, None, 1)


# -----------------------------------------------------------------------------
# finetune.py's flags of the architectures that have their own (Arch.add_flags)

# an entropy in nats, infinite where every token is to leave at layer 1
EXIT_ENTROPY = Rule(lambda v: v >= 0, "0 or more (inf: every token exits at layer 1)", infinite=True)
# where each flag applies (core/flags.py Applies: (config, the checkpoint's Arch) -> whether it does)
ELMER = Applies(lambda config, arch: arch.exits, "to an elmer checkpoint (or --init none --arch elmer)")
NAR = Applies(lambda config, arch: config.task == "summarize" and config.nar, "with --nar")


def hard_exit(config, arch):
    return arch.exits and config.exit == "hard"


def threshold_read(config, arch):
    """Soft exit with the entropy measure decodes every layer (threshold 0): there a threshold goes unread."""
    return hard_exit(config, arch) or arch.exits and config.exit_measure not in (None, "entropy")


def add_elmer_flags(p):
    """The flags of an ELMER fine-tuning: its exit, its measure and threshold, its decoder's length."""
    flag(
        p,
        "--exit",
        applies=ELMER,
        default="hard",
        choices=["hard", "soft"],
        help="elmer: hard or soft early exit (ELMER 4.3)",
    )
    flag(
        p,
        "--exit-measure",
        applies=ELMER,
        default=None,
        choices=MEASURES,
        help="elmer: what decides a token's exit at inference: the off-ramp entropy (the paper, "
        "a vocabulary projection per layer), or O(d) measures: the cosine of h^l and h^(l-1) "
        "(state), a learnt linear exit classifier (classifier; always trained). Default entropy",
    )
    flag(
        p,
        "--exit-threshold",
        type=float,
        default=None,
        applies=Applies(threshold_read, "to an elmer checkpoint with --exit hard, or soft with a cheap --exit-measure"),
        help="elmer: the measure's threshold (entropy: exit below it, default 0.5; state: cosine "
        "above it, default 0.99; classifier: probability above it, default 0.9)",
    )
    flag(
        p,
        "--exit-entropy",
        rule=EXIT_ENTROPY,
        applies=Applies(hard_exit, "to an elmer checkpoint with --exit hard"),
        type=float,
        default=None,
        help="elmer: shorthand for --exit-measure entropy --exit-threshold X",
    )
    flag(
        p,
        "--exit-train",
        default="hard",
        choices=["hard", "all"],
        applies=Applies(
            hard_exit, "to an elmer checkpoint with --exit hard (under soft exit no token leaves in training)"
        ),
        help="elmer, hard exit: tokens leave during fine-tuning once their off-ramp entropy is under "
        "the threshold (ELMER 4.1; hard), or none leaves and every off-ramp is trained (all)",
    )
    flag(
        p,
        "--dec-len",
        rule=DEC_LEN,
        applies=ELMER,
        type=int,
        default=None,
        help="elmer: [MASK] tokens fed to the decoder (default: the pretrained one, or 32)",
    )


def add_nar_flags(p):
    """The flags of a NAR fine-tuning (CMLM) and its Mask-Predict decoding."""
    flag(
        p,
        "--nar",
        applies=SUMMARIZE,
        action="store_true",
        help="CMLM fine-tuning, Mask-Predict decoding (t5, t5-nar, mlae, --init none)",
    )
    flag(p, "--length-beam", rule=AT_LEAST_1, applies=NAR, type=int, default=3, help="--nar: length candidates")
    flag(p, "--iterations", rule=AT_LEAST_1, applies=NAR, type=int, default=10, help="--nar: Mask-Predict iterations")
    flag(
        p,
        "--cross-anchor",
        applies=NAR,
        default="none",
        choices=CROSS_ANCHORS,
        help="--nar: the cross-attention's position bias that MLAE (b) and T5-NAR pretrain: dropped "
        "(none), or kept with target token i of T at (i + 1/2)/T of the source (proportional; "
        "a fresh table where the checkpoint has none)",
    )
    flag(
        p,
        "--adaptive-stop",
        applies=NAR,
        action="store_true",
        help="--nar: a candidate stops once its masked state repeats (fairseq's behaviour); "
        "default: all --iterations, as published",
    )


class Arch(NamedTuple):
    name: str
    model: Callable  # (cfg, elmer_opts) -> the model it fine-tunes, or generates with
    encoder: Optional[Callable] = None  # (cfg) -> the model whose encoder a classifier reads (None: its own stack)
    ops: Optional[Callable] = None  # (dec_len, sos) -> Seq2SeqOps; None: summarization turns it into another
    summarize_as: Optional[Callable] = None  # (cfg, nar, style) -> (arch, cfg) it is fine-tuned into for summarization
    decode: str = "ar"  # "ar" (beam search), "nar" (Mask-Predict) or "elmer" (one pass, exits)
    exits: bool = False  # early exit (ELMER): the exit flags apply, the checkpoint records its options
    positions_apart: bool = False  # pretraining recorded its encoder's and decoder's positions apart (T5's)
    nar_decoder: bool = False  # its decoder was pretrained on targets without [EOS] (T5-NAR's)
    one_table: bool = False  # source and target share one position table (a single stack)
    classify_sos: bool = True  # a classifier's input starts with [SOS], as its pretraining's did
    masks_decoder_inputs: bool = True  # MLAE's scheduled masking may mask its decoder inputs
    schedule: str = "none"  # the default --mask-schedule (MLAE's: linear, its Algorithm 1)
    label_smoothing: float = 0.1
    can_classify: bool = True
    has_style: bool = False  # summarization picks a --style (seq2seq or UniLM-style)
    scratch_as: Optional[str] = None  # finetune.py --init none --arch NAME: the objective whose shape it takes
    depth_flags: bool = False  # --init none: --enc-layers / --dec-layers set its depths
    add_flags: Optional[Callable] = None  # (parser) -> None: finetune.py's flags of fine-tuning into it

    @property
    def classifier_reads(self):
        """The token a classifier's linear layer reads by default: [SOS] of a stack, [EOS] of an encoder."""
        return Classifier.reads if self.encoder is None else EncoderClassifier.reads

    def classifier(self, cfg, n_labels, reads=None):
        """A fresh linear layer on the [SOS] vector of a stack, or on [EOS] of an encoder-decoder's
        encoder; reads ("first" or "last") picks the other end instead."""
        if not self.can_classify:
            raise UserError(
                f"classification fine-tunes a pretrained encoder (pmlm, mlm, mlae, t5 or t5-nar "
                f"checkpoint), not one of architecture {self.name}"
            )
        if self.encoder is None:
            model = Classifier(UnifiedLM(cfg), n_labels, cfg.dropout)
        else:
            model = EncoderClassifier(self.encoder(cfg), n_labels, cfg.dropout)
        if reads is not None:
            if reads not in ("first", "last"):
                raise UserError(f"a classifier reads the first or the last token's vector, not {reads!r}")
            model.reads = reads
        return model


def to_nar(cfg, nar_flag, enc_sos=False):
    """Any encoder-decoder fine-tuned with --nar is a CMLM (its encoder after [SOS] where its
    pretraining put one: enc_sos)."""
    return ("nar", dataclasses.replace(cfg, enc_sos=enc_sos)) if nar_flag else None


def mlae_into(cfg, nar_flag, style):  # MLAE's encoder was pretrained on "[SOS] TEXT [EOS]"
    return to_nar(cfg, nar_flag, enc_sos=True) or (
        ("mlae-unilm" if style == "unilm" else "mlae-s2s"),
        dataclasses.replace(cfg, enc_sos=True),
    )


def unilm_into(cfg, nar_flag, style):
    if nar_flag:
        raise UserError("--nar needs an encoder-decoder checkpoint (t5, t5-nar or mlae), or --init none --arch t5")
    if style == "seq2seq":  # RoBERTa: the stack, pretrained on "[SOS] S1 [EOS] ..." in segment 0, as an encoder
        return "roberta-s2s", dataclasses.replace(
            cfg, n_dec_layers=decoder_depth(cfg.n_layers), enc_sos=True, enc_segment=True
        )
    return "unilm", cfg


def t5_nar_into(cfg, nar_flag, style):
    if not nar_flag:
        raise UserError(
            "a t5-nar checkpoint's decoder was pretrained non-autoregressively: fine-tune it with --nar "
            "(or use a t5 checkpoint for autoregressive generation)"
        )
    return "nar", cfg


ARCHS = {
    a.name: a
    for a in (
        Arch(
            "unilm",
            lambda cfg, opts: UnifiedLM(cfg),
            ops=unilm_ops,
            summarize_as=unilm_into,
            one_table=True,
            masks_decoder_inputs=False,
            has_style=True,
            scratch_as="pmlm",
        ),
        Arch(
            "t5",
            lambda cfg, opts: EncoderDecoder(cfg),
            encoder=EncoderDecoder,
            ops=t5_ops(t5.T5Decoder),
            summarize_as=lambda cfg, nar_flag, style: to_nar(cfg, nar_flag) or ("t5", cfg),
            positions_apart=True,
            classify_sos=False,
            scratch_as="t5",
            depth_flags=True,
        ),
        Arch(
            "t5-nar",
            lambda cfg, opts: nar.NARModel(cfg),
            encoder=nar.NARModel,
            summarize_as=t5_nar_into,
            positions_apart=True,
            nar_decoder=True,
            classify_sos=False,
        ),
        Arch(
            "mlae-a",
            lambda cfg, opts: MLAE(cfg, "a"),
            encoder=lambda cfg: MLAE(cfg, "a"),
            summarize_as=mlae_into,
            has_style=True,
        ),
        Arch(
            "mlae-b",
            lambda cfg, opts: MLAE(cfg, "b"),
            encoder=lambda cfg: MLAE(cfg, "b"),
            summarize_as=mlae_into,
            has_style=True,
        ),
        Arch(
            "mlae-s2s",
            lambda cfg, opts: EncoderDecoder(cfg),
            ops=t5_ops(t5.T5Decoder),
            schedule="linear",
            can_classify=False,
        ),
        Arch(
            "mlae-unilm",
            lambda cfg, opts: MLAEUniLM(cfg),
            ops=t5_ops(MLAEUniLMDecoder),
            one_table=True,
            schedule="linear",
            can_classify=False,
        ),
        Arch("roberta-s2s", lambda cfg, opts: EncoderDecoder(cfg), ops=t5_ops(t5.T5Decoder), can_classify=False),
        Arch(
            "nar",
            lambda cfg, opts: nar.NARModel(cfg),
            ops=nar_ops,
            decode="nar",
            masks_decoder_inputs=False,
            can_classify=False,
            add_flags=add_nar_flags,
        ),
        Arch(
            "elmer",
            lambda cfg, opts: elmer.ELMER(cfg, **(opts or {})),
            ops=elmer_ops,
            decode="elmer",
            exits=True,
            label_smoothing=0.0,
            can_classify=False,
            scratch_as="elmer",
            add_flags=add_elmer_flags,
        ),
    )
}


def arch_of(state, path):
    """The architecture of a checkpoint: its 'arch' once fine-tuned, else its objective's (Objective.arch)."""
    if "arch" in state:
        return state["arch"]
    obj = objective_of(state.get("kind", ""))
    if obj is None or obj.arch is None:
        raise UserError(f"{path}: a {state.get('kind')!r} checkpoint has no architecture this script knows")
    return obj.arch(state)


def arch_flags(name):
    """(parser) -> None: the architecture's flags of finetune.py, under a heading naming it."""
    return lambda p: ARCHS[name].add_flags(p.add_argument_group(f"fine-tuning into {name}"))


def seq2seq_arch(arch, cfg, nar_flag, style):
    """(architecture, config) a checkpoint of `arch` is fine-tuned into for generation (summarize_as);
    a fine-tuned architecture comes back as it is (resuming)."""
    into = ARCHS[arch].summarize_as
    return into(cfg, nar_flag, style) if into else (arch, cfg)


def build_model(arch, cfg, n_labels=None, elmer_opts=None, reads=None):
    """A fresh model of the architecture; n_labels makes a classifier around its encoder, reading
    the vector of `reads` (None: the architecture's token)."""
    a = ARCHS[arch]
    return a.model(cfg, elmer_opts) if n_labels is None else a.classifier(cfg, n_labels, reads)


def seq2seq_ops(arch, dec_len=32, sos=False):
    """The operations of `arch`; sos: its encoder reads "[SOS] SRC [EOS]" (cfg.enc_sos)."""
    return ARCHS[arch].ops(dec_len, sos)
