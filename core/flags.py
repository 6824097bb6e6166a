"""The flags of train.py, finetune.py and eval.py: each declared once, by the record it belongs to
(an objective, an architecture's fine-tuning, a way of decoding) or by the set a script shares,
with the rule its value must meet and, where it applies to some runs only, the runs it applies to;
and the run's config, resolved once after parsing and frozen.

    flag(p, "--steps", rule=AT_LEAST_1, type=int, default=400)   # argparse's add_argument, and its rule
    flag(p, "--iterations", applies=NAR, type=int)               # a flag of some runs only: which
    p = parser(DECLARED_BY, __doc__)        # a script's parser: the flags of each who declares some
    args = guards.parse_args(p, argv)       # every value checked against its flag's rule: a RunConfig
    config = args.resolved(steps=...)       # values the run derives (from a checkpoint, the data): another

A RunConfig refuses assignment: what a run reads, what its checkpoint saves (vars(config), the
"args" of every checkpoint) and what it prints first are one object.
"""

import argparse
import types
from typing import Callable, NamedTuple


class Rule(NamedTuple):
    test: Callable  # value -> whether it is allowed
    what: str  # what the value must be, in an error's words
    infinite: bool = False  # a float flag that may be infinite (every other must be a finite number)


AT_LEAST_1 = Rule(lambda v: v >= 1, "at least 1")
AT_LEAST_0 = Rule(lambda v: v >= 0, "0 or more")
ABOVE_0 = Rule(lambda v: v > 0, "above 0")
FRACTION = Rule(lambda v: 0 <= v < 1, "in [0, 1)")
# numpy's generators take seeds below 2**32; torch's manual_seed, below 2**64
SEED = Rule(lambda v: 0 <= v < 2**32, "in [0, 2**32)")
# SentencePiece keeps piece ids in 32-bit ints; a vocabulary this large is never sensible
VOCAB_SIZE = Rule(lambda v: v <= 1 << 20, "at most 1048576")
DEC_LEN = Rule(lambda v: v >= 2, "at least 2 (one token and its [EOS])")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help keeps the script's docstring as written and ends each flag's line with its default
    (none for switches and for defaults resolved later, from a checkpoint or the architecture)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "%(default)" in text or not action.option_strings:
            return text
        return text + (" " if text else "") + "(default: %(default)s)"


def parser(declared_by, description):
    """A script's parser: the flags of every declaring function (parser -> None) of declared_by, the
    script's DECLARED_BY (who -> function), under its docstring."""
    p = argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)
    for add in declared_by.values():
        add(p)
    return p


class Applies(NamedTuple):
    """The runs a flag of finetune.py has an effect on, declared with it: given to another run,
    guards.refuse_unused refuses it (or notes it, where harmless); a flag declared without one applies
    to every run. (train.py's objective records name the flags that apply to them.)"""

    test: Callable  # (config, what else the script knows of the run) -> whether the run uses the flag
    where: str  # where it applies, in refuse_unused's words: "to --task summarize"
    harmless: bool = False  # it changes nothing the run means: a `note:` line, and the run goes on


def flag(p, *names, rule=None, applies=None, **kwargs):
    """p.add_argument(*names, **kwargs), the flag's rule (guards.parse_args checks it) and the runs it
    applies to kept on its action."""
    action = p.add_argument(*names, **kwargs)
    action.rule, action.applies = rule, applies
    return action


def rules_of(p):
    """dest -> Rule of every flag of the parser that has one."""
    return {a.dest: a.rule for a in p._actions if getattr(a, "rule", None) is not None}


def applicability(p):
    """dest -> Applies of every flag of the parser that applies to some runs only."""
    return {a.dest: a.applies for a in p._actions if getattr(a, "applies", None) is not None}


def declared(add):
    """The dests of the flags a declaring function (parser -> None) adds."""
    return tuple(defaults(add))


def defaults(add):
    """dest -> default of the flags a declaring function (parser -> None) adds, in their order."""
    p = argparse.ArgumentParser(add_help=False)
    add(p)
    return {a.dest: a.default for a in p._actions}


def always_applies(add):
    """The dests of the flags a declaring function adds with no Applies: those every run uses."""
    p = argparse.ArgumentParser(add_help=False)
    add(p)
    return tuple(a.dest for a in p._actions if getattr(a, "applies", None) is None)


class RunConfig(types.SimpleNamespace):
    """A run's flags as it reads them, frozen: assignment raises. `given` holds the flags the command
    line gave (kept out of vars(), and so out of checkpoints and config.json)."""

    __slots__ = ("given",)

    def __init__(self, given=(), **values):
        super().__init__(**values)
        object.__setattr__(self, "given", frozenset(given))

    def __setattr__(self, name, value):
        raise AttributeError(
            f"the run's config is frozen once resolved: {name} cannot be set (resolve it in RunConfig.resolved)"
        )

    def __delattr__(self, name):
        raise AttributeError(f"the run's config is frozen once resolved: {name} cannot be removed")

    def resolved(self, **values):
        """Another RunConfig: this one with the values the run derives."""
        return RunConfig(self.given, **dict(vars(self), **values))

    def line(self):
        """The config as printed at the start of a run: every flag=value, in the parser's order."""
        return "config: " + " ".join(f"{k}={v}" for k, v in vars(self).items())
