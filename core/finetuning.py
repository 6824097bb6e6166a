"""What finetune.py sets up around a model beyond its architecture (core/architectures.py): the
model it builds, MLAE's scheduled masking of the decoder inputs, and an ELMER's exit options."""

from typing import NamedTuple, Optional

from .elmer import exit_measures
from .architectures import ARCHS, build_model
from .config import ModelConfig
from .errors import UserError
from .mlae.model import ScheduledMasking


class Tuned(NamedTuple):
    """The model a fine-tuning builds, and its checkpoint records: the architecture it fine-tunes as,
    its config, and an ELMER's options (elmer_options; None for the others)."""

    arch: str
    cfg: ModelConfig
    elmer: Optional[dict] = None

    def build(self, n_labels=None, reads=None):
        """A fresh model; n_labels: a classifier reading the vector of `reads` (architectures.build_model)."""
        return build_model(self.arch, self.cfg, n_labels, self.elmer, reads)


def scheduled_loss(loss_fn, arch, args):
    """The AR loss with scheduled masking of the decoder inputs (MLAE Algorithm 1) for the
    encoder-decoder architectures, at the run's resolved --mask-schedule (by default the
    architecture's: linear for MLAE, none otherwise; finetune.py architecture)."""
    if not ARCHS[arch].masks_decoder_inputs:
        if args.mask_schedule != "none":
            raise UserError(
                f"--mask-schedule {args.mask_schedule} masks decoder inputs: the {arch} architecture "
                "has none to mask (use an encoder-decoder: t5, mlae, or --style seq2seq)"
            )
        return loss_fn
    return ScheduledMasking(loss_fn, args.mask_schedule, args.mask_init, args.mask_steps)


def elmer_options(
    arch, source, exit_mode="hard", exit_measure=None, exit_threshold=None, dec_len=None, exit_train="hard"
):
    """The options of an ELMER model being fine-tuned: the pretrained ones (decoder length,
    off-ramps) and this run's exit (section 4.3): the measure and threshold generate uses, and
    how training treats exits. Soft exit runs every layer at inference (entropy threshold 0)
    unless eval.py is given a threshold. None for other architectures; the exit flags of another
    architecture are refused."""
    if not ARCHS[arch].exits:
        if exit_measure is not None or exit_threshold is not None:
            raise UserError(f"--exit-measure / --exit-threshold / --exit-entropy apply to elmer only, not {arch}")
        return None
    opts = dict(source.get("elmer") or {})
    if "exit_entropy" in opts:  # options written before exit measures
        e = opts.pop("exit_entropy")
        opts.setdefault("exit_measure", "entropy")
        opts.setdefault("exit_threshold", e)
    opts.setdefault("dec_len", 32)
    if dec_len is not None:
        opts["dec_len"] = dec_len
    measure = exit_measure or "entropy"
    exit_measures.check_threshold(measure, exit_threshold)
    if exit_threshold is None:
        exit_threshold = exit_measures.DEFAULT_THRESHOLD[measure]
    if exit_mode == "soft" and measure == "entropy":
        exit_threshold = 0.0
    opts.update(soft=exit_mode == "soft", exit_measure=measure, exit_threshold=exit_threshold, exit_train=exit_train)
    return opts
