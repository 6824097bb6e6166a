"""MLAE (core/mlae/model.py): the encoder sees only the unmasked tokens, the decoder variants see what
they should, and the pipelines run end to end on the tiny preset."""

import os

import numpy as np
import pytest
import torch

import train
from conftest import DEVICE, TINY, read_log, write_task_files
from core.config import preset
from core.mlae.model import MLAE, decoder_inputs, mlae_example, collate
from core.t5 import IGNORE
from core.tokenizer import MASK

V = 120


class Tok:  # the reserved ids the examples need
    sos_id, eos_id, mask_id, pad_id = 2, 3, MASK, 0


def tiny_model(variant, seed=0):
    torch.manual_seed(seed)
    cfg = preset("tiny", vocab_size=V, n_dec_layers=1, dropout=0.0)
    return MLAE(cfg, variant).eval()


def batch_of(windows, seed=0):
    examples = [mlae_example(w, np.random.default_rng([seed, i]), Tok) for i, w in enumerate(windows)]
    return collate(examples, Tok), examples


def windows(n=3, length=(30, 41, 23), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(70, V, length[i % len(length)]) for i in range(n)]


def test_encoder_input_is_the_unmasked_tokens():
    ws = windows()
    batch, examples = batch_of(ws)
    for b, (w, e) in enumerate(zip(ws, examples)):
        n = len(w) + 2
        masked = (batch.full_target[b] != IGNORE).sum().item()
        assert masked == round(0.15 * len(w))  # 15% of the maskable tokens
        assert batch.enc_valid[b].sum().item() == n - masked  # the encoder's input length
        assert batch.msk_valid[b].sum().item() == masked
        pos = batch.enc_pos[b, : n - masked]
        assert torch.equal(batch.full_tok[b, pos], batch.enc_tok[b, : n - masked])  # original positions
        assert MASK not in batch.enc_tok[b].tolist()
        assert batch.full_tok[b, 0] == Tok.sos_id and batch.full_tok[b, n - 1] == Tok.eos_id


def test_document_separators_are_never_masked():
    rng = np.random.default_rng(3)
    for i in range(50):
        w = rng.integers(70, V, 60)
        w[rng.random(60) < 0.1] = Tok.eos_id  # documents ending inside the window
        e = mlae_example(w, np.random.default_rng([7, i]), Tok)
        assert Tok.eos_id not in e["msk_target"].tolist()
        assert len(e["msk_pos"]) == round(0.15 * len(w))  # the count of a window without them


@pytest.mark.parametrize("variant", ["a", "b"])
def test_masked_ids_change_nothing(variant):
    """A masked token's id reaches neither the encoder nor the decoder: the examples rebuilt with
    other ids at the masked positions (same masks) give the same encoder and decoder outputs."""
    ws = windows()
    batch, _ = batch_of(ws)
    changed = []
    for b, w in enumerate(ws):
        w = w.copy()
        hidden = (batch.full_target[b, 1 : len(w) + 1] != IGNORE).numpy()
        w[hidden] = 7 + (w[hidden] - 7 + 5) % (V - 7)
        changed.append(w)
    other, _ = batch_of(changed)
    assert not torch.equal(batch.msk_target, other.msk_target)
    model = tiny_model(variant)
    outs = []
    for bt in (batch, other):
        enc = model.encode(bt.enc_tok, bt.enc_pos, bt.enc_valid)
        dec = model(bt.enc_tok, bt.enc_pos, bt.enc_valid, *decoder_inputs(bt, variant, MASK)[:3])
        outs.append((enc[bt.enc_valid], dec))
    assert torch.equal(outs[0][0], outs[1][0])
    assert torch.equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("variant", ["a", "b"])
def test_every_mask_output_depends_on_every_latent(variant):
    batch, _ = batch_of(windows())
    model = tiny_model(variant)
    latents = model.encode(batch.enc_tok, batch.enc_pos, batch.enc_valid).detach().requires_grad_(True)
    dec_tok, dec_pos, dec_valid, predict, _ = decoder_inputs(batch, variant, MASK)
    h = model.decode_masked(latents, batch.enc_pos, batch.enc_valid, dec_tok, dec_pos, dec_valid)
    B, r = h.shape[0], torch.randn(h.shape[-1])  # (a plain sum of a LayerNorm's output is constant)
    rows = [divmod(i, h.shape[1]) for i in predict.tolist()]  # flat positions -> (example, position)
    for b in range(B):
        for j in [j for row, j in rows if row == b][:3]:
            (g,) = torch.autograd.grad(h[b, j] @ r, latents, retain_graph=True)
            seen = g[b].abs().sum(-1) > 0  # (U,)
            assert torch.equal(seen, batch.enc_valid[b]), (variant, b, j)  # every latent, no padding
            assert g[[i for i in range(B) if i != b]].abs().sum() == 0  # and no other example's


def test_variant_b_placeholders_see_no_masked_token():
    """(b)'s decoder input is [MASK] at the masked positions and nothing else of the text."""
    batch, _ = batch_of(windows())
    dec_tok, dec_pos, dec_valid, predict, target = decoder_inputs(batch, "b", MASK)
    assert (dec_tok == MASK).all() and torch.equal(predict, dec_valid.flatten().nonzero()[:, 0])
    assert torch.equal(dec_pos[dec_valid], (batch.full_target != IGNORE).nonzero()[:, 1])
    assert torch.equal(target, batch.full_target[batch.full_target != IGNORE])


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_b_cross_attention_sees_the_latents_positions(backend):
    """Decoder (b), one layer, fixed latents: moving one latent's position id moves exactly the
    [MASK] queries whose T5 bucket of the distance to it changed; without the cross-attention bias
    (or with a zero table, an older checkpoint's) it moves nothing."""
    import kernels

    if backend == "triton":
        pytest.importorskip("kernels.pseudo_attention")
    batch = batch_of(windows())[0].to(DEVICE)
    dec_tok, dec_pos, dec_valid, predict, _ = decoder_inputs(batch, "b", MASK)
    cfg = preset("tiny", vocab_size=V, n_dec_layers=1, dropout=0.0)
    latents = tiny_model("b").to(DEVICE).encode(batch.enc_tok, batch.enc_pos, batch.enc_valid).detach()
    b, j = 1, 4  # the fifth latent of the second text
    moved_pos = batch.enc_pos.clone()
    moved_pos[b, j] += 9
    for bias in (True, False):
        torch.manual_seed(0)
        model = MLAE(cfg, "b", cross_rel_pos=bias).to(DEVICE).eval()
        with kernels.use_backend(backend), torch.no_grad():
            h0, h1 = (
                model.decode_masked(latents, p, batch.enc_valid, dec_tok, dec_pos, dec_valid)
                for p in (batch.enc_pos, moved_pos)
            )
        moved = (h0 - h1).abs().amax(-1) > 1e-6  # (B, Ld)
        if not bias:
            assert not moved.any(), "without the bias a latent's position id must change nothing"
            continue
        assert not moved[[i for i in range(len(h0)) if i != b]].any()  # other texts untouched
        old, new = (
            kernels.t5_bucket(p - dec_pos[b], cfg.rel_buckets, cfg.rel_max_distance)
            for p in (batch.enc_pos[b, j], moved_pos[b, j])
        )
        want = (old != new) & dec_valid[b]
        assert want.any() and torch.equal(moved[b] & dec_valid[b], want), (moved[b], want)
    # an older (b) checkpoint, without the table, loads with a zero one: the same function
    torch.manual_seed(0)
    plain = MLAE(cfg, "b", cross_rel_pos=False).to(DEVICE).eval()
    model = MLAE(cfg, "b").to(DEVICE).eval()
    model.load_state_dict(plain.state_dict())
    assert torch.equal(model.cross_rel_table, torch.zeros_like(model.cross_rel_table))
    with torch.no_grad():
        a, c = (
            m.decode_masked(latents, batch.enc_pos, batch.enc_valid, dec_tok, dec_pos, dec_valid)
            for m in (plain, model)
        )
    assert torch.equal(a, c)


def test_b_cross_bias_trains_the_same_through_the_kernel():
    """Decoder (b)'s loss and every gradient, the cross-attention table's included, agree between
    the reference attention and the Triton kernel."""
    import kernels

    pytest.importorskip("kernels.pseudo_attention")
    from core.mlae.model import mlae_loss_sums

    batch = batch_of(windows(n=2, length=(70, 53)))[0].to(DEVICE)
    grads = {}
    for backend in ("reference", "triton"):
        model = tiny_model("b").to(DEVICE).train()
        with kernels.use_backend(backend):
            mlae_loss_sums(model, batch)["loss"].backward()
        grads[backend] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    ref, tri = grads["reference"], grads["triton"]
    assert ref.keys() == tri.keys() and "cross_rel_table" in ref and ref["cross_rel_table"].abs().max() > 0
    for n in ref:
        assert torch.allclose(ref[n], tri[n], atol=1e-4, rtol=1e-3), (n, (ref[n] - tri[n]).abs().max())


def test_only_b_has_a_cross_attention_table():
    cfg = preset("tiny", vocab_size=V, n_dec_layers=1)
    assert MLAE(cfg, "b").cross_rel_table is not None
    assert MLAE(cfg, "b", cross_rel_pos=False).cross_rel_table is None
    assert MLAE(cfg, "a").cross_rel_table is None
    assert MLAE(preset("tiny", vocab_size=V, n_dec_layers=1, rel_pos=False), "b").cross_rel_table is None


def test_decoder_variants_have_the_right_layers():
    assert tiny_model("b").dec_layers[0].cross is not None
    assert tiny_model("a").dec_layers[0].cross is None


@pytest.fixture(scope="module")
def mlae_checkpoint(text_file, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("mlae"))
    train.main(["--data", text_file, "--objective", "mlae", "--steps", "4", "--out", out] + TINY)
    return out


def test_pretraining_runs(mlae_checkpoint):
    log = read_log(mlae_checkpoint)
    assert len([r for r in log if "loss" in r]) == 4
    assert all(np.isfinite(r["loss"]) for r in log if "loss" in r)
    assert [r for r in log if "valid_loss" in r]
    state = torch.load(os.path.join(mlae_checkpoint, "last.pt"), weights_only=True)
    assert state["kind"] == "pretrain/mlae"
    assert state["model_config"]["n_layers"] == 2 and state["model_config"]["n_dec_layers"] == 1  # tiny's 2L-1L


# -----------------------------------------------------------------------------
# fine-tuning: cross-attention init, scheduled masking, and the pipelines end to end


def test_cross_attention_init():
    from core.mlae.model import init_from_pretrained
    from core.model import EncoderDecoder

    pre = tiny_model("a").state_dict()
    cfg = preset("tiny", vocab_size=V, n_dec_layers=1, dropout=0.0)
    for how in ("self", "partial", "random"):
        torch.manual_seed(1)
        m = EncoderDecoder(cfg)
        init_from_pretrained(m, pre, how)
        layer = m.dec_layers[0]
        same = all(torch.equal(getattr(layer.cross, n).weight, getattr(layer.attn, n).weight) for n in "qkvo")
        assert same == (how == "self"), how
        assert torch.equal(layer.ln_cross.weight, layer.ln1.weight) or how != "self"
        assert torch.equal(m.enc_layers[0].attn.q.weight, pre["enc_layers.0.attn.q.weight"])  # encoder always loaded
        assert torch.equal(layer.ffn.up.weight, pre["dec_layers.0.ffn.up.weight"]) == (how != "random")
    # a (b) checkpoint keeps its pretrained cross-attention
    pre_b = tiny_model("b", seed=3).state_dict()
    m = EncoderDecoder(cfg)
    init_from_pretrained(m, pre_b, "self")
    assert torch.equal(m.dec_layers[0].cross.q.weight, pre_b["dec_layers.0.cross.q.weight"])


def test_mask_schedules():
    from core.mlae.model import mask_ratio

    T = 100
    lin = [mask_ratio("linear", 0.6, t, T) for t in range(T + 1)]
    assert lin[0] == 0.6 and lin[T] == 0.0 and lin[50] == pytest.approx(0.3)
    assert np.allclose(np.diff(lin), -0.006)  # linear
    assert all(mask_ratio("constant", 0.6, t, T) == 0.6 for t in (0, 37, T))
    assert all(mask_ratio("none", 0.6, t, T) == 0.0 for t in (0, 37, T))


def test_scheduled_masking_masks_decoder_inputs_at_the_ratio():
    from core.batch import Batch
    from core.mlae.model import ScheduledMasking

    seen = []
    sched = ScheduledMasking(lambda model, b: seen.append(b.tgt_in) or {}, "linear", 0.6, 10)
    tgt = torch.randint(10, V, (64, 40))
    tgt[:, 0] = 2
    batch = Batch(tgt_in=tgt, tgt_valid=torch.ones_like(tgt, dtype=torch.bool))
    model = torch.nn.Linear(1, 1)
    for step, expect in ((0, 0.6), (5, 0.3), (10, 0.0)):
        sched.step = step
        sched(model, batch)
        frac = (seen[-1][:, 1:] == MASK).float().mean().item()
        assert abs(frac - expect) < 0.03, (step, frac)
        assert (seen[-1][:, 0] == 2).all()
    model.eval()
    sched.step = 0
    sched(model, batch)
    assert torch.equal(seen[-1], tgt)  # evaluation is never masked


@pytest.fixture(scope="module")
def task_files(tmp_path_factory):
    return write_task_files(tmp_path_factory.mktemp("mlae_tasks"), dict(train=96, valid=16, test=6))


FT = [
    "--epochs",
    "1",
    "--batch",
    "32",
    "--micro-batch",
    "16",
    "--max-src",
    "32",
    "--max-tgt",
    "12",
    "--rouge-examples",
    "4",
    "--valid-examples",
    "16",
    "--log-every",
    "1",
]


def finetune_and_eval(init, task_files, out, *flags):
    import eval as evaluate_script
    import finetune

    finetune.main(
        ["--init", init, "--train-data", task_files["train"], "--valid-data", task_files["valid"], "--out", out]
        + FT
        + list(flags)
    )
    return evaluate_script.main(
        [
            os.path.join(out, "best.pt"),
            "--data",
            task_files["test"],
            "--beam",
            "2",
            "--batch-size",
            "3",
            "--latency-samples",
            "1",
            "--no-lead",
        ]
    )[0]


def test_pretrain_then_classify(mlae_checkpoint, task_files, tmp_path):
    row = finetune_and_eval(
        os.path.join(mlae_checkpoint, "last.pt"), task_files, str(tmp_path / "c"), "--task", "classify"
    )
    assert row["arch"] == "mlae-b" and 0 <= row["accuracy"] <= 100 and 0 <= row["macro_f1"] <= 100


def test_classify_under_two_processes(mlae_checkpoint, task_files, tmp_path):
    """The classifier keeps parameters no step uses (MLAE's decoder): DistributedDataParallel
    must be told, or the second step stops with 'Expected to have finished reduction'."""
    import subprocess
    import sys
    from conftest import ROOT

    out = str(tmp_path / "c2")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "finetune.py",
            "--init",
            os.path.join(mlae_checkpoint, "last.pt"),
            "--task",
            "classify",
            "--train-data",
            task_files["train"],
            "--valid-data",
            task_files["valid"],
            "--out",
            out,
            "--device",
            "cpu",
        ]
        + FT,  # gloo: also on a machine with one GPU
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert os.path.exists(os.path.join(out, "best.pt"))


def test_pretrain_then_ar_seq2seq(mlae_checkpoint, task_files, tmp_path):
    out = str(tmp_path / "s2s")
    row = finetune_and_eval(os.path.join(mlae_checkpoint, "last.pt"), task_files, out, "--mask-schedule", "linear")
    assert row["arch"] == "mlae-s2s" and row["decoding"] == "beam 2" and 0 <= row["rougeL"] <= 100
    state = torch.load(os.path.join(out, "last.pt"), weights_only=True)
    assert state["args"]["mask_schedule"] == "linear" and state["model_config"]["n_dec_layers"] == 1


@pytest.mark.parametrize("init", ["mlae", "t5", "t5-nar", "none"])
def test_nar_pipelines(init, mlae_checkpoint, text_file, task_files, tmp_path):
    """MLAE NAR, T5-NAR (pretrained NAR, or an AR T5 fine-tuned as a CMLM) and CMLM from scratch:
    CMLM fine-tuning, Mask-Predict in eval.py, every iteration run (as published)."""
    if init == "mlae":
        ckpt = os.path.join(mlae_checkpoint, "last.pt")
    elif init in ("t5", "t5-nar"):
        pre = str(tmp_path / init)
        train.main(["--data", text_file, "--objective", init, "--steps", "2", "--out", pre] + TINY)
        ckpt = os.path.join(pre, "last.pt")
    else:
        ckpt = "none"
    extra = ["--arch", "t5", "--model", "tiny", "--vocab-size", "600"] if init == "none" else []
    row = finetune_and_eval(ckpt, task_files, str(tmp_path / "nar"), "--nar", "--iterations", "4", *extra)
    used, budget = row["iterations"].split(" / ")
    assert row["arch"] == "nar" and budget == "4" and float(used) == 4 and row["decoding"].startswith("mask-predict")
    assert 0 <= row["rougeL"] <= 100 and row["latency_ms"] > 0
    if init == "t5-nar":  # the pretrained length predictor is loaded, not fresh
        import eval as evaluate_script

        pre_sd = torch.load(ckpt, weights_only=True)["model"]
        ft = torch.load(os.path.join(tmp_path / "nar", "last.pt"), weights_only=True)
        assert ft["args"]["adaptive_stop"] is False and set(ft["model"]) == set(pre_sd) - {"cross_rel_table"}
        best = os.path.join(tmp_path / "nar", "best.pt")
        row = evaluate_script.main(
            [
                best,
                "--data",
                task_files["test"],
                "--adaptive-stop",
                "--batch-size",
                "3",
                "--latency-samples",
                "1",
                "--no-lead",
            ]
        )[0]
        used, budget = row["iterations"].split(" / ")
        assert budget == "4" and 1 <= float(used) <= 4


def test_unilm_style_prefix_rule_and_cache():
    from core.generation import generate
    from core.mlae.model import MLAEUniLM

    torch.manual_seed(0)
    cfg = preset("tiny", vocab_size=V, n_dec_layers=2, dropout=0.0)
    model = MLAEUniLM(cfg).eval()
    assert model.dec_layers[0].cross is None
    src = torch.randint(10, V, (2, 9))
    sv = torch.ones_like(src, dtype=torch.bool)
    sv[1, 6:] = False
    tgt = torch.randint(10, V, (2, 6))
    tv = torch.ones_like(tgt, dtype=torch.bool)
    h = model(src, sv, tgt, tv)
    later = tgt.clone()
    later[:, 4] = 11  # target 4 changes: outputs 0..3 must not, 4 must
    h2 = model(src, sv, later, tv)
    assert torch.equal(h[:, :4], h2[:, :4]) and not torch.allclose(h[:, 4], h2[:, 4])
    pad = src.clone()
    pad[1, 6:] = 50  # the source's padding is never seen
    assert torch.equal(model(pad, sv, tgt, tv)[1], h[1])

    class Tok:
        sos_id, eos_id, pad_id = 2, 3, 0

    sources = [src[0].tolist(), src[1, :6].tolist()]
    for beam in (1, 3):
        fast = generate(model, "mlae-unilm", sources, Tok, beam=beam, max_len=7, return_scores=True)
        slow = generate(model, "mlae-unilm", sources, Tok, beam=beam, max_len=7, use_cache=False, return_scores=True)
        assert fast[0] == slow[0] and torch.allclose(fast[1], slow[1], atol=1e-4)


def test_pretrain_then_ar_unilm(mlae_checkpoint, task_files, tmp_path):
    row = finetune_and_eval(
        os.path.join(mlae_checkpoint, "last.pt"),
        task_files,
        str(tmp_path / "u"),
        "--style",
        "unilm",
        "--mask-schedule",
        "constant",
    )
    assert row["arch"] == "mlae-unilm" and 0 <= row["rougeL"] <= 100


def test_roberta_baseline_for_generation(text_file, task_files, tmp_path):
    """An MLM stack as the encoder of an encoder-decoder with a random decoder (--style seq2seq)."""
    pre = str(tmp_path / "mlm")
    train.main(["--data", text_file, "--objective", "mlm", "--steps", "2", "--out", pre] + TINY)
    out = str(tmp_path / "rob")
    row = finetune_and_eval(os.path.join(pre, "last.pt"), task_files, out, "--style", "seq2seq", "--epochs", "0.3")
    assert row["arch"] == "roberta-s2s"
    mlm = torch.load(os.path.join(pre, "last.pt"), weights_only=True)
    state = torch.load(os.path.join(out, "last.pt"), weights_only=True)
    assert state["model_config"]["n_dec_layers"] == 1 and state["args"]["mask_schedule"] == "none"
    assert state["model"]["enc_layers.0.ffn.up.weight"].shape == mlm["model"]["layers.0.ffn.up.weight"].shape


def test_bad_flag_combinations(mlae_checkpoint, task_files, tmp_path, capsys):
    import finetune

    base = ["--train-data", task_files["train"], "--valid-data", task_files["valid"], "--out", str(tmp_path / "x")]
    with pytest.raises(SystemExit) as e:
        finetune.main(base + ["--init", "none", "--arch", "unilm", "--model", "tiny", "--vocab-size", "600", "--nar"])
    assert e.value.code == 2 and "--nar needs an encoder-decoder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        finetune.main(base + ["--init", os.path.join(mlae_checkpoint, "last.pt"), "--nar", "--mask-schedule", "linear"])
    assert e.value.code == 2 and "has none to mask" in capsys.readouterr().err
