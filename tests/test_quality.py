"""The defaults that would silently cost quality: what [P] may see, positions, document
boundaries, validation samples, the length penalty, the tokenizer."""

import numpy as np
import pytest

from core.unilm.pmlm import pmlm_example, pretraining_sentence_pair
from kernels import CONTEXT


def _visible_targets(tok, losses, n_examples=300, **kw):
    """Share of the masked positions whose original token stays in the AE context."""
    rng = np.random.default_rng(0)
    seen = total = 0
    for _ in range(n_examples):
        window = rng.integers(tok.n_special, tok.vocab_size, 120)
        ids, seg, special = pretraining_sentence_pair(window, rng, tok.sos_id, tok.eos_id)
        ex = pmlm_example(ids, seg, special, rng, tok, losses, **kw)
        n = len(ids)
        masked = np.flatnonzero((ex["target"][:n] >= 0) | np.isin(np.arange(n), ex["pos"][n:]))
        seen += int((ex["tokens"][:n][masked] == ids[masked]).sum())
        total += len(masked)
    return seen / total


def test_masking_is_the_papers(tokenizer):
    """UniLMv2 section 4.1: 80% [MASK] / 10% random / 10% kept, for every variant of section 4.6
    ("the variants use the same masking strategy"); keep=0 hides every target from the [P]s, the
    strict reading of equation 5 (90/10: only a random draw equal to the original stays)."""
    for losses in ("ae+par", "ae", "par"):
        assert 0.08 < _visible_targets(tokenizer, losses) < 0.12, losses
        assert _visible_targets(tokenizer, losses, keep=0.0) < 0.01, losses


def test_hidden_loss_leaves_the_kept_targets_out(tokenizer):
    """The held-out loss set against the unigram entropy counts the targets not in view: an AE
    target whose token stays at its position, or a [P] whose position in the AE part shows it, is
    left out of the ae_hidden_/par_hidden_ sums and counted in ae_/par_."""
    import torch
    from core.unilm.pmlm import collate, pmlm_loss_sums

    rng = np.random.default_rng(1)
    examples = []
    for _ in range(8):
        ids, seg, special = pretraining_sentence_pair(
            rng.integers(tokenizer.n_special, tokenizer.vocab_size, 60), rng, tokenizer.sos_id, tokenizer.eos_id
        )
        examples.append(pmlm_example(ids, seg, special, rng, tokenizer))
    batch = collate(examples, tokenizer.pad_id)
    V = tokenizer.vocab_size

    class Oracle(torch.nn.Module):  # puts all its mass on the token at the target's position of the AE part
        def forward(self, tokens, pos, seg, kind, step, valid, predict):
            from core.model import select

            shown = select(tokens.gather(1, pos)[..., None], predict)[:, 0]
            return torch.nn.functional.one_hot(shown, V).float() * 50.0

    s = pmlm_loss_sums(Oracle(), batch)
    for part in ("ae", "par"):
        n, hidden_n = float(s[part + "_n"]), float(s[part + "_hidden_n"])
        assert 0.05 < 1 - hidden_n / n < 0.2, part  # about 10% kept
        assert float(s[part + "_hidden_hit"]) == 0  # the copy is never right on a hidden target
        assert float(s[part + "_hit"]) == n - hidden_n  # and always right on a kept one


def test_length_penalty_wu_is_the_default():
    """Wu et al.'s ((5 + len) / 6) ** alpha, UniLMv2's decoding (Table 10: alpha 0.6, beam 5), is
    what eval.py and generate() use unless told otherwise; len ** alpha stays on offer."""
    import inspect
    import math

    import eval as eval_script
    from core.decoding import beam_search
    from core.decodings import ar_generate
    from test_decoding import lure

    out, score = beam_search(lure(), beam=2, max_len=10, length_penalty=0.6, eos_id=3, length_norm="wu")
    assert out == [[1]]
    assert score.item() == pytest.approx(math.log(0.4 * 0.9) / (7 / 6) ** 0.6, abs=1e-6)
    _, pow_score = beam_search(lure(), beam=2, max_len=10, length_penalty=0.6, eos_id=3, length_norm="pow")
    assert pow_score.item() == pytest.approx(math.log(0.4 * 0.9) / 2**0.6, abs=1e-6)
    args = eval_script.get_args([])
    assert (args.beam, args.length_penalty, args.length_norm) == (5, 0.6, "wu")
    assert eval_script.get_args(["--length-norm", "pow"]).length_norm == "pow"
    defaults = inspect.signature(ar_generate).parameters  # generate()'s for an AR architecture
    assert (defaults["length_penalty"].default, defaults["length_norm"].default) == (0.6, "wu")


def test_validation_slices_sample_the_whole_split():
    """finetune.py's valid[:512] and [:200] come from one fixed-seed order over the whole split,
    not the alphabetical head of the package-sorted corpus."""
    from core.tasks import load_split

    valid = load_split("summarize", "valid")
    a, b = valid.shuffled(), valid.shuffled()
    assert a.sources == b.sources and sorted(a.sources) == sorted(valid.sources)  # fixed, a permutation
    assert sorted(zip(a.sources, a.targets)) == sorted(zip(valid.sources, valid.targets))  # pairs stay together
    rank = {s: i for i, s in enumerate(valid.sources)}
    head = [rank[s] for s in a.sources[:200]]
    assert max(head) > 0.9 * len(valid) and min(head) < 0.1 * len(valid)  # spread over the split
    assert np.mean(head) == pytest.approx(len(valid) / 2, rel=0.15)


def test_tokenizer_keeps_rare_characters_and_plain_text(tokenizer):
    """Byte fallback: characters the vocabulary lacks survive encode/decode; text that spells a
    reserved token is encoded as ordinary text, never as its id."""
    text = "Tom & Jerry: smörgåsbord, Ærø, 日本語 (≥ 2 s)"  # (NFKC normalisation still applies: µ becomes μ)
    assert tokenizer.decode(tokenizer.encode([text])[0]) == text
    assert tokenizer.unk_id not in tokenizer.encode([text])[0]
    spelled = "use [P] or [MASK] then <extra_id_0> <extra_id_63> [SOS] [EOS] <pad> <unk> in text"
    ids = tokenizer.encode([spelled])[0]
    assert min(ids) >= tokenizer.n_special, [i for i in ids if i < tokenizer.n_special]
    assert tokenizer.decode(ids) == spelled


def test_tokenizer_cache_ignores_the_old_format(tmp_path):
    """A cached model trained by the code before byte fallback (same texts, same vocabulary size,
    the old cache key) is not picked up."""
    import hashlib

    from core.tokenizer import N_SENTINELS, cached_tokenizer
    from core.data import embedded_records

    texts = [r["document"] for r in embedded_records("valid")[:1000]]
    h = hashlib.sha1(f"600|{N_SENTINELS}".encode())  # the old key
    for t in texts:
        h.update(t.encode())
    old = tmp_path / f"spm-600-{h.hexdigest()[:12]}.model"
    old.write_bytes(b"not a model of the current format")
    tok, path = cached_tokenizer(texts, 600, str(tmp_path))
    assert path != str(old) and tok.decode(tok.encode(["a & b"])[0]) == "a & b"


def test_pretraining_records_its_positions_and_finetuning_fits_them(text_file, tmp_path):
    """A checkpoint records the positions it trained; fine-tuning's default source length fits
    them, and a layout past them is refused with the numbers (UserError, not a silent loss)."""
    import torch

    import train
    from conftest import TINY
    from core.errors import UserError
    from core.positions import fit_lengths, positions_of

    out = str(tmp_path / "pmlm")
    train.main(["--data", text_file, "--steps", "1", "--out", out] + TINY)  # --seq-len 48
    state = torch.load(f"{out}/last.pt", weights_only=True)
    assert state["positions"] == dict(total=48)
    assert positions_of({k: v for k, v in state.items() if k != "positions"}) == dict(total=48)  # older ones
    assert fit_lengths("unilm", dict(total=128), None, 24) == 80  # the README's recipe
    assert fit_lengths("unilm", positions_of(state), None, 24) == 24  # 24 + 24 = 48
    with pytest.raises(UserError, match=r"--max-src 40 \+ --max-tgt 24 = 64 exceed .*--max-src <= 24"):
        fit_lengths("unilm", positions_of(state), 40, 24)
    with pytest.raises(UserError, match="--max-src 120 / --max-tgt 24 exceed.*--max-src <= 113"):
        fit_lengths("t5", positions_of(dict(kind="pretrain/t5", args=dict(seq_len=128))), 120, 24)


def test_t5_windows_train_every_encoder_position(tokenizer):
    """T5's windows are as long as lets the corrupted source fill --seq-len: the encoder trains
    every position fine-tuning may use (windows of seq_len - 3 stopped at 113 of 128)."""
    from core.data import TokenStream
    from core.objectives import OBJECTIVES
    from core.t5 import t5_batch, window_for

    for seq_len in (16, 48, 128, 512):
        pos = OBJECTIVES["t5"].positions(seq_len)
        assert pos["encoder"] == seq_len and pos["decoder"] <= seq_len // 3, (seq_len, pos)
    ids = np.random.default_rng(0).integers(tokenizer.n_special, tokenizer.vocab_size, 5000)
    stream = TokenStream([ids.tolist()], window_for(128), 0)
    b = t5_batch(stream, range(8), tokenizer)
    assert b.src.shape[1] == 128 and b.src_valid.all()
    assert b.tgt_in.shape[1] == OBJECTIVES["t5"].positions(128)["decoder"]


def test_windows_respect_documents(tokenizer):
    """UniLMv2's "[SOS] S1 [EOS] S2 [EOS]" with S1 and S2 contiguous text: a window begins where a
    document begins (or inside a document longer than it), S2 goes on with S1's document, the
    documents after it stay separated by [EOS], and no [EOS] is ever masked."""
    from core.data import TokenStream
    from core.unilm.pmlm import pmlm_batch

    rng = np.random.default_rng(0)
    eos = tokenizer.eos_id
    # document d is the run d*1000+100, d*1000+101, ...: every token names its document and place
    docs = [[1000 * d + 100 + j for j in range(int(n))] for d, n in enumerate(rng.integers(3, 40, 200))]
    docs.append([300_100 + j for j in range(90)])  # one document longer than a window
    stream = TokenStream(docs, 50, seed=3, sep=eos)
    long_seen = 0
    for i in range(400):
        w, r = stream.window_at(i)
        text = w[w != eos]
        assert text[0] % 1000 == 100 or text[0] >= 300_000, "a window starts inside a short document"
        long_seen += int(text[0] >= 300_000)
        ids, seg, special = pretraining_sentence_pair(w, r, tokenizer.sos_id, eos)
        s1, s2 = ids[1 : np.flatnonzero(ids == eos)[0]], ids[np.flatnonzero(ids == eos)[0] + 1 :]
        assert s2[0] == s1[-1] + 1, "S2 does not continue S1's document"
        assert special[ids == eos].all() and special.sum() == (ids == eos).sum() + 1
        # between documents, an [EOS]; inside one, consecutive tokens
        body = ids[1:-1][ids[1:-1] != eos]
        assert ((np.diff(body) == 1) | (body[1:] % 1000 == 100)).all()
    assert long_seen > 0
    # the same examples by (seed, index), and [EOS] never masked
    a = pmlm_batch(stream, range(16), tokenizer)
    b = pmlm_batch(stream, range(16), tokenizer)
    assert (a.tokens == b.tokens).all()
    is_target = a.target >= 0
    assert not ((a.tokens == eos) & (a.kind == CONTEXT) & is_target).any()
    assert not (a.target == eos).any()


@pytest.mark.parametrize("variant", ["a", "b"])
def test_mlae_records_only_positions_it_trains(tokenizer, variant):
    """MLAE's window is "[SOS] window [EOS]", seq_len - 1 tokens: after one step every position
    embedding row its checkpoint records has a gradient, and the rows past them have none. An
    older record (one position more) is corrected from --seq-len."""
    import torch

    from core.config import preset
    from core.data import TokenStream
    from core.objectives import OBJECTIVES
    from core.positions import positions_of
    from core.mlae.model import MLAE, mlae_batch, mlae_loss_sums

    seq_len = 48
    total = OBJECTIVES["mlae"].positions(seq_len)["total"]
    assert total == seq_len - 1
    ids = np.random.default_rng(0).integers(tokenizer.n_special, tokenizer.vocab_size, 5000)
    stream = TokenStream([ids.tolist()], OBJECTIVES["mlae"].window(seq_len), 0)
    torch.manual_seed(0)
    model = MLAE(preset("tiny", vocab_size=tokenizer.vocab_size, n_dec_layers=1), variant)
    mlae_loss_sums(model, mlae_batch(stream, range(8), tokenizer))["loss"].backward()
    trained = model.emb.pos.weight.grad.abs().sum(1) > 0  # (max_positions,)
    assert trained[:total].all(), (~trained[:total]).nonzero()[:, 0].tolist()
    assert not trained[total:].any(), trained[total:].nonzero()[:, 0].tolist()
    old = dict(kind="pretrain/mlae", args=dict(seq_len=seq_len), positions=dict(total=seq_len))
    assert positions_of(old) == dict(total=total)
