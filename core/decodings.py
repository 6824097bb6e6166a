"""The ways a fine-tuned summarizer decodes, one record each, looked up by the name its architecture
gives (core/architectures.py, `decode`): autoregressive greedy or beam search (core/decoding.py,
at fixed shapes core/static_beam.py), Mask-Predict for a CMLM (core/mlae/mask_predict.py), and ELMER's
one pass with early exit (core/elmer/exit_decode.py). A record owns its generate call, the flags of
eval.py that shape it (declared here, beside it), the settings each evaluated row decodes with,
its name in eval.py's table and the fields it adds to a row, so that core/generation.py and eval.py
name no way of decoding.

    kind = decoding_of(arch)
    for gen in kind.settings(args, state, path):    # one row each (ELMER: one per exit threshold)
        ids, scores = kind.generate(model, arch, src_ids, tok, stats, **gen)
        row = dict(decoding=kind.label(gen), **kind.report(model, arch, gen, stats, path))

stats is the caller's dict, None where nothing is to be measured: the decodings of a row put their
measurements there (Mask-Predict its model calls, ELMER its exit_decode.ExitTrace), never on the model.
eval.py takes each checkpoint's settings from decoding_plans, once every decoding flag is checked
against the checkpoints it evaluates.
"""

import argparse
import inspect
import sys
from typing import Callable, NamedTuple

import torch

from . import decoding, t5
from .elmer import exit_decode
from .mlae import mask_predict
from .unilm import seq2seq
from .decoding import LENGTH_NORMS
from .architectures import ARCHS, seq2seq_ops
from .elmer.exit_decode import ExitTrace, entropy_quantiles, exit_statistics, merge_words
from .elmer.exit_measures import MEASURES, exit_settings, resolve_exit
from .errors import UserError
from .flags import AT_LEAST_0, AT_LEAST_1, flag
from .guards import check_positions, refuse_unused
from .static_beam import static_beam_t5
from .unilm.static_beam import static_beam_pmlm

# a fine-tuning that recorded no --max-tgt ran at its default
MAX_TGT = 24


class Decoding(NamedTuple):
    name: str  # what an architecture's `decode` calls it
    title: str  # the heading of its flags in eval.py --help
    needs: str  # where its flags apply, in guards.refuse_unused's words
    add_flags: Callable  # (argparse parser or group) -> None: eval.py's flags of this decoding
    settings: Callable  # (args, state, path) -> [generate's settings of each row]: the flags, else the fine-tuning's
    generate: Callable  # (model, arch, src_ids, tok, stats, **settings) -> (id lists, (B,) scores)
    label: Callable  # (settings) -> its name in eval.py's table
    report: Callable  # (model, arch, settings, stats, path) -> the fields it adds to a row
    clean: Callable = lambda text: text  # a decoded text as the output
    bounded: bool = True  # --max-len bounds it (ELMER's length is the --dec-len it was fine-tuned with)
    strict: tuple = ()  # its flags refused (not noted) where no checkpoint decodes this way
    check_flags: Callable = lambda args: None  # (args) -> None: its flags checked together, whatever is evaluated

    @property
    def flags(self):
        """The dests of its flags, read off add_flags."""
        p = argparse.ArgumentParser(add_help=False)
        self.add_flags(p)
        return tuple(a.dest for a in p._actions)

    def take(self, gen):
        """generate's keyword settings out of gen, defaults for those not there; another way's
        settings are dropped (one call serves every architecture), a name no way knows is refused."""
        unknown = set(gen) - {k for d in DECODINGS.values() for k in keywords(d.generate)}
        if unknown:
            raise TypeError(f"no decoding takes {', '.join(sorted(unknown))}")
        return {k: gen.get(k, default) for k, default in keywords(self.generate).items()}


def keywords(fn):
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.kind == p.KEYWORD_ONLY}


def decoding_of(arch):
    return DECODINGS[ARCHS[arch].decode]


def max_len_of(args, state, path):
    """--max-len, else the longest target the fine-tuning trained; a warning past it."""
    fa = state["args"]
    max_len = args.max_len or fa.get("max_tgt", MAX_TGT)
    if max_len > fa.get("max_tgt", max_len):
        print(
            f"warning: --max-len {max_len} generates past the {fa['max_tgt']} target positions {path} was "
            f"fine-tuned on (its --max-tgt)",
            file=sys.stderr,
        )
    return max_len


# -----------------------------------------------------------------------------
# autoregressive: greedy or beam search over the architecture's step decoder

# the step decoders that have a beam search at fixed shapes (core/static_beam.py, core/unilm/static_beam.py:
# the same tokens)
STATIC_BEAMS = {t5.T5Decoder: static_beam_t5, seq2seq.PMLMDecoder: static_beam_pmlm}
SEARCHES = ("auto", "eager", "static")


def static_search(model, decoder, beam, search, use_cache=True):
    """The fixed-shape beam search to run, or None for core/decoding.beam_search: `static` where the
    step decoder has one, `auto` only on CUDA, where its steps replay as CUDA graphs (on the CPU the
    same steps run eagerly and gain nothing)."""
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {SEARCHES}, not {search!r}")
    fn = STATIC_BEAMS.get(decoder)
    on_cuda = next(model.parameters()).is_cuda
    if beam == 1 or not use_cache or fn is None or search == "eager" or (search == "auto" and not on_cuda):
        return None
    return fn


def ar_flags(p):
    flag(p, "--beam", rule=AT_LEAST_1, type=int, default=5, help="beam size (UniLMv2 Table 10, XSum: 5)")
    flag(p, "--min-len", rule=AT_LEAST_0, type=int, default=1)
    flag(
        p,
        "--length-penalty",
        type=float,
        default=0.6,
        help="alpha: a beam's score is its log-probability / lp(len) (UniLMv2 Table 10, XSum: 0.6)",
    )
    flag(
        p,
        "--length-norm",
        default="wu",
        choices=LENGTH_NORMS,
        help="lp(len): wu = ((5 + len) / 6) ** alpha (Wu et al. 2016, UniLMv2's decoding), "
        "pow = len ** alpha (fairseq)",
    )
    flag(p, "--no-repeat-ngram", rule=AT_LEAST_0, type=int, default=3)
    flag(
        p,
        "--search",
        default="auto",
        choices=SEARCHES,
        help="beam search at fixed shapes, its steps replayed as CUDA graphs (static: T5's and "
        "UniLMv2's decoders, core/static_beam.py and core/unilm/static_beam.py), or with shapes that "
        "shrink as sources finish (eager, core/decoding.py); the same tokens; auto: static on CUDA, "
        "eager on the CPU",
    )


def ar_settings(args, state, path):
    return [
        dict(
            beam=args.beam,
            max_len=max_len_of(args, state, path),
            min_len=args.min_len,
            length_penalty=args.length_penalty,
            length_norm=args.length_norm,
            no_repeat_ngram=args.no_repeat_ngram,
            search=args.search,
        )
    ]


def ar_generate(
    model,
    arch,
    src_ids,
    tok,
    stats,
    *,
    beam=1,
    max_len=32,
    min_len=1,
    length_penalty=0.6,
    length_norm="wu",
    no_repeat_ngram=0,
    search="auto",
    use_cache=True,
):
    step_decoder = seq2seq_ops(arch, sos=model.cfg.enc_sos).decoder
    fixed = static_search(model, step_decoder, beam, search, use_cache)
    if fixed is not None:
        return fixed(model, src_ids, tok, beam, max_len, min_len, length_penalty, length_norm, no_repeat_ngram)
    decoder = step_decoder(model, src_ids, tok, use_cache=use_cache)
    if beam == 1:
        return decoding.greedy(decoder, max_len, min_len, tok.eos_id, no_repeat_ngram)
    return decoding.beam_search(
        decoder, beam, max_len, min_len, length_penalty, tok.eos_id, no_repeat_ngram, length_norm
    )


def ar_report(model, arch, gen, stats, path):
    """Which beam search ran, by its function's name."""
    if gen["beam"] == 1:
        return dict(iterations="-")
    fixed = static_search(model, seq2seq_ops(arch, sos=model.cfg.enc_sos).decoder, gen["beam"], gen["search"])
    return dict(search=fixed.__name__ if fixed else "beam_search", iterations="-")


# -----------------------------------------------------------------------------
# Mask-Predict (a CMLM): length candidates, then passes that re-mask the least confident tokens


def nar_flags(p):
    flag(
        p,
        "--length-beam",
        rule=AT_LEAST_1,
        type=int,
        default=None,
        help="length candidates (default: the fine-tuning's)",
    )
    flag(
        p,
        "--iterations",
        rule=AT_LEAST_1,
        type=int,
        default=None,
        help="Mask-Predict iterations (default: the fine-tuning's)",
    )
    flag(
        p,
        "--adaptive-stop",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="stop a candidate once its masked state repeats (fairseq's behaviour), or run every "
        "iteration (--no-adaptive-stop, as published; default: the fine-tuning's)",
    )


def nar_settings(args, state, path):
    fa = state["args"]
    return [
        dict(
            max_len=max_len_of(args, state, path),
            length_beam=args.length_beam or fa.get("length_beam", 3),
            iterations=args.iterations or fa.get("iterations", 10),
            adaptive_stop=fa.get("adaptive_stop", False) if args.adaptive_stop is None else args.adaptive_stop,
        )
    ]


def nar_generate(model, arch, src_ids, tok, stats, *, max_len=32, length_beam=3, iterations=10, adaptive_stop=False):
    """max_len - 1 tokens at most, the budget an AR model spends one of on [EOS]; stats accumulates
    the model calls its outputs took ("iterations") and their count ("n")."""
    out, det = mask_predict.mask_predict(
        mask_predict.NARDecoder(model, src_ids, tok),
        tok.mask_id,
        length_beam,
        iterations,
        max(1, max_len - 1),
        tok.pad_id,
        tok.eos_id,
        return_details=True,
        adaptive_stop=adaptive_stop,
    )
    if stats is not None:
        stats["iterations"] = stats.get("iterations", 0) + int(det["iterations"].sum())
        stats["n"] = stats.get("n", 0) + len(out)
    return out, det["score"]


def nar_report(model, arch, gen, stats, path):
    """The mean iterations used (fewer than the budget under --adaptive-stop) / the budget."""
    return dict(iterations=f"{stats['iterations'] / stats['n']:.1f} / {gen['iterations']}" if stats else "-")


# -----------------------------------------------------------------------------
# ELMER: one NAR pass, each token leaving the decoder at the layer its exit measure says


def elmer_flags(p):
    flag(
        p,
        "--exit-measure",
        default=None,
        choices=MEASURES,
        help="the exit measure (default: the checkpoint's): off-ramp entropy (the paper), cosine of "
        "h^l and h^(l-1) (state) or the learnt exit classifier (classifier); core/elmer/exit_measures.py",
    )
    flag(
        p,
        "--exit-threshold",
        default=None,
        help="the measure's threshold, or several comma-separated (a sweep: one row and one "
        "result file each); entropy 0 / state 1 / classifier 1 never exit early",
    )
    flag(
        p,
        "--exit-entropy",
        default=None,
        help="shorthand for --exit-measure entropy --exit-threshold X (0 never exits early, inf at layer 1)",
    )


def elmer_settings(args, state, path):
    """One row per threshold of a sweep; exit_rule None: the checkpoint's own."""
    return [dict(exit_rule=resolve_exit(e, state, path)) for e in exit_settings(args)]


def elmer_generate(model, arch, src_ids, tok, stats, *, exit_rule=None):
    """stats, where the caller keeps one, holds the decodings' ExitTrace ("exit")."""
    measure, threshold = exit_rule or (None, None)
    trace = None if stats is None else stats.setdefault("exit", ExitTrace(len(model.dec_layers)))
    out = exit_decode.generate(model, src_ids, tok, delta=threshold, measure=measure, trace=trace)
    return out, torch.zeros(len(out))


def elmer_report(model, arch, gen, stats, path):
    """The paper's Figure 2: where the output tokens left the decoder; the decoder's multiply-adds
    against exit disabled; and the off-ramp entropies behind an entropy exit (where the vocabulary
    projection ran): the median and the 5th percentile per layer, "-" where a layer computed none."""
    measure, threshold = gen["exit_rule"] or (model.exit_measure, model.exit_threshold)
    trace = (stats or {}).get("exit") or ExitTrace(len(model.dec_layers))
    mean, frac = exit_statistics(trace.counts)
    row = dict(
        iterations="-",
        exit_measure=measure,
        exit_threshold=threshold,
        mean_exit=mean,
        exit_frac="/".join(f"{f:.2f}" for f in frac),
        dec_flops=trace.work["macs"] / max(1, trace.work["macs_off"]),
    )
    for name, q in (("entropy_p50", 0.5), ("entropy_p5", 0.05)):
        row[name] = "/".join("-" if v is None else f"{v:.2f}" for v in entropy_quantiles(trace.entropies, q))
    if measure == "entropy" and threshold > 0 and frac[-1] == 1.0:
        print(
            f"note: no output token of {path} left before the top at entropy < {threshold:g}: its off-ramp "
            f"entropies per layer, median {row['entropy_p50']}, 5th percentile {row['entropy_p5']} nats",
            file=sys.stderr,
        )
    return row


DECODINGS = {
    d.name: d
    for d in (
        Decoding(
            "ar",
            "autoregressive decoding (unilm, t5, mlae, roberta-s2s checkpoints)",
            "to an autoregressive summarization checkpoint",
            ar_flags,
            ar_settings,
            ar_generate,
            lambda gen: "greedy" if gen["beam"] == 1 else f"beam {gen['beam']}",
            ar_report,
        ),
        Decoding(
            "nar",
            "Mask-Predict (NAR checkpoints, finetune.py --nar)",
            "to a NAR (--nar) checkpoint",
            nar_flags,
            nar_settings,
            nar_generate,
            lambda gen: f"mask-predict, {gen['length_beam']} lengths",
            nar_report,
            strict=("adaptive_stop",),
        ),
        Decoding(
            "elmer",
            "early exit (elmer checkpoints)",
            "to an elmer checkpoint",
            elmer_flags,
            elmer_settings,
            elmer_generate,
            lambda gen: "one pass, early exit",
            elmer_report,
            clean=merge_words,
            bounded=False,
            check_flags=exit_settings,
        ),
    )
}


# -----------------------------------------------------------------------------
# eval.py's decoding flags, against the checkpoints it evaluates


def decoding_plans(args, cks, also=None):
    """Per checkpoint of cks (core/checkpoint.py's Finetuned; by path), the decoding settings of
    each of its rows (ELMER's one per exit threshold of a sweep; a classifier's one row decodes
    nothing), once every decoding flag is checked against them: one that applies to none of the
    checkpoints is named (eval.py changes no model and each row records the decoding it used: a
    note, unless its decoding says so), and every length fits the positions of each model.
    also: more of refuse_unused's table."""
    for kind in DECODINGS.values():
        kind.check_flags(args)
    summarizers = [ck for ck in cks if ck.task == "summarize"]
    used = {decoding_of(ck.arch).name for ck in summarizers}
    applies = {
        flag: (kind.name in used, kind.needs, flag not in kind.strict)
        for kind in DECODINGS.values()
        for flag in kind.flags
    }
    applies["max_len"] = (
        any(DECODINGS[name].bounded for name in used),
        "to summarization checkpoints other than elmer (whose length is its --dec-len)",
        True,
    )
    refuse_unused(args, dict(applies, **(also or {})), notes_to=sys.stderr)
    for ck in summarizers:
        if not decoding_of(ck.arch).bounded:
            continue
        path, fa, room = ck.path, ck.state["args"], ck.cfg.max_positions
        max_tgt = fa.get("max_tgt", MAX_TGT)
        if args.max_len is None and args.min_len > max_tgt:
            raise UserError(
                f"--min-len {args.min_len} is above {path}'s --max-tgt {max_tgt}, the default --max-len: "
                f"give --max-len too"
            )
        max_len = args.max_len or max_tgt
        if ARCHS[ck.arch].one_table:  # source and target share one position table
            check_positions(
                f"{path}: its --max-src {fa['max_src']} + --max-len {max_len}",
                fa["max_src"] + max_len,
                room,
                f"use --max-len <= {room - fa['max_src']}",
            )
        else:
            check_positions(f"{path}: --max-len {max_len}", max_len, room, f"use --max-len <= {room}")
    return {
        ck.path: decoding_of(ck.arch).settings(args, ck.state, ck.path) if ck.task == "summarize" else [{}]
        for ck in cks
    }
