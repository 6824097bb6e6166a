"""ELMER's exit measures: when a token leaves the decoder (core/elmer/exit_decode.py decodes with them).

Exit measures, each compared with a threshold after every decoder layer but the last:
  * entropy (the paper, ELMER 4.3 Eq. 10): exit when the off-ramp's entropy < threshold. It needs
    the vocabulary projection (C*V multiply-adds per token, V = 8000: more than a decoder layer at
    the `small` width) at every layer a token is still active, so on its own it saves no compute;
  * state (CALM, Schuster et al. 2022, "state propagation"): exit when the cosine similarity of
    h^l and h^(l-1) > threshold (the layer barely moved the token); C multiply-adds;
  * classifier (CALM's learnt early-exit classifier): exit when sigmoid(w_l . LN(h^l) + b_l) >
    threshold, a linear classifier per layer trained during fine-tuning to predict whether the
    off-ramp's argmax already equals the token's final one (its input is detached, so its loss
    leaves the LM alone); C multiply-adds.
With state or classifier the vocabulary projection runs once per token, at its exit layer (the
top for tokens that never exit), so an exit saves the layers and the off-ramps above it.
"""

import argparse
import math

import torch
import torch.nn.functional as F

import kernels
from ..errors import UserError

MEASURES = ("entropy", "state", "classifier")
# the paper's delta for entropy; for the cheap measures a value that a token exits under only
# once its state has settled (eval.py sweeps them)
DEFAULT_THRESHOLD = dict(entropy=0.5, state=0.99, classifier=0.9)
TRAIN_ENTROPY = 0.5  # hard-exit fine-tuning leaves by the paper's rule at its delta (ELMER 4.1, 4.3)


def check_threshold(measure, threshold, flag="--exit-threshold"):
    """The range of each measure's threshold; 'off' values are allowed (entropy 0, state /
    classifier 1: nobody exits early; entropy inf, state -1, classifier 0: everybody at layer 1)."""
    if measure not in MEASURES:
        raise UserError(f"--exit-measure {measure!r}: one of {', '.join(MEASURES)}")
    if threshold is None:
        return
    if math.isnan(threshold):
        raise UserError(f"{flag} nan: a number")
    ok = dict(entropy=threshold >= 0, state=-1 <= threshold <= 1, classifier=0 <= threshold <= 1)[measure]
    if not ok:
        what = dict(
            entropy="0 or more (an entropy in nats; inf: every token leaves at layer 1)",
            state="in [-1, 1] (a cosine similarity)",
            classifier="in [0, 1] (a probability)",
        )[measure]
        raise UserError(f"{flag} {threshold:g} with --exit-measure {measure}: must be {what}")


def disabled(measure, threshold):
    """No token can leave before the top: then no measure needs computing."""
    return (measure == "entropy" and threshold <= 0) or (measure != "entropy" and threshold >= 1)


def classifier_logit(model, l, h):  # (N, C) -> (N,), the exit classifier of layer l
    """On LN(h^l) with every LM tensor detached (the state and the LayerNorm's weights), so that
    the classifier's loss moves the classifier only."""
    ln, w, b = model.ln_dec, model.exit_clf.weight[l], model.exit_clf.bias[l]
    x = F.layer_norm(h.detach(), ln.normalized_shape, ln.weight.detach(), ln.bias.detach(), ln.eps)
    return x @ w + b


def cheap_exit(model, measure, threshold, l, idx, h, x_in):
    """The O(C) measures: (N,) bool, True where the token leaves after layer l. idx None: h holds
    every row of x_in (the masked layout, core/elmer/exit_pass.py)."""
    if measure == "state":
        prev = kernels.gather_rows(x_in, idx) if idx is not None and idx.numel() < x_in.shape[0] else x_in
        return F.cosine_similarity(h.float(), prev.float(), dim=-1) > threshold
    return torch.sigmoid(classifier_logit(model, l, h).float()) > threshold


def exit_flags(args):
    """(measure, threshold) of the --exit-measure / --exit-threshold / --exit-entropy flags, the
    last a shorthand for `--exit-measure entropy --exit-threshold X`; None where not given."""
    measure, threshold = args.exit_measure, args.exit_threshold
    if args.exit_entropy is not None:
        if measure not in (None, "entropy") or threshold is not None:
            raise UserError("--exit-entropy X is --exit-measure entropy --exit-threshold X: give one or the other")
        measure, threshold = "entropy", args.exit_entropy
    if threshold is not None:
        check_threshold(
            measure or "entropy", threshold, "--exit-entropy" if args.exit_entropy is not None else "--exit-threshold"
        )
    return measure, threshold


# -----------------------------------------------------------------------------
# eval.py's exit settings: the flags' sweep, resolved per checkpoint


def exit_settings(args):
    """[(measure, threshold)] of the exit flags (a comma-separated sweep), or [None]: the
    checkpoint's own. Checked here, whichever checkpoints are evaluated: the range of each
    threshold (eval.py notes the flags when no elmer checkpoint is among them)."""
    given = args.exit_measure is not None or args.exit_threshold is not None or args.exit_entropy is not None
    if not given:
        return [None]
    text = args.exit_entropy if args.exit_entropy is not None else args.exit_threshold
    flag = "--exit-entropy" if args.exit_entropy is not None else "--exit-threshold"
    try:
        values = [float(v) for v in text.split(",")] if text is not None else [None]
    except ValueError:
        raise UserError(f"{flag} {text}: a number, or comma-separated numbers")
    out = []
    for v in values:
        ns = argparse.Namespace(
            exit_measure=args.exit_measure,
            exit_threshold=None if args.exit_entropy is not None else v,
            exit_entropy=v if args.exit_entropy is not None else None,
        )
        measure, threshold = exit_flags(ns)
        if measure is not None:
            check_threshold(measure, threshold, flag)
        out.append((measure, threshold))  # a measure not given is the checkpoint's own (resolve_exit)
    return out


def resolve_exit(setting, state, path):
    """The (measure, threshold) an ELMER checkpoint is evaluated with: the flags' measure, else the
    one it was fine-tuned with; the flags' threshold, else that measure's (the checkpoint's own for
    its own measure). The learnt classifier needs the checkpoint to hold one."""
    if setting is None:
        return None
    own = dict(state.get("elmer") or {})
    own_measure = own.get("exit_measure", "entropy")
    measure, threshold = setting[0] or own_measure, setting[1]
    if threshold is None:
        threshold = own.get("exit_threshold") if measure == own_measure else None
        threshold = DEFAULT_THRESHOLD[measure] if threshold is None else threshold
    check_threshold(measure, threshold, "--exit-threshold")
    if measure == "classifier" and "exit_clf.weight" not in state["model"]:
        raise UserError(
            f"{path} holds no exit classifier (it was fine-tuned before the classifier was trained): "
            f"evaluate it with --exit-measure entropy or state"
        )
    return measure, threshold
