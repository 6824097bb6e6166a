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

import argparse
import dataclasses
import functools
from typing import Callable, NamedTuple

from . import t5 as t5_mod
from .config import depths
from .elmer.model import ELMER, elmer_depth, lplm_loss_sums
from .flags import AT_LEAST_1, DEC_LEN, Rule, declared, flag
from .elmer.lplm import lplm_batch
from .mlae.model import MLAE, VARIANTS, mlae_batch, mlae_loss_sums, variant_of
from .model import EncoderDecoder, UnifiedLM
from .mlae.nar import NARModel, t5_nar_batch, t5_nar_loss_sums
from .unilm.pmlm import KEEP, LOSSES, pmlm_batch, pmlm_loss_sums


class Objective(NamedTuple):
    name: str
    paper: str  # what it is, in the words of the paper it comes from
    model: Callable  # (cfg, args) -> a fresh nn.Module
    batch: Callable  # (stream, indices, tok, args, model) -> Batch
    loss: Callable  # (args) -> loss_sums(model, batch) -> dict of sums
    flags: tuple = ()  # the flags of train.py that apply to it, beyond the ones every run takes
    encoder_decoder: bool = False  # an encoder and a decoder: --enc-layers / --dec-layers apply
    span_corruption: bool = False  # T5's windows: sized so that the corrupted source fills --seq-len
    corruption: int = 1  # the version of its corruption, recorded in checkpoints (train.py notes a change)
    shape: Callable = lambda cfg, args: cfg  # (cfg, args) -> cfg with the objective's depths
    arch: Callable = None  # (checkpoint state) -> the architecture its checkpoints hold (core/architectures.py)
    framed: bool = False  # pretraining reads "[SOS] window [EOS]": window + 2 positions (MLAE's)
    nar_decoder: bool = False  # its decoder's targets have no [EOS] (T5-NAR's)
    options: Callable = lambda args: None  # (args) -> the model options its checkpoints record (ELMER's), or None
    fixes: dict = {}  # flags the objective sets itself (mlm is pmlm --losses ae)
    conditions: dict = {}  # flag -> (test of args, its words): a flag of `flags` that applies only then
    legacy: dict = {}  # flags added after its first checkpoints, at the values those trained with
    stale_positions: bool = False  # its older checkpoints recorded positions it never trained: use --seq-len
    add_flags: Callable = None  # (parser) -> None: the flags of train.py it declares (others of `flags` it shares)

    def window(self, seq_len):
        """Tokens per pretraining window: the PMLM's and MLAE's seq_len less [SOS] and two [EOS]; for
        T5 the window whose corrupted source is seq_len tokens long (core/t5.py window_for)."""
        return t5_mod.window_for(seq_len) if self.span_corruption else seq_len - 3

    def positions(self, seq_len):
        """The position ids (0..N-1) pretraining trains: one stack's {"total": seq_len}; MLAE's
        "[SOS] window [EOS]", one token shorter than seq_len; T5's {"encoder": .., "decoder": ..},
        the lengths span corruption makes of its windows (T5-NAR's decoder: the target without its
        [EOS])."""
        if self.framed:
            return dict(total=self.window(seq_len) + 2)
        if not self.span_corruption:
            return dict(total=seq_len)
        encoder, decoder = t5_mod.corrupted_lengths(self.window(seq_len))
        return dict(encoder=encoder, decoder=decoder - self.nar_decoder)


# -----------------------------------------------------------------------------
# the flags of train.py each objective declares, with their rules; an objective names in `flags`
# those it shares with the one that declares them

KEEP_SHARE = Rule(lambda v: 0 <= v <= 0.9, "a share of the masked tokens in [0, 0.9] (10% always go random)")


def pmlm_flags(p):
    flag(p, "--losses", default="ae+par", choices=LOSSES, help="PMLM ablations (UniLMv2 4.6)")
    flag(
        p,
        "--keep",
        rule=KEEP_SHARE,
        type=float,
        default=KEEP,
        help="pmlm, mlm: share of the masked tokens left as they are (UniLMv2 4.1: 80%% [MASK] / 10%% "
        "random / 10%% kept); 0 gives 90/10, which hides every target from the [P]s (equation 5)",
    )


def depth_flags(p):
    flag(
        p,
        "--enc-layers",
        rule=AT_LEAST_1,
        type=int,
        default=None,
        help="t5, t5-nar, mlae: encoder layers (default 2/4/12 at tiny/small/base); elmer: the preset's",
    )
    flag(
        p,
        "--dec-layers",
        rule=AT_LEAST_1,
        type=int,
        default=None,
        help="t5, t5-nar, mlae: decoder layers (default 1/2/4 at tiny/small/base, MLAE's); elmer: default "
        "as the encoder",
    )


def t5_nar_flags(p):
    flag(
        p,
        "--cross-rel-pos",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="mlae (b): relative position bias in the cross-attention ([MASK] vs latent position ids); "
        "t5-nar: the same, each target token's anchor being its span's sentinel's source position",
    )
    flag(
        p,
        "--length-grad",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="t5-nar: let the length predictor's loss reach the encoder (off: span corruption's target "
        "length depends on the window's length alone, and that gradient collapsed the encoder)",
    )


def mlae_flags(p):
    flag(
        p,
        "--decoder",
        default="b",
        choices=VARIANTS,
        help="mlae: (b) [MASK]s with cross-attention to the latents (the paper's choice for NAR, "
        "Table 6), (a) self-attention over latents + [MASK]s",
    )


def elmer_flags(p):
    flag(
        p,
        "--permutations",
        rule=AT_LEAST_1,
        type=int,
        default=10,
        help="elmer: exit-layer assignments per sequence (LPLM's k)",
    )
    flag(
        p,
        "--dec-len",
        rule=DEC_LEN,
        type=int,
        default=32,
        help="elmer: [MASK] tokens the decoder is fed when fine-tuned and generating",
    )
    flag(p, "--separate-offramps", action="store_true", help="elmer: one off-ramp per decoder layer, not shared")


# -----------------------------------------------------------------------------
# the records


def mlae_depths(cfg, args):
    """MLAE's depths (core/config.py DEPTHS), which every encoder-decoder it is compared with shares."""
    enc, dec = depths(args.model, args.enc_layers, args.dec_layers)
    return dataclasses.replace(cfg, n_layers=enc, n_dec_layers=dec)


def elmer_depths(cfg, args):
    """ELMER's 6L-6L at base: the decoder as deep as the encoder unless told otherwise."""
    enc = args.enc_layers or elmer_depth(args.model, cfg.n_layers)
    return dataclasses.replace(cfg, n_layers=enc, n_dec_layers=args.dec_layers or enc)


def pmlm_record(name, paper, flags, **fields):
    return Objective(
        name,
        paper,
        model=lambda cfg, args: UnifiedLM(cfg),
        batch=lambda stream, ix, tok, args, model: pmlm_batch(stream, ix, tok, args.losses, keep=args.keep),
        loss=lambda args: pmlm_loss_sums,
        flags=flags,
        arch=lambda state: "unilm",
        **fields,
    )


def elmer_model_options(args):
    """What fine-tuning and generation build an ELMER with: the [MASK]s its decoder is fed, its off-ramps."""
    return dict(dec_len=args.dec_len, separate_offramps=args.separate_offramps)


OBJECTIVES = {
    o.name: o
    for o in (
        pmlm_record(
            "pmlm",
            "UniLMv2's pseudo-masked LM: autoencoding and partially autoregressive losses (--losses)",
            ("keep", "losses"),
            add_flags=pmlm_flags,
        ),
        pmlm_record(
            "mlm",
            "RoBERTa's masked LM, the PMLM with its autoencoding loss alone (UniLMv2 4.6)",
            ("keep",),
            fixes=dict(losses="ae"),
            legacy=dict(keep=0.1),
        ),
        Objective(
            "t5",
            "T5's span corruption, an autoregressive decoder",
            model=lambda cfg, args: EncoderDecoder(cfg),
            batch=lambda stream, ix, tok, args, model: t5_mod.t5_batch(stream, ix, tok),
            loss=lambda args: t5_mod.t5_loss_sums,
            flags=("enc_layers", "dec_layers"),
            encoder_decoder=True,
            span_corruption=True,
            corruption=2,
            shape=mlae_depths,
            arch=lambda state: "t5",
            add_flags=depth_flags,
        ),
        Objective(
            "t5-nar",
            "T5's span corruption with a non-autoregressive decoder and a length predictor (MLAE 4.4)",
            model=lambda cfg, args: NARModel(cfg, args.cross_rel_pos),
            batch=lambda stream, ix, tok, args, model: t5_nar_batch(stream, ix, tok),
            loss=lambda args: functools.partial(t5_nar_loss_sums, length_grad=args.length_grad),
            flags=("enc_layers", "dec_layers", "cross_rel_pos", "length_grad"),
            encoder_decoder=True,
            span_corruption=True,
            corruption=3,
            shape=mlae_depths,
            arch=lambda state: "t5-nar",
            nar_decoder=True,
            add_flags=t5_nar_flags,
        ),
        Objective(
            "mlae",
            "MLAE's masked autoencoder: the encoder on the unmasked tokens, a light decoder (--decoder)",
            model=lambda cfg, args: MLAE(cfg, args.decoder, args.cross_rel_pos),
            batch=lambda stream, ix, tok, args, model: mlae_batch(stream, ix, tok),
            loss=lambda args: mlae_loss_sums,
            flags=("enc_layers", "dec_layers", "decoder", "cross_rel_pos"),
            encoder_decoder=True,
            corruption=2,
            shape=mlae_depths,
            arch=lambda state: "mlae-" + variant_of(state["model"]),
            framed=True,
            stale_positions=True,
            conditions=dict(cross_rel_pos=(lambda args: args.decoder == "b", "--decoder b")),
            add_flags=mlae_flags,
        ),
        Objective(
            "elmer",
            "ELMER's layer permutation LM: every token's loss at a drawn exit layer, k draws (--permutations)",
            model=lambda cfg, args: ELMER(cfg, dec_len=args.dec_len, separate_offramps=args.separate_offramps),
            batch=lambda stream, ix, tok, args, model: lplm_batch(
                stream, ix, tok, len(model.dec_layers), args.permutations
            ),
            loss=lambda args: lplm_loss_sums,
            flags=("enc_layers", "dec_layers", "permutations", "dec_len", "separate_offramps"),
            encoder_decoder=True,
            corruption=2,
            shape=elmer_depths,
            arch=lambda state: "elmer",
            options=elmer_model_options,
            add_flags=elmer_flags,
        ),
    )
}


def objective_of(kind):
    """The record of a pretraining checkpoint's kind ("pretrain/pmlm"), or None."""
    return OBJECTIVES.get(str(kind).split("/")[-1]) if str(kind).startswith("pretrain/") else None


def objective_flags(name):
    """(parser) -> None: the flags the objective declares, under a heading that names every objective
    they apply to."""

    def add(p):
        own = set(declared(OBJECTIVES[name].add_flags))
        users = [n for n, o in OBJECTIVES.items() if own & set(o.flags)]
        OBJECTIVES[name].add_flags(p.add_argument_group("--objective " + ", ".join(users)))

    return add


# what an objective's flag needs, said where a run of another objective is given it
NEEDS = dict(
    losses=" (mlm is pmlm --losses ae)",
    cross_rel_pos=" (the objectives with a cross-attention bias)",
    length_grad=" (the objective with a length predictor)",
)


def flag_table(args):
    """guards.refuse_unused's table: each flag an objective record names, whether it applies to this
    run (its `conditions` met), and the objectives it applies to."""
    table = {}
    for name in sorted({f for o in OBJECTIVES.values() for f in o.flags}):
        owners = [
            n + (" " + o.conditions[name][1] if name in o.conditions else "")
            for n, o in sorted(OBJECTIVES.items())
            if name in o.flags
        ]
        obj = OBJECTIVES[args.objective]
        applies = name in obj.flags and (name not in obj.conditions or obj.conditions[name][0](args))
        table[name] = (applies, "to --objective " + " or ".join(owners) + NEEDS.get(name, ""))
    return table
