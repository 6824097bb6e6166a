"""reproduce/claims.py: each claim read pair by pair (every pair its chain claims, the controls
apart), the seed spread pooled and stated, and the verdicts an archive keeps when the outputs
behind them are gone, read from the committed archive of the cpu budget."""

import json
import math
import os
import re
import shutil

from conftest import ROOT

from reproduce import claims, orderings
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
    assert orderings.chain_pairs("a > b > c") == [("a", "b", ">", True), ("b", "c", ">", True), ("a", "c", ">", False)]
    assert orderings.chain_pairs("a > b >= c")[-1] == ("a", "c", ">=", False)
    assert orderings.chain_pairs("a > b ~ c") == [("a", "b", ">", True), ("b", "c", "~", True)]
    ending = {parse[-1] for parse in (orderings.parse_chain(o[3])[0] for o in orderings.ORDERINGS)}
    assert orderings.CONTROLS <= ending
    assert [o[1] for o in orderings.ORDERINGS if set(orderings.parse_chain(o[3])[0]) & orderings.CONTROLS] == [
        "MLAE encoder > MLM > T5 encoder (> no pretraining)",
        "MLAE > T5 (AR) (> no pretraining)",
    ]


def test_an_archived_pair_is_read_again_with_the_seed_term():
    """A recorded pair of one seed a side: its example SE is the recorded interval's; the seed term
    is added to it; a pair not recorded (a - c) is bounded by its links' SEs; what was recorded is
    kept beside it, with the commit and date."""
    rec = dict(
        metric="accuracy",
        chain="x > y > z",
        values={"x": 70.0, "y": 66.0, "z": 64.0},
        seeds={"x": ["x"], "y": ["y"], "z": ["z"]},
        here="x 70.00 > y 66.00 > z 64.00",
        verdict="holds",
        commit="abc1234",
        written="2026-11-28 19:46",
        source="results.json",
        runs={"x": dict(accuracy=70.0), "y": dict(accuracy=66.0), "z": dict(accuracy=64.0)},
        pairs=[
            dict(a="x", b="y", op=">", difference=4.0, low=2.04, high=5.96, verdict="holds"),
            dict(a="y", b="z", op=">", difference=2.0, low=1.02, high=2.98, verdict="holds"),
        ],
    )
    spread = {"accuracy": dict(sigma=1.0, dof=8, runs=[])}
    o = claims.archived_ordering(rec, spread)
    xy, yz, xz = o["pairs"]
    assert math.isclose(xy["se"], 1.0) and math.isclose(yz["se"], 0.5)
    assert (xy["low"], xy["high"]) == seed_interval(4.0, 1.0, 1.0, 1, 1)
    assert xy["recorded"] == dict(low=2.04, high=5.96, verdict="holds") and xy["verdict"] == "holds"
    assert yz["verdict"] == "not resolved" and "detectable" in yz  # 2 +- 1.96 sqrt(0.25 + 2)
    assert xz["se_bound"] and math.isclose(xz["se"], 1.5) and "recorded" not in xz
    assert o["verdict"] == "not resolved" and o["archived"] == dict(
        commit="abc1234", written="2026-11-28 19:46", source="results.json", verdict="holds"
    )
    assert "recorded [+2.04, +5.96], holds" in claims.pair_text(xy) and "bounded" in claims.pair_text(xz)


def test_the_committed_archive_keeps_its_verdicts(tmp_path, capsys):
    """The cpu budget's archive restored into an empty OUT: every claim it keeps a verdict of is
    measured here or shown archived with its commit and date, never 'not measured'; claim 2 reads
    the archived runs' outputs, with the seed term of the pooled accuracy spread; the spread names
    its runs; the summary counts the 22 and names the pairs that hold; a claim OUT measures itself
    is OUT's; the OUT archives its verdicts.json back as it came."""
    from reproduce import archive
    from reproduce import runner as reproduce

    src, out = os.path.join(ROOT, "results", "cpu-budget", "archive"), str(tmp_path / "out")
    assert archive.main(["restore", src, out, "--no-weights"]) == 0
    with open(os.path.join(out, claims.VERDICTS_FILE)) as f:
        kept = json.load(f)["claims"]
    assert kept and all(k["commit"] and k["written"] for k in kept)
    # a verdict kept of a claim OUT can measure is not used: OUT's own reading is
    numbers = {(o[3], o[2]): i + 1 for i, o in enumerate(orderings.ORDERINGS)}
    first = next(k for k in kept if numbers[(k["chain"], k["metric"])] == 1)
    with open(os.path.join(out, claims.VERDICTS_FILE), "w") as f:
        json.dump(dict(claims=kept + [dict(first, chain="cls-pmlm > cls-mlm", metric="accuracy")]), f)
    assert reproduce.main(["--budget", "cpu", "--out", out, "--report-only"]) == 0
    with open(os.path.join(out, "results.json")) as f:
        d = json.load(f)
    read = {o["number"]: o for o in d["orderings"]}
    for k in kept:
        o = read[numbers[(k["chain"], k["metric"])]]
        assert not o["verdict"].startswith("not measured"), o["claim"]
        assert "archived" not in o or (o["archived"]["commit"], o["archived"]["written"]) == (k["commit"], k["written"])
    two = read[2]
    assert "archived" not in two and two["seeds"] == {
        "cls-pmlm": ["cls-pmlm"],
        "cls-mlm": ["cls-mlm", "cls-mlm-s2", "cls-mlm-s3"],
    }
    sigma = d["seed_spread"]["accuracy"]["sigma"]
    (p,) = two["pairs"]
    assert p["sigma"] == sigma and (p["low"], p["high"]) == seed_interval(p["difference"], p["se"], sigma, 1, 3)
    sources = {(r["run"], r["source"]) for r in d["seed_spread"]["accuracy"]["runs"]}
    assert ("cls-mlm", "here") in sources and any(s.startswith("archived ") for _, s in sources)
    counts = d["summary"]
    assert sum(counts[v] for v in ("holds", "reversed", "not resolved", "not measured")) == counts["total"] == 22
    assert re.match(rf"{counts['holds']} of 22 claims hold here; {counts['reversed']} reversed, ", counts["sentence"])
    for o in d["orderings"]:  # the pairs that hold are named, a control's said to be one
        for q in o["pairs"] + o["controls"]:
            assert (q["verdict"] == "holds") == (f"{q['a']} {q['op']} {q['b']} (" in counts["sentence"])
            assert q["control"] == (q in o["controls"]) == bool({q["a"], q["b"]} & orderings.CONTROLS)
            assert q["verdict"] != "not resolved" or "detectable" in q
    with open(os.path.join(out, "RESULTS.md")) as f:
        md = f.read()
    assert f"accuracy **{sigma:.2f}** (" in md and "recorded as" in md
    saved = str(tmp_path / "again")
    shutil.copytree(src, saved)
    os.remove(os.path.join(saved, claims.VERDICTS_FILE))
    assert archive.main(["save", out, saved]) == 0
    with (
        open(os.path.join(out, claims.VERDICTS_FILE), "rb") as a,
        open(os.path.join(saved, claims.VERDICTS_FILE), "rb") as b,
    ):
        assert a.read() == b.read()


def test_the_archived_verdicts_are_drawn_from_the_committed_report(tmp_path, monkeypatch):
    """results/cpu-budget/archive/verdicts.json already holds what `python -m reproduce.archive verdicts`
    draws from the committed results.json (drawing it again changes no byte): the claims that report
    measured, each with its commit, date and its runs' metrics per seed, and the claims it carried as
    archived, as the archive recorded them."""
    from reproduce import archive

    monkeypatch.chdir(ROOT)
    results = os.path.join("results", "cpu-budget", "results.json")
    with open(os.path.join(ROOT, "results", "cpu-budget", "archive", claims.VERDICTS_FILE), "rb") as f:
        committed = f.read()
    (tmp_path / claims.VERDICTS_FILE).write_bytes(committed)
    assert archive.main(["verdicts", results, str(tmp_path)]) == 0
    assert (tmp_path / claims.VERDICTS_FILE).read_bytes() == committed
    with open(results) as f:
        measured = [o for o in json.load(f)["orderings"] if not o["verdict"].startswith("not measured")]
    kept = json.loads(committed)["claims"]
    # an archived claim is kept with the verdict recorded when it was measured (the report reads its
    # pairs again with the seed term beside it)
    assert [(k["chain"], k["verdict"]) for k in kept] == [
        (o["chain"], o.get("archived", o)["verdict"]) for o in measured
    ]
    assert all(set(k["runs"]) == {s for names in k["seeds"].values() for s in names} for k in kept)


def test_a_pair_whose_sides_trained_in_other_dtypes_says_so():
    """Not one recipe on both sides: where a side's fine-tuning, or the pretraining under it, trained
    in another compute dtype than the other side's (runs of machines with and without bf16), the pair
    names them; a run from no pretraining against a pretrained one is not such a pair."""
    resolved = {
        "elmer-hard": ([], ["pre-elmer"]),
        "sum-mlae-none": ([], ["pre-mlae-a"]),
        "elmer-hard-scratch": ([], []),
    }
    metrics = {
        n: {"latency_ms": ms} for n, ms in (("elmer-hard", 5.0), ("sum-mlae-none", 50.0), ("elmer-hard-scratch", 6.0))
    }
    runs = {n: dict(dtype="float32") for n in ("elmer-hard", "pre-elmer", "sum-mlae-none", "elmer-hard-scratch")}
    runs["pre-mlae-a"] = dict(dtype="bfloat16")

    def pair(chain):
        (p,) = claims.ordering(dict(runs=runs), resolved, metrics, set(), "latency_ms", chain, {})["pairs"]
        return p

    p = pair("elmer-hard < sum-mlae-none")
    assert p["dtypes"] == {"elmer-hard": [("float32",), ("float32",)], "sum-mlae-none": [("bfloat16",), ("float32",)]}
    assert (
        "trained in other dtypes: elmer-hard float32 / float32, sum-mlae-none bfloat16 / float32" in claims.pair_text(p)
    )
    runs["pre-mlae-a"]["dtype"] = "float32"
    assert "dtypes" not in pair("elmer-hard < sum-mlae-none")
    assert "dtypes" not in pair("elmer-hard < elmer-hard-scratch")  # no pretraining on one side: the same dtypes
    runs["elmer-hard-scratch"]["dtype"] = "bfloat16"
    text = claims.pair_text(pair("elmer-hard < elmer-hard-scratch"))  # its fine-tuning's alone
    assert text.endswith("(trained in other dtypes: elmer-hard float32 / float32, elmer-hard-scratch bfloat16)")
    del runs["elmer-hard"]["dtype"]  # a record without one: nothing to compare
    assert "dtypes" not in pair("elmer-hard < elmer-hard-scratch")


def test_a_claim_measured_again_keeps_the_seed_spread_its_earlier_seeds_measured(tmp_path):
    """A claim archived with three seeds of a run, then measured again from one seed a side, keeps the
    earlier seeds in verdicts.json's seed_runs, and the seed spread pools them; a claim measured here
    and archived as it reads here counts its seeds once."""
    from reproduce.archive import keep_verdicts

    chain, metric = "sum-mlae > sum-t5 > sum-t5-scratch", "rougeL"
    three = {"sum-mlae": dict(rougeL=30.0), "sum-mlae-s2": dict(rougeL=31.0), "sum-mlae-s3": dict(rougeL=32.0)}
    dest = tmp_path / "archive"
    dest.mkdir()
    old = dict(chain=chain, metric=metric, commit="aaa", written="then", verdict="reversed", runs=three)
    (dest / "verdicts.json").write_text(json.dumps(dict(claims=[old])))
    results = tmp_path / "results.json"
    o = dict(chain=chain, metric=metric, verdict="not resolved", seeds={"sum-mlae": ["sum-mlae"]})
    d = dict(
        environment="x; commit bbb", written="now", orderings=[o], runs={"sum-mlae": dict(metrics=dict(rougeL=29.0))}
    )
    results.write_text(json.dumps(d))
    keep_verdicts(str(results), str(dest))
    kept = json.loads((dest / "verdicts.json").read_text())
    assert [c["commit"] for c in kept["claims"]] == ["bbb"]
    assert [(s["commit"], sorted(s["runs"])) for s in kept["seed_runs"]] == [("aaa", sorted(three))]
    keep_verdicts(str(results), str(dest))  # a second save keeps them once
    assert len(json.loads((dest / "verdicts.json").read_text())["seed_runs"]) == 1
    spread = claims.seed_spread({"sum-mlae": dict(rougeL=29.0)}, claims.archived_seed_runs(str(dest)))
    assert spread["rougeL"]["dof"] == 2 and math.isclose(spread["rougeL"]["sigma"], 1.0)
    # the same three seeds measured here and archived as read here: one group, not two
    here = {n: dict(m, rouge1=0.0, rouge2=0.0, accuracy=None) for n, m in three.items()}
    archived = [dict(commit="ccc", runs=here)]
    assert claims.seed_spread(here, archived)["rougeL"]["dof"] == 2
