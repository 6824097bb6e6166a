"""The attention rule: the reference against a plainly written dense-mask softmax, and the rule
checked by perturbation through the whole model (SPEC, PMLM "Must hold")."""

import numpy as np
import pytest
import torch

import kernels
from core.config import preset
from core.model import UnifiedLM
from core.unilm.pmlm import pmlm_example, pretraining_sentence_pair
from kernels import CONTEXT, ORIGINAL, PSEUDO, reference


def dense_mask_attention(q, k, v, mask, bias=None):
    """Textbook attention with an explicit (B, Lq, Lk) mask; rows with no visible key give 0."""
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~mask[:, None], float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v


def hand_mask(q_kind, q_step, k_kind, k_step):
    """The rule as nested loops over token pairs, independent of the vectorised reference."""
    B, Lq = q_kind.shape
    Lk = k_kind.shape[1]
    m = torch.zeros(B, Lq, Lk, dtype=torch.bool)
    for b in range(B):
        for i in range(Lq):
            for j in range(Lk):
                qk, qs, kk, ks = int(q_kind[b, i]), int(q_step[b, i]), int(k_kind[b, j]), int(k_step[b, j])
                if kk == CONTEXT:
                    m[b, i, j] = True
                elif qk == ORIGINAL:
                    m[b, i, j] = kk == ORIGINAL and ks <= qs
                elif qk == PSEUDO:
                    m[b, i, j] = (kk == ORIGINAL and ks < qs) or (kk == PSEUDO and ks == qs)
    return m


def random_meta(B, L, g):
    kind = torch.randint(0, 3, (B, L), generator=g)
    step = torch.randint(0, 4, (B, L), generator=g)
    return kind, step


@pytest.mark.parametrize("with_bias", [False, True])
def test_reference_matches_dense_mask(with_bias):
    g = torch.Generator().manual_seed(0)
    B, H, Lq, Lk, D = 2, 3, 13, 17, 16
    q, k, v = (torch.randn(B, H, L, D, generator=g, dtype=torch.float64, requires_grad=True) for L in (Lq, Lk, Lk))
    q_kind, q_step = random_meta(B, Lq, g)
    k_kind, k_step = random_meta(B, Lk, g)
    q_kind[0, 0] = CONTEXT  # ...and make sure some query sees nothing: all its keys are invalid
    k_valid = torch.rand(B, Lk, generator=g) > 0.2
    k_valid[1] = False
    mask = hand_mask(q_kind, q_step, k_kind, k_step) & k_valid[:, None]
    assert torch.equal(mask, reference.visible(q_kind, q_step, k_kind, k_step, k_valid))
    bias = None
    if with_bias:
        table = torch.randn(H, 32, generator=g, dtype=torch.float64, requires_grad=True)
        pos_q, pos_k = torch.randint(0, 300, (B, Lq), generator=g), torch.randint(0, 300, (B, Lk), generator=g)
        bias = kernels.rel_pos_bias(table, pos_q, pos_k)
    out = kernels.attention(
        q, k, v, kernels.MaskMeta(q_kind, q_step, k_kind, k_step, k_valid), bias=bias, backend="reference"
    )
    want = dense_mask_attention(q, k, v, mask, None if bias is None else reference.dense_bias(bias))
    assert torch.allclose(out, want, atol=1e-12), (out - want).abs().max()
    assert (out[1] == 0).all(), "a query with no visible key must give exactly 0"
    go = torch.randn_like(out)
    inputs = [q, k, v] + ([table] if with_bias else [])
    g1 = torch.autograd.grad(out, inputs, go, retain_graph=True)
    g2 = torch.autograd.grad(want, inputs, go)
    for a, b in zip(g1, g2):
        assert torch.isfinite(a).all()
        assert torch.allclose(a, b, atol=1e-10), (a - b).abs().max()


def test_packed_sequences_do_not_mix():
    g = torch.Generator().manual_seed(1)
    B, H, L, D = 1, 2, 12, 16
    q, k, v = (torch.randn(B, H, L, D, generator=g) for _ in range(3))
    z = torch.zeros(B, L, dtype=torch.long)
    seq = torch.tensor([[0] * 5 + [1] * 7])
    out = kernels.attention(q, k, v, kernels.MaskMeta(z, z, z, z, q_seq=seq, k_seq=seq), backend="reference")
    first = kernels.attention(
        q[:, :, :5], k[:, :, :5], v[:, :, :5], kernels.MaskMeta(*[z[:, :5]] * 4), backend="reference"
    )
    assert torch.allclose(out[:, :, :5], first, atol=1e-6)


def test_t5_buckets():
    d = torch.arange(-200, 201)
    b = kernels.t5_bucket(d, 32, 128)
    assert b.min() == 0 and b.max() == 31
    assert (b[d == 0] == 0).all() and (b[d > 0] >= 16).all() and (b[d < 0] < 16).all()
    near = d.abs() < 8  # small distances get exact buckets, the upper half for keys after the query
    assert torch.equal(b[near], torch.where(d[near] > 0, d[near] + 16, -d[near]))
    assert (b[d >= 128] == 31).all() and (b[d <= -128] == 15).all()


# -----------------------------------------------------------------------------
# perturbation through the whole model


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = UnifiedLM(preset("tiny", vocab_size=600, dropout=0.0, rel_pos=True))
    return m.eval()


def run(model, ex):
    t = {k: torch.from_numpy(v)[None] for k, v in ex.items()}
    with torch.no_grad():
        return model(t["tokens"], t["pos"], t["seg"], t["kind"], t["step"])[0]


def test_pmlm_information_flow(model, tokenizer):
    rng = np.random.default_rng(11)
    ids, seg, special = pretraining_sentence_pair(rng.integers(100, 600, 80), rng, tokenizer.sos_id, tokenizer.eos_id)
    ex = pmlm_example(ids, seg, special, rng, tokenizer)
    kind, step = ex["kind"], ex["step"]
    assert step.max() >= 3
    base = run(model, ex)
    checked_later = 0
    for s in range(1, step.max() + 1):
        j = np.flatnonzero((kind == ORIGINAL) & (step == s))[0]
        changed = dict(ex, tokens=ex["tokens"].copy())
        changed["tokens"][j] = 100 + (changed["tokens"][j] - 99) % 500
        diff = (run(model, changed) - base).abs().amax(-1)
        unaffected = (kind == CONTEXT) | ((kind == PSEUDO) & (step <= s)) | ((kind == ORIGINAL) & (step < s))
        assert diff[torch.from_numpy(unaffected)].max() == 0, "information leaked to a token that must not see it"
        later = (kind == PSEUDO) & (step > s)
        if later.any():
            assert diff[torch.from_numpy(later)].min() > 0, "a [P] of a later step does not see an earlier original"
            checked_later += 1
    assert checked_later >= 2
    # and the context reaches every [P]: change an unmasked context token
    c = np.flatnonzero((kind == CONTEXT) & (ex["target"] < 0))[5]
    changed = dict(ex, tokens=ex["tokens"].copy())
    changed["tokens"][c] += 1
    diff = (run(model, changed) - base).abs().amax(-1)
    assert diff[torch.from_numpy(kind == PSEUDO)].min() > 0


def layout(kind, step, n=None):
    L = len(kind)
    rng = np.random.default_rng(2)
    return dict(
        tokens=rng.integers(100, 600, L),
        pos=np.arange(L),
        seg=np.zeros(L, dtype=np.int64),
        kind=np.asarray(kind),
        step=np.asarray(step),
    )


def perturb(model, ex, j):
    base = run(model, ex)
    changed = dict(ex, tokens=ex["tokens"].copy())
    changed["tokens"][j] = 100 + (changed["tokens"][j] - 99) % 500
    return (run(model, changed) - base).abs().amax(-1)


def test_causal(model):
    L = 20
    ex = layout([ORIGINAL] * L, list(range(L)))
    diff = perturb(model, ex, 7)
    assert diff[:7].max() == 0 and diff[7:].min() > 0


def test_prefix_lm(model):
    S, T = 12, 8
    ex = layout([CONTEXT] * S + [ORIGINAL] * T, [0] * S + list(range(1, T + 1)))
    diff = perturb(model, ex, S + 3)  # a target token
    assert diff[: S + 3].max() == 0 and diff[S + 3 :].min() > 0
    diff = perturb(model, ex, 4)  # a source token reaches everything
    assert diff.min() > 0


def test_padding_is_invisible(model):
    L, P = 16, 5
    ex = layout([CONTEXT] * (L + P), [0] * (L + P))
    t = {k: torch.from_numpy(v)[None] for k, v in ex.items()}
    valid = torch.arange(L + P)[None] < L
    with torch.no_grad():
        padded = model(t["tokens"], t["pos"], t["seg"], t["kind"], t["step"], valid)[0, :L]
        t["tokens"][0, L:] = 7  # other padding content
        padded2 = model(t["tokens"], t["pos"], t["seg"], t["kind"], t["step"], valid)[0, :L]
        alone = model(*(t[k][:, :L] for k in ("tokens", "pos", "seg", "kind", "step")))[0]
    assert torch.equal(padded, padded2)
    assert torch.allclose(padded, alone, atol=1e-5)
