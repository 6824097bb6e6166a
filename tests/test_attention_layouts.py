"""The Triton pseudo-mask attention kernel against kernels/reference.py on every layout, bias, head
dim and dtype: the output and every gradient. The layouts and the comparison (run_case) live here;
tests/test_attention_launch.py and tests/test_attention_in_model.py use them. Runs under
TRITON_INTERPRET=1 on CPU (set in conftest.py)."""

import pytest
import torch

from kernels import CONTEXT, ORIGINAL, PSEUDO, MaskMeta, reference

pa = pytest.importorskip("kernels.pseudo_attention")

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
# (output, gradient) tolerances per dtype; fp32 runs IEEE dots on both sides
TOL = {torch.float32: (2e-5, 5e-5), torch.bfloat16: (2e-2, 5e-2), torch.float16: (3e-3, 1e-2)}


EMPTY = pa._new  # the launchers' own allocation, uninitialised


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    """Outputs and gradients start as NaN, so an element the kernels forget to write fails."""
    monkeypatch.setattr(
        pa,
        "_new",
        lambda like, dtype=None: torch.full(like.shape, float("nan"), dtype=dtype or like.dtype, device=like.device),
    )


# -----------------------------------------------------------------------------
# layouts: (q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq), each (B, L)


def random_layout(B, Lq, Lk, g, steps=4):
    qk, kk = torch.randint(0, 3, (B, Lq), generator=g), torch.randint(0, 3, (B, Lk), generator=g)
    qs, ks = torch.randint(0, steps, (B, Lq), generator=g), torch.randint(0, steps, (B, Lk), generator=g)
    valid = torch.rand(B, Lk, generator=g) > 0.15
    return qk, qs, kk, ks, valid, None, None


def pmlm_layout(B, n_ctx, g):
    """UniLMv2 pretraining: a CONTEXT part, then per factorization step its ORIGINAL tokens and as
    many PSEUDO tokens, both carrying that step."""
    kinds, steps = [CONTEXT] * n_ctx, [0] * n_ctx
    for s in range(1, 9):
        n = int(torch.randint(1, 4, (1,), generator=g))
        kinds += [ORIGINAL] * n + [PSEUDO] * n
        steps += [s] * (2 * n)
    kind = torch.tensor(kinds).expand(B, -1).clone()
    step = torch.tensor(steps).expand(B, -1).clone()
    valid = torch.ones_like(kind, dtype=torch.bool)
    valid[-1, -5:] = False  # a shorter last row
    return kind, step, kind, step, valid, None, None


def causal_layout(B, L):
    kind = torch.full((B, L), ORIGINAL)
    step = torch.arange(L).expand(B, -1).clone()
    return kind, step, kind, step, None, None, None


def prefix_lm_layout(B, L, n_src):
    kind = torch.full((B, L), ORIGINAL)
    kind[:, :n_src] = CONTEXT
    step = (torch.arange(L) - n_src).clamp_min(0).expand(B, -1).clone()
    return kind, step, kind, step, None, None, None


def seq2seq_pseudo_layout(B, n_src, n_tgt):
    """Fine-tuning: source CONTEXT, target ORIGINAL at step t, one PSEUDO per target token."""
    kind = torch.tensor([CONTEXT] * n_src + [ORIGINAL] * n_tgt + [PSEUDO] * n_tgt).expand(B, -1).clone()
    step = torch.tensor([0] * n_src + list(range(n_tgt)) * 2).expand(B, -1).clone()
    return kind, step, kind, step, None, None, None


def cross_layout(B, Lq, Lk):
    qk, kk = torch.zeros(B, Lq, dtype=torch.long), torch.zeros(B, Lk, dtype=torch.long)
    valid = torch.arange(Lk)[None] < torch.tensor([Lk, Lk - 23])[:B, None]
    return qk, qk.clone(), kk, kk.clone(), valid, None, None


def mlae_cross_layout(B, L, g, ratio=0.15):
    """MLAE decoder (b)'s cross-attention: [MASK] queries at the masked positions of a length-L
    text, keys the latents at the other positions (their original ids), each row its own mask,
    the second row's latents 11 shorter (padding). Returns the layout and (q_pos, k_pos)."""
    n = round(ratio * L)
    masked = torch.stack([torch.randperm(L, generator=g) < n for _ in range(B)])
    q_pos = torch.stack([m.nonzero()[:, 0] for m in masked])
    keep = [(~m).nonzero()[:, 0] for m in masked]
    Lk = L - n
    short = torch.tensor([Lk] + [Lk - 11] * (B - 1))
    valid = torch.arange(Lk)[None] < short[:, None]
    k_pos = torch.stack([torch.where(valid[b], keep[b], 0) for b in range(B)])
    qk, kk = torch.zeros(B, n, dtype=torch.long), torch.zeros(B, Lk, dtype=torch.long)
    return (qk, qk.clone(), kk, kk.clone(), valid, None, None), (q_pos, k_pos)


def pmlm_positions(layout, g):
    """Position ids of a PMLM layout as core/unilm/pmlm.py gives them: the context at 0, 1, ..., each step's
    ORIGINAL tokens and as many PSEUDO ones at the positions of a masked span of the context. The
    context's key tiles then run (consecutive positions), the appended part's do not."""
    kind, step = layout[0], layout[1]
    n_ctx = int((kind[0] == CONTEXT).sum())
    pos = torch.arange(kind.shape[1])
    for s in range(1, int(step[0].max()) + 1):
        n = int(((kind[0] == ORIGINAL) & (step[0] == s)).sum())
        start = int(torch.randint(0, n_ctx - n, (1,), generator=g))
        for k in (ORIGINAL, PSEUDO):
            pos[(kind[0] == k) & (step[0] == s)] = start + torch.arange(n)
    return pos.expand(kind.shape).clone()


def key_tiles(pos, valid, BN):
    """(running, not running): the key tiles of BN whose live keys' positions run k0, k0 + 1, ... and
    the others (the two ways a dK/dV program sums the table's gradient, kernels/attention_backward.py)."""
    B, L = pos.shape
    run = []
    for b in range(B):
        for t in range(0, L, BN):
            live = valid[b, t : t + BN]
            d = (pos[b, t : t + BN] - torch.arange(len(live)))[live]
            run.append(bool((d == d[0]).all()) if len(d) else True)
    return sum(run), len(run) - sum(run)


def packed_layout(B, L, g):
    """Three causal sequences packed in each row, with a padded tail."""
    kind, step, *_ = causal_layout(B, L)
    seq = torch.zeros(B, L, dtype=torch.long)
    for b in range(B):
        cuts = sorted(torch.randperm(L - 2, generator=g)[:2].add(1).tolist())
        seq[b, cuts[0] :] += 1
        seq[b, cuts[1] :] += 1
        step[b] = torch.arange(L) - torch.tensor([0, cuts[0], cuts[1]])[seq[b]]
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[0, -7:] = False
    return kind, step, kind, step, valid, seq, seq.clone()


def decoding_layout(B, Lq, Lk):
    """KV-cache decoding of pseudo-mask seq2seq: the newest [P] tokens against the cache."""
    n_src = 40
    kk = torch.full((B, Lk), ORIGINAL)
    kk[:, :n_src] = CONTEXT
    ks = (torch.arange(Lk) - n_src).clamp_min(0).expand(B, -1).clone()
    kk[:, -Lq:], ks[:, -Lq:] = PSEUDO, Lk - n_src
    qk, qs = kk[:, -Lq:].clone(), ks[:, -Lq:].clone()
    valid = torch.ones(B, Lk, dtype=torch.bool)
    valid[-1, n_src - 5 : n_src] = False
    return qk, qs, kk, ks, valid, None, None


def blind_layout(B, L):
    """The first query tile holds CONTEXT queries and every CONTEXT key is padding: those queries
    see nothing at all (output exactly 0, zero gradients)."""
    kind = torch.full((B, L), ORIGINAL)
    kind[:, :20] = CONTEXT
    step = torch.arange(L).expand(B, -1).clone()
    valid = kind != CONTEXT
    return kind, step, kind, step, valid, None, None


# -----------------------------------------------------------------------------
# the comparison


def report(name, got, want):
    diff = (got.float() - want.float()).abs()
    return f"{name}: max abs diff {diff.max().item():.3g}, mean {diff.mean().item():.3g}"


def run_case(
    layout, H=2, D=16, bias=None, dtype=torch.float32, scale=None, seed=0, M=6, sorted_pos=False, pos=None, tuning=None
):
    """The kernels (launched as `tuning` says, kernels/attention_plan.Tuning; None: the default) against
    the reference on one layout: the output and every gradient."""
    g = torch.Generator().manual_seed(seed)
    qk, qs, kk, ks, valid, qseq, kseq = layout
    B, Lq, Lk = qk.shape[0], qk.shape[1], kk.shape[1]
    dev = DEVICE
    q, k, v = (torch.randn(B, H, L, D, generator=g).to(dev, dtype).requires_grad_() for L in (Lq, Lk, Lk))
    meta = [x if x is None else x.to(dev) for x in (qk, qs, kk, ks, valid, qseq, kseq)]
    leaves = [q, k, v]
    if bias == "rel":
        table = torch.randn(H, 2 * M + 1, generator=g).to(dev).requires_grad_()
        pos_q = torch.randint(0, 3 * M, (B, Lq), generator=g).to(dev)
        pos_k = torch.randint(0, 3 * M, (B, Lk), generator=g).to(dev)
        if sorted_pos:  # real positions: tiles farther apart than M read one clamped distance
            pos_q, pos_k = (torch.arange(L, device=dev).expand(B, L) for L in (Lq, Lk))
        if pos is not None:  # given position ids (a cross-attention's: queries and keys of one text)
            pos_q, pos_k = (p.to(dev) for p in pos)
        bias_arg = reference.RelPosBias(table, pos_q, pos_k, M)
        leaves.append(table)
    elif bias == "dense":
        bias_arg = torch.randn(B, H, Lq, Lk, generator=g).to(dev).requires_grad_()
        leaves.append(bias_arg)
    elif bias == "broadcast":
        bias_arg = torch.randn(1, H, 1, Lk, generator=g).to(dev).requires_grad_()
        leaves.append(bias_arg)
    else:
        bias_arg = None
    grad_out = torch.randn(B, H, Lq, D, generator=g).to(dev, dtype)

    meta = MaskMeta(*meta)
    out = pa.pseudo_attention(q, k, v, meta, bias=bias_arg, scale=scale, tuning=tuning or pa.TUNING)
    grads = torch.autograd.grad(out, leaves, grad_out)
    ref = reference.attention(q, k, v, meta, bias=bias_arg, scale=scale)
    ref_grads = torch.autograd.grad(ref, leaves, grad_out)

    tol_out, tol_grad = TOL[dtype]
    assert out.shape == ref.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "non-finite output"
    assert torch.allclose(out.float(), ref.float(), atol=tol_out, rtol=tol_out), report("output", out, ref)
    names = ["dq", "dk", "dv", f"d{bias}"]
    for name, got, want in zip(names, grads, ref_grads):
        assert torch.isfinite(got).all(), f"{name} not finite"
        assert torch.allclose(got.float(), want.float(), atol=tol_grad, rtol=tol_grad), report(name, got, want)
    return out, grads


def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("seed,Lq,Lk,steps", [(0, 40, 40, 4), (1, 63, 100, 3), (2, 100, 63, 6), (3, 17, 33, 1)])
def test_random_metadata(seed, Lq, Lk, steps):
    run_case(random_layout(2, Lq, Lk, gen(seed), steps), seed=seed)


@pytest.mark.parametrize("bias", [None, "rel"])
def test_pmlm_layout(bias):
    run_case(pmlm_layout(2, 60, gen(4)), bias=bias, D=32)


@pytest.mark.parametrize("M", [128, 5])
def test_pmlm_positions(M):
    """PMLM with its real position ids: the context's key tiles sum the table's gradient in registers,
    window by window (scattered appended queries against them included), the appended part's add it
    pair by pair; M = 5 also makes FAR tiles. The dead keys of the last row sit at position 0."""
    layout = pmlm_layout(2, 60, gen(70))
    pos = pmlm_positions(layout, gen(71))
    pos[-1, -5:] = 0
    running, not_running = key_tiles(pos, layout[4], pa.TUNING.config(torch.device(DEVICE), 32).BNK)
    assert running > 0 and not_running > 0
    run_case(layout, bias="rel", M=M, pos=(pos, pos), D=32)


def test_causal():
    run_case(causal_layout(2, 100), bias="rel")


def tile_classes(layout, pos, M, blocks=(16, 16)):
    """(B, n_qt, n_kt) classes of a layout's q-major map as the kernels get it (kernels/tilemap.py)."""
    from kernels.tilemap import build_map, codes

    qk, qs, kk, ks, valid, qseq, kseq = layout
    tiles = build_map(
        codes(qk, qs, None, qseq, pos[0]).to(DEVICE),
        codes(kk, ks, valid, kseq, pos[1]).to(DEVICE),
        blocks,
        None,
        qseq is not None,
        M,
    )
    counts = tiles.q_count.cpu()
    return counts  # (B, n_qt, 3): PARTIAL, FULL, FAR tiles per query tile


@pytest.mark.parametrize("layout", ["causal", "bidirectional"])
def test_tiles_whose_distances_clamp_to_one_value(layout):
    """With positions 0..L-1 and max distance 4, most 16x16 tiles read a single bias entry: the
    kernels' FAR loops (a scalar bias load, the gradient summed into one of two per program) next to
    the per-pair ones. Which tiles are FAR is tested against the dense mask in tests/test_tilemap.py."""
    lay = causal_layout(2, 100) if layout == "causal" else random_layout(2, 100, 100, gen(9), steps=1)
    if layout == "bidirectional":
        lay = (torch.zeros_like(lay[0]),) + lay[1:2] + (torch.zeros_like(lay[2]),) + lay[3:]
    run_case(lay, bias="rel", M=4, sorted_pos=True)
    pos = torch.arange(100).expand(2, 100)
    counts = tile_classes(lay, (pos, pos), 4)
    assert counts[..., 2].sum() > 0, "no FAR tile in the layout"


def test_prefix_lm():
    run_case(prefix_lm_layout(2, 63, 30))


def test_seq2seq_pseudo():
    run_case(seq2seq_pseudo_layout(1, 34, 30), bias="rel")


def test_cross_attention_with_padding():
    run_case(cross_layout(2, 20, 70), bias="dense")


@pytest.mark.parametrize("M,seed", [(128, 21), (4, 22)])
def test_mlae_cross_attention_with_relative_bias(M, seed):
    """Decoder (b): each [MASK] against every latent by their original position ids. M = 4 makes
    FAR tiles (latent tiles entirely before or after a [MASK] tile) next to the per-pair ones."""
    layout, pos = mlae_cross_layout(2, 300, gen(seed))
    run_case(layout, bias="rel", M=M, pos=pos)
    if M == 4:
        counts = tile_classes(layout, pos, M)
        assert counts[..., 2].sum() > 0 and counts[..., :2].sum() > 0


def test_cross_attention_with_relative_bias_and_any_positions():
    """Position ids in any order, repeated, queries and keys of different lengths."""
    run_case(cross_layout(2, 37, 70), bias="rel", seed=3)


def test_a_bias_table_without_gradient():
    """A relative bias table that requires no gradient (frozen): the dK/dV kernel compiles without
    the table's gradient, and q, k, v get the reference's gradients."""
    g = gen(31)
    layout = pmlm_layout(2, 30, g)
    q, k, v = (torch.randn(2, 2, layout[0].shape[1], 16, generator=g).to(DEVICE).requires_grad_() for _ in range(3))
    pos = torch.arange(layout[0].shape[1], device=DEVICE).expand(2, -1)
    bias = reference.RelPosBias(torch.randn(2, 13, generator=g).to(DEVICE), pos, pos, 6)
    meta = MaskMeta(*(x if x is None else x.to(DEVICE) for x in layout))
    grad_out = torch.randn_like(q)
    got = torch.autograd.grad(pa.pseudo_attention(q, k, v, meta, bias=bias), (q, k, v), grad_out)
    want = torch.autograd.grad(reference.attention(q, k, v, meta, bias=bias), (q, k, v), grad_out)
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert torch.allclose(a, b, atol=5e-5, rtol=5e-5), report(name, a, b)


def test_packed_sequences():
    run_case(packed_layout(2, 90, gen(5)), bias="rel")


@pytest.mark.parametrize("Lq", [1, 2])
def test_decoding(Lq):
    run_case(decoding_layout(2, Lq, 70), bias="rel", D=32)


def test_broadcast_bias_and_scale():
    run_case(random_layout(1, 30, 50, gen(6)), bias="broadcast", scale=0.3)


def test_query_tile_that_sees_nothing():
    out, grads = run_case(blind_layout(2, 50), bias="rel")
    assert (out[:, :, :20] == 0).all(), "a query that sees no key must output exactly 0"
    assert (grads[0][:, :, :20] == 0).all(), "and receive zero gradient"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    if dtype == torch.bfloat16 and not CUDA:
        pytest.skip(
            "the Triton interpreter cannot run a bf16 tl.dot (it multiplies the uint16 bit "
            "patterns): bf16 is checked on CUDA only"
        )
    D = 64 if CUDA else 32
    run_case(pmlm_layout(2, 200 if CUDA else 60, gen(8)), D=D, dtype=dtype, bias="rel")
    run_case(random_layout(2, 63, 100, gen(9)), D=D, dtype=dtype)


@pytest.mark.parametrize("D", [64, 128])
def test_head_dims(D):
    run_case(random_layout(1, 40, 33, gen(10)), D=D, bias="rel")


def test_perturbation_of_an_unseen_key():
    """PMLM: changing the appended ORIGINAL copy of step 1 moves no CONTEXT output and no output of
    a step-1 PSEUDO query, and does move a PSEUDO query of a later step."""
    kind, step, _, _, valid, _, _ = pmlm_layout(1, 30, gen(13))
    kind, step, valid = (x.to(DEVICE) for x in (kind, step, valid))
    g = gen(14)
    q, k, v = (torch.randn(1, 2, kind.shape[1], 16, generator=g).to(DEVICE) for _ in range(3))
    j = int(torch.nonzero((kind[0] == ORIGINAL) & (step[0] == 1))[0])
    k2, v2 = k.clone(), v.clone()
    k2[:, :, j] += 3.0
    v2[:, :, j] -= 3.0
    a = pa.pseudo_attention(q, k, v, MaskMeta(kind, step, kind, step, valid))
    b = pa.pseudo_attention(q, k2, v2, MaskMeta(kind, step, kind, step, valid))
    moved = (a - b).abs().amax((0, 1, 3)) > 1e-6  # (L,)
    unseen = (kind[0] == CONTEXT) | ((kind[0] == PSEUDO) & (step[0] <= 1))
    later = (kind[0] == PSEUDO) & (step[0] > 1)
    assert not moved[unseen].any(), "an output moved that must not see the ORIGINAL copy"
    assert moved[later].all(), "a later PSEUDO query did not see the ORIGINAL copy"
