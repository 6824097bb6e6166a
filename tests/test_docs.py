"""The docs' generated blocks match the committed result files they are rendered from
(python -m tools.render_docs --check)."""

import glob
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT


def test_generated_blocks_match_their_result_files():
    r = subprocess.run(
        [sys.executable, "-m", "tools.render_docs", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_each_reversed_claim_has_its_why_on_its_papers_page():
    """The issue's rule for a reversed claim: its paper's page says what the runs showed about why,
    in prose under a heading that names the claim's ordering (so that an edit elsewhere on the page
    cannot lose it unseen)."""
    with open(os.path.join(ROOT, "results", "cpu-budget", "results.json")) as f:
        orderings = json.load(f)["orderings"]
    block = re.compile(r"<!-- render: .*?<!-- /render -->", re.S)
    for o in orderings:
        if o["verdict"] != "reversed":
            continue
        page = os.path.join(ROOT, "docs", o["paper"].split()[0].lower() + ".md")
        with open(page) as f:
            prose = " ".join(block.sub("", f.read()).split())  # a heading may wrap
        heading = f"**What the runs show about why `{o['chain']}` reads reversed"
        assert heading in prose, f"{os.path.relpath(page, ROOT)} has no '{heading}...**' for {o['paper']}"


def test_a_stale_block_is_caught(tmp_path):
    from tools import render_docs

    text = "<!-- render: exit results/h200-2026-11-26/exit.json -->\nedited by hand\n<!-- /render -->\n"
    assert render_docs.render_text(text, "x") != text
    assert render_docs.render_text(render_docs.render_text(text, "x"), "x") == render_docs.render_text(text, "x")


def test_a_missing_or_stale_figure_is_caught(monkeypatch, tmp_path):
    """--check draws nothing (CI has no matplotlib) but fails where a figure's file is missing, or was
    drawn from other data than its result file holds now (the SVG carries the data's digest)."""
    from tools import figures, render_docs

    monkeypatch.setitem(figures.DRAW, "on", False)
    text = "<!-- render: plot-mask-ratio results/cpu-budget/results.json -->\n<!-- /render -->\n"
    assert "figures/mask-ratio-cpu-budget.svg" in render_docs.render_text(text, "docs/x.md")
    monkeypatch.setattr(figures, "data_digest", lambda path: "0" * 40)  # the data changed since the drawing
    with pytest.raises(SystemExit, match="drawn from other data"):
        render_docs.render_text(text, "docs/x.md")
    monkeypatch.setattr(figures, "FIGURES", "docs/no-such-folder")
    with pytest.raises(SystemExit, match="is missing"):
        render_docs.render_text(text, "docs/x.md")


# -----------------------------------------------------------------------------
# commands and paths of README.md and docs/ agree with the code

DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
CHECKED = [d for d in DOCS if not d.endswith("LOG.md")]  # the notebook records commands of its day
FILLERS = {"CKPT": "checkpoints/x/best.pt", "$C": "checkpoints/x/best.pt", "HOST": "localhost", "A": "a", "B": "b"}


def module_path(name):
    """The file `python -m NAME` runs: NAME.py, or NAME/__main__.py for a package; None for a module
    that is not this project's (pytest, torch.utils.collect_env)."""
    base, top = name.replace(".", "/"), name.split(".")[0]
    if not (os.path.isdir(os.path.join(ROOT, top)) or os.path.exists(os.path.join(ROOT, top + ".py"))):
        return None
    return base + "/__main__.py" if os.path.isdir(os.path.join(ROOT, base)) else base + ".py"


def commands(path):
    """(script, argv) of every `python X.py ...` command in the file's bash blocks."""
    text = open(path).read()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue  # not a command (a fragment of prose in a block)
            part = []
            for w in words + ["&&"]:
                if w in ("&&", "||", ";", "&", "|"):
                    cmd = [x for x in part if not re.match(r"^[A-Z_]+=", x)]  # VAR=value prefixes
                    if len(cmd) >= 3 and cmd[0] in ("python", "python3") and cmd[1] == "-m":  # a module
                        cmd = [cmd[0], module_path(cmd[2]) or "-m"] + cmd[3:]
                    if len(cmd) >= 2 and cmd[0] in ("python", "python3") and cmd[1].endswith(".py"):
                        out.append((cmd[1], [FILLERS.get(x, x) for x in cmd[2:]]))
                    part = []
                else:
                    part.append(w)
    return out


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_command_names_a_script_that_parses_it(path):
    import eval as evaluate_script
    import finetune
    import train
    from core.errors import UserError
    from reproduce import plan, runner

    parsers = {
        "train.py": train.get_args,
        "finetune.py": finetune.get_args,
        "eval.py": evaluate_script.get_args,
        "reproduce/__main__.py": runner.get_args,
    }
    names = {r.name for r in plan.PLAN}
    for script, argv in commands(path):
        assert os.path.exists(os.path.join(ROOT, script)), f"{os.path.relpath(path, ROOT)}: {script} does not exist"
        if script in parsers:
            try:
                parsers[script](argv)
            except UserError:
                pass  # a value judged against data or a checkpoint, not the flags
            except SystemExit as e:
                pytest.fail(
                    f"{os.path.relpath(path, ROOT)}: `{script} {' '.join(argv)}` is refused by its parser ({e})"
                )
        if script == "reproduce/__main__.py" and "--only" in argv:
            pattern = argv[argv.index("--only") + 1]
            assert any(re.search(pattern, n) for n in names), f"--only {pattern!r} matches no run of the plan"


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_path_named_exists(path):
    text = open(path).read()
    for name in set(re.findall(r"`([\w./-]+/[\w./-]*\w|[\w-]+\.(?:py|md|json|jsonl|xz))`", text)):
        if name.startswith(("checkpoints", "OUT", "gpu", "/")) or any(c.isupper() for c in name.split("/")[0]):
            continue  # what a run writes, a placeholder
        last = name.rstrip("/").split("/")[-1]
        if "." in last and last.rsplit(".", 1)[1] not in (
            "py",
            "md",
            "json",
            "jsonl",
            "xz",
            "txt",
            "log",
            "sh",
            "model",
            "svg",
        ):
            continue  # module.attribute, not a file
        if re.search(
            r"(NAME|DATA|BUDGET|eval-|outputs-|state\.json|RESULTS\.md|results\.json|last\.pt|best\.pt|"
            r"config\.json|log\.jsonl|locks/|logs/)",
            name,
        ):
            continue
        candidates = [
            os.path.join(ROOT, name),
            os.path.join(ROOT, "docs", name),
            os.path.join(ROOT, "bench", name),
            os.path.join(ROOT, "reproduce", name),
            os.path.join(ROOT, "studies", name),
            os.path.join(ROOT, "core", name),
            os.path.join(ROOT, "kernels", name),
            os.path.join(ROOT, "tests", name),
        ]
        assert any(os.path.exists(c) for c in candidates), (
            f"{os.path.relpath(path, ROOT)} names `{name}`, which does not exist"
        )


def test_the_scorecard_shows_the_papers_figures_ours_and_the_pretrainings_distance(tmp_path, monkeypatch):
    """A claim measured shows its values in the chain's order, each pair's interval, its verdict and
    the pretrainings behind it against the unigram entropy; ::measured leaves out the rest, ::Q keeps
    paper Q's claims."""
    from tools import figures, render_docs

    d = dict(
        budget="cpu",
        steps=800,
        written="2026-11-27 05:00",
        environment="CPU",
        pretraining={"pre-pmlm": dict(under=1.29, held_out_loss=5.485, unigram_entropy=6.774)},
        runs={
            "sum-pmlm": dict(pretraining="pre-pmlm"),
            "sum-mlm": dict(pretraining=None),
            "sum-t5": dict(pretraining=None),
            "sum-roberta": dict(pretraining=None),
        },
        orderings=[
            dict(
                paper="P",
                claim="A > B",
                theirs="RG-L 36.08 > 31.15",
                metric="rougeL",
                chain="sum-pmlm > sum-mlm",
                values={"sum-pmlm": 27.5, "sum-mlm": 26.75},
                here="sum-pmlm 27.50 > sum-mlm 26.75",
                pairs=[
                    dict(
                        a="sum-pmlm",
                        b="sum-mlm",
                        op=">",
                        difference=0.75,
                        low=0.1,
                        high=1.4,
                        seeds=[3, 2],
                        verdict="holds",
                    )
                ],
                verdict="holds",
            ),
            dict(
                paper="P",
                claim="E >= F",
                theirs="y",
                metric="rougeL",
                chain="sum-t5 >= sum-roberta",
                values={"sum-t5": 20.0, "sum-roberta": 21.0},
                here="sum-roberta 21.00 > sum-t5 20.00",
                pairs=[
                    dict(
                        a="sum-t5",
                        b="sum-roberta",
                        op=">=",
                        difference=-1.0,
                        low=-2.5,
                        high=0.5,
                        seeds=[2, 2],
                        verdict="not resolved",
                        detectable=2.14,
                    )
                ],
                verdict="not resolved",
            ),
            dict(
                paper="Q",
                claim="C > D",
                theirs="x",
                metric="rougeL",
                chain="sum-mlae > sum-t5-scratch",
                values={"sum-mlae": None, "sum-t5-scratch": None},
                pairs=[],
                verdict="not measured (sum-mlae, sum-t5-scratch)",
            ),
        ],
    )
    (tmp_path / "results.json").write_text(json.dumps(d))
    monkeypatch.setattr(figures, "ROOT", str(tmp_path))
    monkeypatch.setattr(render_docs, "_load", lambda p: json.loads((tmp_path / p).read_text()))
    full = render_docs.scorecard("results.json")
    assert (
        "| P | A > B (rougeL, `sum-pmlm > sum-mlm`) | RG-L 36.08 > 31.15 | sum-pmlm 27.50 > sum-mlm 26.75 | "
        "sum-pmlm - sum-mlm: +0.75 (3x2) [+0.10, +1.40], holds | holds |" in full
    )
    # the measured order, whatever the claim's; a straddling pair with the effect it could have seen
    assert (
        "| sum-roberta 21.00 > sum-t5 20.00 | sum-t5 - sum-roberta: -1.00 (2x2) [-2.50, +0.50], not resolved, "
        "detectable 2.14 | not resolved |" in full
    )
    assert (
        "| Q | C > D (rougeL, `sum-mlae > sum-t5-scratch`) | x | - | - | not measured (sum-mlae, sum-t5-scratch) "
        "|" in full
    )
    assert "2 of 3 claims measured" in full and "pre-pmlm 1.29 nats (5.485 against 6.774)" in full
    assert "C > D" not in render_docs.scorecard("results.json::measured")
    one = render_docs.scorecard("results.json::Q")
    assert "| Q | C > D" in one and "A > B" not in one and "0 of Q's 1 claims measured" in one
    # a results.json of reproduce/claims.py: the controls' pairs shown apart, an archived verdict with
    # its commit and date, a recorded interval beside the one read again
    d["orderings"][0].update(
        controls=[
            dict(
                a="sum-mlm",
                b="sum-unilm-scratch",
                op=">",
                difference=-0.5,
                low=-1.5,
                high=0.5,
                seeds=[2, 1],
                verdict="not resolved",
                detectable=1.43,
                control=True,
            )
        ],
        archived=dict(commit="abc1234", written="2026-11-28 19:46", verdict="reversed"),
    )
    d["orderings"][0]["pairs"][0]["recorded"] = dict(low=-0.2, high=-0.1, verdict="reversed")
    (tmp_path / "results.json").write_text(json.dumps(d))
    assert (
        "sum-pmlm - sum-mlm: +0.75 (3x2) [+0.10, +1.40], holds; recorded [-0.20, -0.10], reversed; the "
        "project's controls, deciding nothing: sum-mlm - sum-unilm-scratch: -0.50 (2x1) [-1.50, +0.50], not "
        "resolved, detectable 1.43 | "
        "holds (archived: measured at abc1234 on 2026-11-28 19:46, recorded as reversed) |"
        in render_docs.scorecard("results.json")
    )
    d["summary"] = dict(
        sentence="1 of 3 claims hold here; 0 reversed, 1 not resolved at this budget, 1 not measured yet."
    )
    (tmp_path / "results.json").write_text(json.dumps(d))
    assert render_docs.claims_summary("results.json") == d["summary"]["sentence"] + "\n"


def test_the_mask_sweep_reads_each_m0_from_the_plan(tmp_path, monkeypatch):
    """MLAE Figure 3's table: a row per m0 of the plan's sweep, by m0, each measured run with its
    interval, the others marked not run; a run with further seeds has their mean said below."""
    from reproduce.plan import MASK_SWEEP
    from tools import figures, render_docs

    run = lambda r2, low, high: dict(
        pretraining="pre-mlae-a",
        pretraining_step=800,
        under=0.7,
        metrics=dict(rouge2=r2, rougeL=30.0),
        intervals=dict(rouge2=[low, high]),
    )
    d = dict(
        runs={
            "sum-mlae": run(12.5, 11.75, 13.25),
            "sum-mlae-m15": run(11.0, 10.0, 12.0),
            "sum-mlae-s2": run(13.5, 12.5, 14.5),
        }
    )
    (tmp_path / "results.json").write_text(json.dumps(d))
    monkeypatch.setattr(figures, "ROOT", str(tmp_path))
    lines = render_docs.mask_sweep("results.json").splitlines()
    rows = lines[2 : 2 + len(MASK_SWEEP)]
    assert rows[0] == "| 0 | sum-mlae-none | not run | - | - |"
    # a row is one seed; where a run has more, their mean (the scorecard's) is said beside it
    assert (
        lines[-1] == "sum-mlae: the row is its first seed; the mean of its 2 seeds, the scorecard's, is ROUGE-2 "
        "13.00 and ROUGE-L 30.00."
    )
    assert "| 0.15 | sum-mlae-m15 | 11.00 [10.00, 12.00] | 30.00 | pre-mlae-a step 800, 0.70 nats |" in rows
    assert rows.index("| 0.6 | sum-mlae | 12.50 [11.75, 13.25] | 30.00 | pre-mlae-a step 800, 0.70 nats |") == 4


def test_the_sweeps_default_m0_is_finetunes():
    """sum-mlae runs without --mask-init: the plan's m0 for it must be finetune.py's default."""
    import finetune
    from reproduce.plan import BY_NAME, DEFAULT_M0, MASK_SWEEP

    assert finetune.get_args([]).mask_init == MASK_SWEEP["sum-mlae"] == DEFAULT_M0
    assert "--mask-init" not in BY_NAME["sum-mlae"].flags and "--mask-schedule none" in BY_NAME["sum-mlae-none"].flags
    for name, m in MASK_SWEEP.items():
        assert name in ("sum-mlae", "sum-mlae-none") or f"--mask-init {m}" in BY_NAME[name].flags


def test_a_study_file_renders_its_rows_and_where_they_came_from(tmp_path, monkeypatch):
    """tools/records.py: what a study writes is what its block shows: each column's format, '-' for
    a missing value, the command, the date, the load average and the machine."""
    from tools import figures, records, render_docs

    cols = [("variant", "name", "{}"), ("loss", "loss", "{:.3f}"), ("share", "acc", "{:.1%}")]
    records.write(
        str(tmp_path / "s.json"),
        ["python", "-m", "studies.x", "--json", "s.json"],
        cols,
        [{"name": "a", "loss": 1.23456, "acc": 0.5}, {"name": "b", "loss": None, "acc": 0.25}],
        note="One run each.",
        dtype="float32",
    )
    monkeypatch.setattr(figures, "ROOT", str(tmp_path))
    lines = render_docs.study("s.json").splitlines()
    assert lines[:4] == ["| variant | loss | share |", "|---|---|---|", "| a | 1.235 | 50.0% |", "| b | - | 25.0% |"]
    assert lines[5].startswith("`python -m studies.x --json s.json` (") and lines[5].endswith("One run each.")
    assert "compute dtype float32;" in lines[5] and "torch " in lines[5]


def test_run_times_group_the_runs_by_kind(tmp_path, monkeypatch):
    """The budget's time table: pretrainings apart from ELMER's LPLM, each fine-tuning by its task and
    decoder, evaluations; median, fastest, slowest; a kind with no timed run left out."""
    from tools import figures, render_docs

    run = lambda secs, **m: dict(metrics=m, seconds=secs, eval_seconds=30.0)
    d = dict(
        budget="cpu",
        written="w",
        environment="e",
        pretraining={"pre-a": dict(seconds=1200.0), "pre-b": dict(seconds=1800.0), "pre-elmer": dict(seconds=7200.0)},
        runs={
            "sum-a": run(3000.0, decoding="beam 5"),
            "nar-a": run(2400.0, decoding="mask-predict, 3 lengths"),
            "cls-a": run(None, accuracy=0.5),
            "elmer-a": run(6000.0, arch="elmer", decoding="one pass"),
        },
    )
    (tmp_path / "results.json").write_text(json.dumps(d))
    monkeypatch.setattr(figures, "ROOT", str(tmp_path))
    rows = render_docs.run_times("results.json").splitlines()[2:8]
    assert rows == [
        "| pretraining | 2 | 25 min | 20 min | 30 min |",
        "| LPLM pretraining (ELMER) | 1 | 2.0 h | 2.0 h | 2.0 h |",
        "| summarization fine-tuning (AR) | 1 | 50 min | 50 min | 50 min |",
        "| NAR fine-tuning | 1 | 40 min | 40 min | 40 min |",
        "| ELMER fine-tuning | 1 | 1.7 h | 1.7 h | 1.7 h |",
        "| evaluation | 4 | 30 s | 30 s | 30 s |",
    ]


def test_the_quick_starts_words_are_the_codes_defaults():
    """What the README says `python train.py` does: the preset, its parameters, the steps and tokens."""
    import train
    from core.config import preset
    from core.model import UnifiedLM

    a = train.get_args([])
    params = sum(p.numel() for p in UnifiedLM(preset(a.model, vocab_size=a.vocab_size)).parameters()) / 1e6
    text = open(os.path.join(ROOT, "README.md")).read()
    said = (
        f"`python train.py` pretrains UniLMv2's PMLM (`{a.model}` preset, {params:.1f}M parameters) on the "
        "embedded "
        f"corpus\nof Debian package descriptions for {a.steps} steps of {a.batch_tokens:,} tokens"
    )
    assert said in text and a.eval_every == 50 and "its held-out loss every 50 steps" in text


def test_the_budget_table_is_the_plans():
    """docs/reproducing.md's budget table: each budget's steps, epochs and test sample as reproduce/plan.py sets
    them."""
    import train
    from reproduce import plan
    from reproduce.plan import BUDGETS

    text = open(os.path.join(ROOT, "docs", "reproducing.md")).read()
    tiny, cpu, gpu = BUDGETS["tiny"], BUDGETS["cpu"], BUDGETS["gpu"]
    tiny_tokens = int(tiny["train"].split("--batch-tokens ")[1].split()[0])
    assert f"| {tiny['steps']} steps of {tiny_tokens} tokens | {tiny['epochs']} epoch (" in text
    assert (
        f"| `cpu` | {cpu['model']} | `--steps {cpu['steps']}` of {train.get_args([]).batch_tokens:,} tokens | "
        f"`--epochs {cpu['epochs']}` at most | the whole test split |"
    ) in text and cpu["limit"] is None
    assert (
        f"| `--steps {gpu['steps']}` | `--epochs {gpu['epochs']}` at most | the whole test split |" in text
        and gpu["limit"] is None
    )
    assert f"| {tiny['seeds']} |" in text and max(plan.SEEDS.values()) == 3


def test_a_pretraining_table_reads_the_loss_train_py_judges_and_names_a_log_without_one(tmp_path, monkeypatch):
    """Every objective's held-out loss (core/data.py HELD_OUT_KEYS: PAR only logs par_hidden_loss)
    renders against the unigram entropy, with the run's own machine line where run.json gives one;
    a log with none of those losses is refused by name."""
    from tools import figures, render_docs

    rec = lambda step, loss: {"step": step, "valid_par_hidden_loss": loss, "unigram_entropy": 6.5}  # noqa: E731
    (tmp_path / "par-log.jsonl").write_text("\n".join(json.dumps(r) for r in (rec(100, 6.6), rec(200, 5.5))))
    (tmp_path / "run.json").write_text(
        json.dumps({"machine": "m", "par-log.jsonl": dict(command="c", seconds=90.0, machine="its own")})
    )
    monkeypatch.setattr(figures, "ROOT", str(tmp_path))
    monkeypatch.setattr(render_docs, "ROOT", str(tmp_path))
    lines = render_docs.default_pretraining("par-log.jsonl").splitlines()
    assert lines[2:4] == [
        "| held-out par_hidden_loss | 6.600 | 5.500 |",
        "| against the unigram entropy 6.500 | 0.10 above | 1.00 under |",
    ]
    assert "`c` took 1 min 30 s (its own)." in lines
    assert render_docs.run_time("run.json::par-log.jsonl") == "`c` took 1 min 30 s (its own).\n"
    with pytest.raises(SystemExit, match="records no 'tests'"):
        render_docs.run_time("run.json::tests")
    # a suite's time names the tree it timed and what that tree's suite held
    suite = dict(command="t", seconds=30.0, commit="abc", passed=5, skipped=1)
    (tmp_path / "run.json").write_text(json.dumps({"machine": "m", "tests": suite}))
    assert render_docs.run_time("run.json::tests") == "`t` took 30 s (m), at abc (5 passed, 1 skipped).\n"
    (tmp_path / "bad-log.jsonl").write_text(json.dumps({"step": 100, "valid_other": 1.0, "unigram_entropy": 6.5}))
    with pytest.raises(SystemExit, match="bad-log.jsonl: its last held-out record has none of the losses"):
        render_docs.default_pretraining("bad-log.jsonl")


def test_the_lr_grid_reads_each_runs_lr_and_chooses_the_lowest_validation_loss(tmp_path, monkeypatch):
    """The fine-tuning learning-rate grid: one row per run, by its config's --lr, its validation loss
    at every validation ('-' where it ran none), its lowest, and the lr of the lowest of all."""
    from tools import figures, render_docs

    for lr, losses in ((1e-3, [3.7, 3.6]), (1.5e-4, [4.3, 4.0, 3.9]), (5e-4, [3.8, 3.5, 3.55])):
        d = tmp_path / "grid" / f"lr{lr}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"args": {"lr": lr}}))
        rows = [{"step": 444 * (i + 1), "valid_loss": v, "valid_rougeL": 20.0 + i} for i, v in enumerate(losses)]
        (d / "log.jsonl").write_text("\n".join(json.dumps(r) for r in rows + [{"step": 444 * len(losses) + 3}]))
    monkeypatch.setattr(figures, "ROOT", str(tmp_path))
    monkeypatch.setattr(render_docs, "ROOT", str(tmp_path))
    lines = render_docs.lr_grid("grid").splitlines()
    assert lines[0] == "| peak lr | step 444 | step 888 | step 1332 | lowest | ROUGE-L there (sample) | steps run |"
    assert lines[2] == "| 1.5e-4 | 4.300 | 4.000 | 3.900 | 3.900 (step 1332) | 22.00 | 1335 |"
    assert lines[4] == "| 1e-3 | 3.700 | 3.600 | - | 3.600 (step 888) | 21.00 | 891 |"
    assert lines[-1] == "Lowest validation loss: `--lr 5e-4`."


def test_a_sweep_and_a_step_say_which_backward_and_blocks_ran(tmp_path):
    """The sweep's table names each candidate's backward structure and marks the chosen by blocks and
    structure together; a step run with ours-swept names the configurations each ours ran; a step's
    ratio is ours' speed over each method."""
    from tools import render_bench

    cfg = [64, 64, 4, 3, 32, 128, 8, 3, 4, 3]
    rec = dict(
        D=64,
        layout="pmlm",
        config=cfg,
        fused_dq=False,
        sweep=[
            dict(config=cfg, fused_dq=True, fwd_ms=1.0, fwdbwd_ms=3.0),
            dict(config=cfg, fused_dq=False, fwd_ms=1.0, fwdbwd_ms=2.0),
        ],
    )
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(dict(records=[rec])))
    rows = render_bench.sweep(str(path)).splitlines()[2:]
    assert [r.split(" | ")[2] for r in rows] == ["fused", "apart"]
    assert [r.endswith("yes |") for r in rows] == [False, True]
    step = dict(
        device="GPU",
        torch="t",
        triton="x",
        commit="c",
        date="d",
        model="base",
        objective="pmlm",
        tokens_per_step=1,
        flops_per_step=1e12,
        flop_count="f",
        command="cmd",
        rows=[],
        swept_configs={"64": cfg, "fused_dq": False},
        plan_configs={"64": cfg, "fused_dq": True},
    )
    path.write_text(json.dumps(step))
    head = render_bench.step(str(path)).splitlines()[0]
    assert "ours-swept ran the sweep's configurations D 64: (64, 64, 4, 3, 32, 128, 8, 3, 4, 3), dQ apart" in head
    assert "ours the plan's D 64: (64, 64, 4, 3, 32, 128, 8, 3, 4, 3), dQ fused" in head
    # one direction, as in the attention tables: ours' speed over the row's method (its time over ours')
    row = lambda method, ms, rounds: dict(method=method, step_ms=ms, round_ms=rounds, tokens_per_s=1, tflops=1.0)
    step.update(rows=[row("sdpa-mask", 150.0, [140.0, 160.0]), row("ours", 100.0, [100.0, 100.0])])
    path.write_text(json.dumps(step))
    table = render_bench.step(str(path)).splitlines()
    assert "| ours' speed over it |" in table[2]
    assert "| 1.50x (rounds 1.40-1.60) |" in table[4] and "| 1.00x |" in table[5]


def test_an_ordering_names_only_runs_the_file_measured_unless_it_is_archived():
    """The scorecard's check: a measured run with no row under runs is an error, except in an ordering
    read from the archive, whose runs' rows are the archive's."""
    from tools.figures import orderings_of

    o = dict(chain="sum-pmlm > sum-mlm", values={"sum-pmlm": 1.0, "sum-mlm": 2.0}, seeds={}, pairs=[])
    with pytest.raises(SystemExit, match="'sum-pmlm' as measured"):
        orderings_of(dict(orderings=[o], runs={}), "results.json")
    archived = dict(o, archived=dict(commit="0000000", written="2026-11-28", verdict="not resolved"))
    assert orderings_of(dict(orderings=[archived], runs={}), "results.json") == [archived]


def test_the_checks_render_one_choice_or_say_what_the_file_has():
    """`checks PATH::WHAT`: the project's checks of one choice from a report's results.json, read as
    a claim is; a choice the file has no check of is an error, not an empty table."""
    from tools import render_docs

    path = "results/cpu-budget/results.json"
    with open(os.path.join(ROOT, path)) as f:
        d = json.load(f)
    what = d["checks"][-1]["what"]
    text = render_docs.checks(f"{path}::{what.replace(' ', '~')}")
    rows = [l for l in text.splitlines() if l.startswith(f"| {what} |")]
    assert len(rows) == sum(c["what"] == what for c in d["checks"]) and d["checks"][-1]["check"] in rows[-1]
    assert f"`{d['budget']}` budget, written {d['written']}" in text
    with pytest.raises(SystemExit, match="no check of 'no~such'"):
        render_docs.checks(f"{path}::no~such")
