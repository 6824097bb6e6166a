"""One place per flag, and one frozen config per run: every flag of train.py, finetune.py and
eval.py is declared by exactly one record or shared set (each script's DECLARED_BY), with its rule
beside it; the config a run reads refuses assignment once resolved."""

import argparse

import pytest

from core.errors import UserError
from core.flags import RunConfig, declared, parser


@pytest.mark.parametrize("script", ["train", "finetune", "eval"])
def test_every_flag_is_declared_by_exactly_one_record_or_shared_set(script):
    module = __import__(script)
    owners = {}
    for who, add in module.DECLARED_BY.items():
        for dest in declared(add):
            if dest != "help":
                owners.setdefault(dest, []).append(who)
    twice = {dest: who for dest, who in owners.items() if len(who) > 1}
    assert not twice, f"{script}.py flags declared more than once: {twice}"
    dests = {a.dest for a in parser(module.DECLARED_BY, module.__doc__)._actions} - {"help"}
    assert dests == set(owners), f"{script}.py flags outside DECLARED_BY: {sorted(dests - set(owners))}"


def test_a_flag_declared_twice_is_caught():
    """What the walk catches: a record declaring a flag a shared set declares."""
    import train
    from core.objectives import OBJECTIVES

    record = next(o for o in OBJECTIVES.values() if o.add_flags)
    sets = dict(train.DECLARED_BY, again=lambda p: (record.add_flags(p), p.add_argument("--steps")))
    owners = {}
    for who, add in sets.items():
        for dest in declared(add):
            owners.setdefault(dest, []).append(who)
    assert owners["steps"] == ["train.py", "again"]


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--steps", "0"], "--steps 0 must be at least 1"),
        (["--objective", "elmer", "--dec-len", "1"], "--dec-len 1 must be at least 2"),
        (["--keep", "0.95"], "--keep 0.95 must be a share of the masked tokens in [0, 0.9]"),
        (["--seq-len", "4"], "--seq-len 4 must be at least 8"),
    ],
)
def test_each_rule_is_checked_where_its_flag_is_declared(argv, words):
    import train

    with pytest.raises(UserError, match=words.replace("[", r"\[").replace("]", r"\]")):
        train.get_args(argv)


@pytest.mark.parametrize("script,argv", [("train", ["--objective", "mlm"]), ("finetune", []), ("eval", ["ck"])])
def test_the_config_refuses_assignment(script, argv):
    args = __import__(script).get_args(argv)
    assert isinstance(args, RunConfig)
    with pytest.raises(AttributeError, match="frozen"):
        args.dtype = "float32"
    with pytest.raises(AttributeError, match="frozen"):
        del args.dtype
    resolved = args.resolved(dtype="float32")  # the values a run derives make another config, as frozen
    assert resolved.dtype == "float32" and args.dtype == "auto" and resolved.given == args.given
    with pytest.raises(AttributeError):
        resolved.dtype = "auto"


def test_the_config_is_what_the_objective_makes_of_the_flags():
    import train

    args = train.get_args(["--objective", "mlm"])
    assert args.losses == "ae" and args.given == {"objective"}  # mlm is pmlm --losses ae
    assert args.line().startswith("config: objective=mlm ")
    assert isinstance(vars(args), dict) and "given" not in vars(args)  # what checkpoints save


def test_a_rule_lives_on_the_declaration():
    from core.flags import AT_LEAST_1, flag, rules_of

    p = argparse.ArgumentParser()
    flag(p, "--n", rule=AT_LEAST_1, type=int, default=1)
    flag(p, "--free", default=None)
    assert rules_of(p) == {"n": AT_LEAST_1}
