"""The pretraining objectives, one record each: what train.py builds, feeds and scores for
`--objective NAME`. train.py dispatches through OBJECTIVES and names no objective itself; a
fourth paper adds its module under core/ and a record here (docs/design.md, "Adding a paper").

    obj = OBJECTIVES["pmlm"]
    cfg = obj.shape(cfg, args)                      # depths of an encoder-decoder
    model = obj.model(cfg, args)                    # a fresh model of the objective
    batch = obj.batch(stream, indices, tok, args, model)
    sums = obj.loss(args)(model, batch)             # summed losses and counts (core/training.py)

Each record also says which of train.py's flags apply to it (`flags`), how many tokens a
pretraining window holds (`window`), which position ids pretraining trains (`positions`, recorded
in every checkpoint so that fine-tuning stays within them), and the version of its corruption.
"""
import dataclasses
import functools
from typing import Callable, NamedTuple

from . import t5 as t5_mod
from .config import depths
from .elmer.model import ELMER, elmer_depth, lplm_loss_sums
from .elmer.lplm import lplm_batch
from .mlae.model import MLAE, mlae_batch, mlae_loss_sums
from .model import EncoderDecoder, UnifiedLM
from .mlae.nar import NARModel, t5_nar_batch, t5_nar_loss_sums
from .unilm.pmlm import pmlm_batch, pmlm_loss_sums


class Objective(NamedTuple):
    name: str
    paper: str             # what it is, in the words of the paper it comes from
    model: Callable        # (cfg, args) -> a fresh nn.Module
    batch: Callable        # (stream, indices, tok, args, model) -> Batch
    loss: Callable         # (args) -> loss_sums(model, batch) -> dict of sums
    flags: tuple = ()      # the flags of train.py that apply to it, beyond the ones every run takes
    encoder_decoder: bool = False  # an encoder and a decoder: --enc-layers / --dec-layers apply
    span_corruption: bool = False  # T5's windows: sized so that the corrupted source fills --seq-len
    corruption: int = 1    # the version of its corruption, recorded in checkpoints (train.py notes a change)
    shape: Callable = lambda cfg, args: cfg  # (cfg, args) -> cfg with the objective's depths

    def window(self, seq_len):
        """Tokens per pretraining window: the PMLM's and MLAE's seq_len less [SOS] and two [EOS]; for
        T5 the window whose corrupted source is seq_len tokens long (core/t5.py window_for)."""
        return t5_mod.window_for(seq_len) if self.span_corruption else seq_len - 3

    def positions(self, seq_len):
        """The position ids (0..N-1) pretraining trains: one stack's {"total": seq_len}; MLAE's
        "[SOS] window [EOS]", one token shorter than seq_len; T5's {"encoder": .., "decoder": ..},
        the lengths span corruption makes of its windows (T5-NAR's decoder: the target without its
        [EOS])."""
        if self.name == "mlae":
            return dict(total=self.window(seq_len) + 2)
        if not self.span_corruption:
            return dict(total=seq_len)
        encoder, decoder = t5_mod.corrupted_lengths(self.window(seq_len))
        return dict(encoder=encoder, decoder=decoder - (self.name == "t5-nar"))


def mlae_depths(cfg, args):
    """MLAE's depths (core/config.py DEPTHS), which every encoder-decoder it is compared with shares."""
    enc, dec = depths(args.model, args.enc_layers, args.dec_layers)
    return dataclasses.replace(cfg, n_layers=enc, n_dec_layers=dec)


def elmer_depths(cfg, args):
    """ELMER's 6L-6L at base: the decoder as deep as the encoder unless told otherwise."""
    enc = args.enc_layers or elmer_depth(args.model, cfg.n_layers)
    return dataclasses.replace(cfg, n_layers=enc, n_dec_layers=args.dec_layers or enc)


def pmlm_record(name, paper):
    return Objective(name, paper, model=lambda cfg, args: UnifiedLM(cfg),
                     batch=lambda stream, ix, tok, args,
                     model: pmlm_batch(stream, ix, tok, args.losses, keep=args.keep),
                     loss=lambda args: pmlm_loss_sums, flags=("keep",) + (("losses",) if name == "pmlm" else ()))


OBJECTIVES = {o.name: o for o in (
    pmlm_record("pmlm", "UniLMv2's pseudo-masked LM: autoencoding and partially autoregressive losses (--losses)"),
    pmlm_record("mlm", "RoBERTa's masked LM, the PMLM with its autoencoding loss alone (UniLMv2 4.6)"),
    Objective("t5", "T5's span corruption, an autoregressive decoder",
              model=lambda cfg, args: EncoderDecoder(cfg),
              batch=lambda stream, ix, tok, args, model: t5_mod.t5_batch(stream, ix, tok),
              loss=lambda args: t5_mod.t5_loss_sums, flags=("enc_layers", "dec_layers"), encoder_decoder=True,
              span_corruption=True, corruption=2, shape=mlae_depths),
    Objective("t5-nar", "T5's span corruption with a non-autoregressive decoder and a length predictor (MLAE 4.4)",
              model=lambda cfg, args: NARModel(cfg, args.cross_rel_pos),
              batch=lambda stream, ix, tok, args, model: t5_nar_batch(stream, ix, tok),
              loss=lambda args: functools.partial(t5_nar_loss_sums, length_grad=args.length_grad),
              flags=("enc_layers", "dec_layers", "cross_rel_pos", "length_grad"), encoder_decoder=True,
              span_corruption=True, corruption=3, shape=mlae_depths),
    Objective("mlae", "MLAE's masked autoencoder: the encoder on the unmasked tokens, a light decoder (--decoder)",
              model=lambda cfg, args: MLAE(cfg, args.decoder, args.cross_rel_pos),
              batch=lambda stream, ix, tok, args, model: mlae_batch(stream, ix, tok),
              loss=lambda args: mlae_loss_sums, flags=("enc_layers", "dec_layers", "decoder", "cross_rel_pos"),
              encoder_decoder=True, corruption=2, shape=mlae_depths),
    Objective("elmer", "ELMER's layer permutation LM: every token's loss at a drawn exit layer, k draws "
                       "(--permutations)",
              model=lambda cfg, args: ELMER(cfg, dec_len=args.dec_len, separate_offramps=args.separate_offramps),
              batch=lambda stream, ix, tok, args, model: lplm_batch(stream, ix, tok, len(model.dec_layers),
                                                                    args.permutations),
              loss=lambda args: lplm_loss_sums,
              flags=("enc_layers", "dec_layers", "permutations", "dec_len", "separate_offramps"),
              encoder_decoder=True, corruption=2, shape=elmer_depths),
)}


def objective_of(kind):
    """The record of a pretraining checkpoint's kind ("pretrain/pmlm"), or None."""
    return OBJECTIVES.get(str(kind).split("/")[-1]) if str(kind).startswith("pretrain/") else None
