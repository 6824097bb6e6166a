"""The flags and checkpoints of MLAE, NAR and ELMER fail clearly, before any work: one `error:`
line, exit status 2, every file saved before unchanged. Also: eval.py keeps each checkpoint's
results when a later one fails, log.jsonl never repeats a step after a resume, and every
checkpoint key is read through core/checkpoint.py's checks."""

import dataclasses
import json
import os

import pytest
import torch

import eval as evaluate_script
import finetune
import train
from conftest import TINY, read_log, write_task_files
from core import checkpoint
from core.progress import truncate_log
from test_safety import FT, fails

SCRIPTS = {"train": train.main, "finetune": finetune.main, "eval": evaluate_script.main}


@pytest.fixture(scope="module")
def runs(text_file, tmp_path_factory):
    """Tiny pretraining runs (pmlm, elmer), a fine-tuned summarizer, task files and doctored
    checkpoints (weights that do not fit their config, a missing key, an unknown task)."""
    root = tmp_path_factory.mktemp("flags")
    w = {"root": root, "text": text_file}
    for objective, extra in (("pmlm", []), ("elmer", ["--dec-len", "8", "--permutations", "2"])):
        w[objective] = str(root / objective)
        train.main(
            ["--data", text_file, "--steps", "1", "--out", w[objective], "--objective", objective] + extra + TINY
        )
    w.update(write_task_files(root, {"train": 32, "valid": 8}))
    w["ft"] = str(root / "ft")
    finetune.main(
        [
            "--init",
            os.path.join(w["pmlm"], "last.pt"),
            "--train-data",
            w["train"],
            "--valid-data",
            w["valid"],
            "--out",
            w["ft"],
        ]
        + FT
    )
    pre = torch.load(os.path.join(w["pmlm"], "last.pt"), weights_only=True)
    ft = torch.load(os.path.join(w["ft"], "best.pt"), weights_only=True)
    doctored = {
        "mismatch": dict(pre, model_config=dict(pre["model_config"], d_ff=96)),  # weights of d_ff 128
        "notok": {k: v for k, v in pre.items() if k != "tokenizer"},
        "noargs": {k: v for k, v in ft.items() if k != "args"},
        "unknowntask": dict(ft, kind="finetune/translate"),
    }
    (root / "bad").mkdir()
    for name, state in doctored.items():
        w[name] = str(root / "bad" / f"{name}.pt")
        checkpoint.save(w[name], state)
    return w


P = "--init {pmlm}/last.pt --train-data {train} --valid-data {valid} --out {root}/new"
E = "--init {elmer}/last.pt --train-data {train} --valid-data {valid} --out {root}/new"
# (name, script, argv with {placeholders}, words the error must contain)
CASES = [
    ("elmer-permutations-0", "train", "--objective elmer --permutations 0 --out {root}/new", ["--permutations 0"]),
    (
        "elmer-permutations-negative",
        "train",
        "--objective elmer --permutations -2 --out {root}/new",
        ["--permutations -2"],
    ),
    ("elmer-dec-len-0", "train", "--objective elmer --dec-len 0 --out {root}/new", ["--dec-len 0"]),
    (
        "elmer-dec-len-huge",
        "train",
        "--data {text} --objective elmer --dec-len 100000 --out {root}/new",
        ["--dec-len 100000", "256"],
    ),
    ("mlae-enc-layers-0", "train", "--objective mlae --enc-layers 0 --out {root}/new", ["--enc-layers 0"]),
    ("mlae-enc-layers-negative", "train", "--objective mlae --enc-layers -1 --out {root}/new", ["--enc-layers -1"]),
    ("seed-negative", "train", "--seed -1 --out {root}/new", ["--seed -1"]),
    ("seed-huge", "train", f"--seed {2**70} --out {{root}}/new", ["--seed", "2**32"]),
    ("vocab-size-huge", "train", "--vocab-size 1099511627776 --out {root}/new", ["--vocab-size 1099511627776"]),
    ("pmlm-enc-layers", "train", "--enc-layers 3 --out {root}/new", ["--enc-layers", "elmer or mlae or t5 or t5-nar"]),
    ("pmlm-permutations", "train", "--permutations 3 --out {root}/new", ["--permutations", "elmer"]),
    ("ft-nar-iterations-0", "finetune", "--nar --iterations 0 --out {root}/new", ["--iterations 0"]),
    ("ft-nar-iterations-negative", "finetune", "--nar --iterations -1 --out {root}/new", ["--iterations -1"]),
    ("ft-nar-length-beam-0", "finetune", "--nar --length-beam 0 --out {root}/new", ["--length-beam 0"]),
    ("ft-dec-len-negative", "finetune", "--exit hard --dec-len -3 --out {root}/new", ["--dec-len -3"]),
    ("ft-dec-len-huge", "finetune", E + " --dec-len 100000", ["--dec-len 100000", "256"]),
    ("ft-mask-init-above-1", "finetune", "--mask-init 1.5 --out {root}/new", ["--mask-init 1.5"]),
    ("ft-mask-init-negative", "finetune", "--mask-init -0.2 --out {root}/new", ["--mask-init -0.2"]),
    ("ft-mask-init-nan", "finetune", "--mask-init nan --out {root}/new", ["--mask-init nan"]),
    ("ft-exit-entropy-negative", "finetune", "--exit-entropy -1 --out {root}/new", ["--exit-entropy -1"]),
    ("ft-exit-entropy-nan", "finetune", "--exit-entropy nan --out {root}/new", ["--exit-entropy nan"]),
    ("ft-seed-negative", "finetune", "--seed -1 --out {root}/new", ["--seed -1"]),
    ("ft-seed-huge", "finetune", f"--seed {2**70} --out {{root}}/new", ["--seed"]),
    ("ft-vocab-size-huge", "finetune", "--vocab-size 1099511627776 --out {root}/new", ["--vocab-size"]),
    ("ft-arch-with-init", "finetune", P + " --arch t5", ["--arch", "--init none"]),
    ("ft-exit-on-pmlm", "finetune", P + " --exit soft", ["--exit", "elmer"]),
    ("ft-exit-entropy-on-pmlm", "finetune", P + " --exit-entropy 0.3", ["--exit-entropy", "elmer"]),
    ("ft-iterations-without-nar", "finetune", P + " --iterations 4", ["--iterations", "--nar"]),
    ("ft-nar-classify", "finetune", P + " --task classify --nar", ["--nar", "summarize"]),
    ("ft-mask-init-without-schedule", "finetune", P + " --mask-init 0.5", ["--mask-init", "--mask-schedule"]),
    (
        "ft-config-mismatch",
        "finetune",
        "--init {mismatch} --train-data {train} --valid-data {valid} --out {root}/new",
        ["mismatch.pt", "do not fit", "model_config"],
    ),
    (
        "ft-no-tokenizer",
        "finetune",
        "--init {notok} --train-data {train} --valid-data {valid} --out {root}/new",
        ["notok.pt", "'tokenizer'"],
    ),
    ("eval-iterations-negative", "eval", "{ft}/best.pt --iterations -1", ["--iterations -1"]),
    ("eval-iterations-0", "eval", "{ft}/best.pt --iterations 0", ["--iterations 0"]),
    ("eval-length-beam-0", "eval", "{ft}/best.pt --length-beam 0", ["--length-beam 0"]),
    ("eval-length-penalty-nan", "eval", "{ft}/best.pt --length-penalty nan", ["--length-penalty nan"]),
    ("eval-exit-entropy-negative", "eval", "{ft}/best.pt --exit-entropy -1", ["--exit-entropy -1"]),
    ("eval-exit-entropy-nan", "eval", "{ft}/best.pt --exit-entropy nan", ["--exit-entropy nan"]),
    ("eval-positions", "eval", "{ft}/best.pt --max-len 1000 --min-len 400", ["--max-len 1000", "256"]),
    ("eval-min-len-past-positions", "eval", "{ft}/best.pt --min-len 300 --max-len 300", ["--max-len 300", "256"]),
    ("eval-no-args", "eval", "{noargs}", ["noargs.pt", "'args'"]),
    ("eval-unknown-task", "eval", "{unknowntask}", ["unknowntask.pt", "'translate'"]),
]


@pytest.mark.parametrize("name,script,argv,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_flag(name, script, argv, needles, runs, capsys):
    extra = TINY if script == "train" else FT if script == "finetune" else []
    fails(capsys, SCRIPTS[script], extra + argv.format(**runs).split(), needles, runs["root"])


# a flag error found only against the model's positions, or --init none's flags: still the first line,
# before the tokenizer is trained or the data read (under torchrun, rank 0 printed those first)
S = "--init none --arch unilm --vocab-size 600 --train-data {train} --valid-data {valid} --out {root}/new"
FIRST_LINE = [
    (
        "train-seq-len-past-positions",
        "train",
        "--data {text} --seq-len 4096 --batch-tokens 8192 --out {root}/new",
        ["--seq-len 4096", "256"],
    ),
    (
        "train-dec-len-past-positions",
        "train",
        "--data {text} --objective elmer --dec-len 100000 --out {root}/new",
        ["--dec-len 100000"],
    ),
    ("ft-scratch-max-src-past-positions", "finetune", S + " --max-src 1000", ["--max-src 1000"]),
    ("ft-scratch-exit-on-unilm", "finetune", S + " --exit soft", ["--exit"]),
]


@pytest.mark.parametrize("name,script,argv,needles", FIRST_LINE, ids=[c[0] for c in FIRST_LINE])
def test_a_flag_error_comes_before_any_work(name, script, argv, needles, runs, capsys):
    extra = TINY if script == "train" else FT
    with pytest.raises(SystemExit) as e:
        SCRIPTS[script](extra + argv.format(**runs).split())
    out, err = capsys.readouterr()
    assert e.value.code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert all(n in err for n in needles), err
    assert "tokenizer:" not in out and "data:" not in out, out


def test_harmless_unused_flag_is_a_note(runs, tmp_path, capsys):
    """--max-tgt means nothing to classification: said in a note, and the run goes on."""
    finetune.main(
        [
            "--init",
            os.path.join(runs["pmlm"], "last.pt"),
            "--task",
            "classify",
            "--train-data",
            runs["train"],
            "--valid-data",
            runs["valid"],
            "--out",
            str(tmp_path / "c"),
        ]
        + FT
    )
    out = capsys.readouterr().out
    assert "note: --max-tgt is not used by this run" in out, out
    assert os.path.exists(tmp_path / "c" / "best.pt")


def test_eval_names_flags_that_apply_to_no_checkpoint(runs, capsys):
    """eval.py changes no model and its rows record the decoding used: a flag that applies to none
    of the checkpoints is a note, and the evaluation goes on."""
    evaluate_script.main(
        [
            os.path.join(runs["ft"], "best.pt"),
            "--data",
            runs["valid"],
            "--limit",
            "2",
            "--beam",
            "1",
            "--batch-size",
            "2",
            "--latency-samples",
            "1",
            "--no-lead",
            "--exit-entropy",
            "0.3",
            "--iterations",
            "3",
            "--split",
            "valid",
        ]
    )
    err = capsys.readouterr().err
    for flag in ("--exit-entropy", "--iterations", "--split"):
        assert f"note: {flag} is not used by this run" in err, err


def test_elmer_checkpoint_keeps_its_dec_len(runs, tmp_path):
    """The pretrained --dec-len travels with the checkpoint: fine-tuning needs no --dec-len."""
    out = str(tmp_path / "e")
    finetune.main(
        [
            "--init",
            os.path.join(runs["elmer"], "last.pt"),
            "--train-data",
            runs["train"],
            "--valid-data",
            runs["valid"],
            "--out",
            out,
        ]
        + FT
    )
    assert torch.load(os.path.join(out, "last.pt"), weights_only=True)["elmer"]["dec_len"] == 8


def test_eval_keeps_earlier_results_when_a_later_checkpoint_fails(runs, tmp_path, monkeypatch, capsys):
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        shutil.copy(os.path.join(runs["ft"], "best.pt"), d / "best.pt")
    real = evaluate_script.evaluate_checkpoint

    def second_fails(ck, *rest):
        if ck.path.startswith(str(b)):
            raise RuntimeError("out of memory in the second checkpoint")
        return real(ck, *rest)

    monkeypatch.setattr(evaluate_script, "evaluate_checkpoint", second_fails)
    with pytest.raises(RuntimeError):
        evaluate_script.main(
            [
                str(a / "best.pt"),
                str(b / "best.pt"),
                "--data",
                runs["valid"],
                "--limit",
                "2",
                "--beam",
                "1",
                "--batch-size",
                "2",
                "--latency-samples",
                "1",
                "--no-lead",
            ]
        )
    assert [n for n in os.listdir(a) if n.startswith("eval-")], os.listdir(a)
    assert not [n for n in os.listdir(b) if n.startswith("eval-")]


def test_truncate_log_drops_records_past_the_step(tmp_path):
    log = tmp_path / "log.jsonl"
    recs = [dict(step=s, loss=1.0 / s) for s in (1, 2, 3, 4, 5)] + [dict(step=3, valid_loss=0.5)]
    log.write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"step": 6, "lo')  # a line cut by SIGKILL
    truncate_log(str(log), 3)
    kept = [json.loads(l) for l in log.read_text().splitlines()]
    assert [r["step"] for r in kept] == [1, 2, 3, 3]


def test_resume_after_kill_logs_each_step_once(runs, tmp_path):
    """A SIGKILL after a step was logged but before it was saved: the resumed run logs that step
    again, and the log holds it once."""
    out = str(tmp_path / "k")
    flags = ["--data", runs["text"], "--steps", "5", "--out", out] + TINY
    train.main(flags + ["--stop-after", "3"])
    with open(os.path.join(out, "log.jsonl"), "a") as f:  # what the killed process had written past step 3
        f.write(json.dumps(dict(step=4, loss=9.0)) + "\n" + '{"step": 5, "lo')
    train.main(flags + ["--resume"])
    steps = [r["step"] for r in read_log(out) if "loss" in r]
    assert steps == [1, 2, 3, 4, 5], steps
    assert 9.0 not in [r["loss"] for r in read_log(out) if "loss" in r]


def test_unified_checkpoint_initialises_every_layer_of_unilm_finetuning():
    """PMLM / MLM summarization fine-tunes the pretrained stack itself: every weight comes from the
    checkpoint (only an encoder-decoder renames the stack to its encoder)."""
    from core.config import preset
    from core.mlae.model import init_from_pretrained
    from core.model import EncoderDecoder, UnifiedLM

    torch.manual_seed(0)
    cfg = preset("tiny", vocab_size=600)
    pretrained = UnifiedLM(cfg).state_dict()
    model = UnifiedLM(cfg)
    assert init_from_pretrained(model, pretrained) == []
    for k, v in model.state_dict().items():
        assert torch.equal(v, pretrained[k]), k
    s2s = EncoderDecoder(dataclasses.replace(cfg, n_dec_layers=1))
    init_from_pretrained(s2s, pretrained)
    assert torch.equal(s2s.state_dict()["enc_layers.0.attn.q.weight"], pretrained["layers.0.attn.q.weight"])
