"""reproduce/claims.py: each claim read pair by pair (every pair its chain claims, the controls
apart), and a verdict an earlier report measured read again with the seed term."""
import math

from reproduce import claims, plan
from reproduce.significance import seed_interval


def pair(a, b, verdict, control=False):
    return dict(a=a, b=b, verdict=verdict, control=control)


def test_a_claim_is_decided_by_the_papers_pairs_only():
    """A control's pair never vetoes the paper's claim; a pair further apart than a link does; a
    missing control leaves the claim measured, a missing run of the paper's does not."""
    held = [pair("a", "b", "holds"), pair("b", "c", "holds"), pair("a", "c", "holds")]
    assert claims.claim_verdict(held + [pair("c", "cls-scratch", "reversed", True)], []) == "holds"
    assert claims.claim_verdict(held[:2] + [pair("a", "c", "reversed")], []) == "reversed"
    assert claims.claim_verdict(held[:2] + [pair("a", "c", "not resolved")], []) == "not resolved"
    assert claims.claim_verdict(held, ["cls-scratch"]) == "holds"
    assert claims.claim_verdict(held[:1], ["c is stale"]) == "not measured (c is stale)"
    assert claims.claim_verdict([pair("a", "b", "reversed")], ["c"]) == "reversed (not measured: c)"


def test_every_pair_of_a_chain_and_the_controls():
    """a > b > c claims a > c too; >= on the way implies >=, a ~ implies nothing further; the
    controls are the two runs no paper has, each in the claim it completes."""
    assert plan.chain_pairs("a > b > c") == [("a", "b", ">", True), ("b", "c", ">", True), ("a", "c", ">", False)]
    assert plan.chain_pairs("a > b >= c")[-1] == ("a", "c", ">=", False)
    assert plan.chain_pairs("a > b ~ c") == [("a", "b", ">", True), ("b", "c", "~", True)]
    ending = {parse[-1] for parse in (plan.parse_chain(o[3])[0] for o in plan.ORDERINGS)}
    assert plan.CONTROLS <= ending
    assert [o[1] for o in plan.ORDERINGS if set(plan.parse_chain(o[3])[0]) & plan.CONTROLS] == [
        "MLAE encoder > MLM > T5 encoder (> no pretraining)", "MLAE > T5 (AR) (> no pretraining)"]


def test_an_archived_pair_is_read_again_with_the_seed_term():
    """A recorded pair of one seed a side: its example SE is the recorded interval's; the seed term
    is added to it; a pair not recorded (a - c) is bounded by its links' SEs; what was recorded is
    kept beside it, with the commit and date."""
    rec = dict(metric="accuracy", chain="x > y > z", values={"x": 70.0, "y": 66.0, "z": 64.0},
               seeds={"x": ["x"], "y": ["y"], "z": ["z"]}, here="x 70.00 > y 66.00 > z 64.00", verdict="holds",
               commit="abc1234", written="2026-11-28 19:46", source="results.json",
               runs={"x": dict(accuracy=70.0), "y": dict(accuracy=66.0), "z": dict(accuracy=64.0)},
               pairs=[dict(a="x", b="y", op=">", difference=4.0, low=2.04, high=5.96, verdict="holds"),
                      dict(a="y", b="z", op=">", difference=2.0, low=1.02, high=2.98, verdict="holds")])
    spread = {"accuracy": dict(sigma=1.0, dof=8, runs=[])}
    o = claims.archived_ordering(rec, spread)
    xy, yz, xz = o["pairs"]
    assert math.isclose(xy["se"], 1.0) and math.isclose(yz["se"], 0.5)
    assert (xy["low"], xy["high"]) == seed_interval(4.0, 1.0, 1.0, 1, 1)
    assert xy["recorded"] == dict(low=2.04, high=5.96, verdict="holds") and xy["verdict"] == "holds"
    assert yz["verdict"] == "not resolved" and "detectable" in yz  # 2 +- 1.96 sqrt(0.25 + 2)
    assert xz["se_bound"] and math.isclose(xz["se"], 1.5) and "recorded" not in xz
    assert o["verdict"] == "not resolved" and o["archived"] == dict(commit="abc1234", written="2026-11-28 19:46",
                                                                      source="results.json", verdict="holds")
    assert "recorded [+2.04, +5.96], holds" in claims.pair_text(xy) and "bounded" in claims.pair_text(xz)
