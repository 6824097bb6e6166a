"""The launches tools/aot.py compiles ahead of time for an H100: for each kernel module of kernels/, a
list of (case name, thunk) (CASES). Every thunk calls the module's own launchers on CPU tensors
shaped like a real launch, with the configuration the launcher picks for a CUDA device; tools/aot.py
records the launches instead of running them. The yardstick, a plain FlashAttention forward, lives
here too: it is an instrument, not a kernel of the model.
"""

import torch
import triton
import triton.language as tl

from kernels import early_exit as ee
from kernels import offramp_loss as ol
from kernels import pseudo_attention as pa
from kernels import tilemap as tm
from kernels.attention_plan import CUDA_CONFIGS, FUSED_DQ_MAX_D, MAP_WARPS, TUNING, Launch
from kernels.reference import RelPosBias, rel_pos_bias

# -----------------------------------------------------------------------------
# the attention kernels (kernels/pseudo_attention.py): the launchers on CPU tensors shaped like the model's


def attention(tuning=TUNING):
    """[(case name, thunk)]: each thunk runs the forward and backward launchers with the CUDA
    configuration of `tuning` on CPU tensors like a base-size layer's (B=2, H=12, L=768, PMLM layout). Variants:
    no bias, relative bias (the model's self-attention) with and without the table's gradient and
    with dQ fused into the dK/dV kernel (D 64; at D 128 the same binary as rel), and that with the
    table's gradient by atomics alone (Tuning.grad_windows off; D 64, the windows' only head dim),
    packed sequences, a dense bias without and with its gradient, decoding (one query against 768
    cached keys), and MLAE decoder (b)'s cross-attention with its relative bias. Nothing runs: tools/aot.py records the
    launches, so
    the codes and the map are the readable versions' and the lists empty tensors of their shapes."""
    cases = []
    # bf16 only: fp16 compiles to the same registers, spills and loop sizes (docs/LOG.md), and CI's
    # suite has a time budget
    variants = ("norel", "rel", "rel_frozen", "rel_fused", "rel_fused_atomics", "seq", "dense", "dense_grad")
    for variant in variants + ("decode", "cross"):
        for dtype in (torch.bfloat16,):
            for D in (64,) if variant == "rel_fused_atomics" else (64, 128):
                cases.append(
                    (
                        f"{variant}-{str(dtype)[6:]}-d{D}",
                        lambda variant=variant, dtype=dtype, D=D: _attention_launch(variant, dtype, D, tuning),
                    )
                )
    return cases


def _attention_meta(q, kind_q, step_q, kind_k, step_k, valid, seq_q, seq_k, bias, dense, D, tuning):
    from kernels.attention_plan import table_width
    from kernels.tilemap import TileMap, codes

    cfg = tuning.config(torch.device("cuda"), D)
    B, H, Lq, _ = q.shape
    Lk = kind_k.shape[1]
    rel = isinstance(bias, RelPosBias)
    pad = lambda c: torch.nn.functional.pad(c, (0, -c.shape[2] % 16))  # noqa: E731  (as code_tensor's rows)
    qc = pad(codes(kind_q, step_q, None, seq_q, bias.q_pos if rel else None))
    kc = pad(codes(kind_k, step_k, valid, seq_k, bias.k_pos if rel else None))
    n_qt, n_kt, n_qs, n_ks = (-(-L // blk) for L, blk in ((Lq, cfg.BM), (Lk, cfg.BN), (Lq, cfg.BMK), (Lk, cfg.BNK)))
    tiles = TileMap(
        (cfg.BM, cfg.BN),
        (cfg.BMK, cfg.BNK),
        torch.empty(B, n_qt, 4, n_kt, dtype=torch.int32),
        torch.empty(B, n_qt, 4, dtype=torch.int32),
        torch.empty(B, n_ks, 4, n_qs, dtype=torch.int32),
        torch.empty(B, n_ks, 4, dtype=torch.int32),
    )
    M = bias.max_distance if rel else 0
    return Launch(
        cfg=cfg,
        tiles=tiles,
        qc=qc,
        kc=kc,
        table=torch.empty(H, 4, table_width(M)) if rel else qc,
        max_dist=M,
        dense=None if dense is None else dense.expand(B, H, Lq, Lk),
        scale=D**-0.5,
        has_seq=seq_q is not None,
        rel=rel,
        fused=False,
        windows=tuning.windows(D),
        precision="tf32",
        table_dtype=None,
        dense_dtype=None,
    )


def _attention_launch(variant, dtype, D, tuning, B=2, H=12, L=768):
    g = torch.Generator().manual_seed(0)
    if variant == "cross":
        return _attention_cross(dtype, D, B, H, L, g, tuning)
    Lq = 1 if variant == "decode" else L
    q = torch.randn(B, Lq, H, D, generator=g).to(dtype).transpose(1, 2)  # the model's (B, L, H, D) view
    k, v = (torch.randn(B, L, H, D, generator=g).to(dtype).transpose(1, 2) for _ in range(2))
    kind = torch.zeros(B, L, dtype=torch.long)
    kind[:, 512:], kind[:, 640:] = 1, 2
    step = torch.zeros(B, L, dtype=torch.long)
    step[:, 512:640] = step[:, 640:] = torch.arange(128) // 8 + 1
    pos = torch.arange(L).expand(B, L)
    q_kind, q_step, q_pos = (x[:, -Lq:] for x in (kind, step, pos))
    seq = (torch.arange(L) // 384).expand(B, L) if variant == "seq" else None
    bias = rel_pos_bias(torch.randn(H, 32, generator=g), q_pos, pos, 128)
    dense = None
    if variant == "norel":
        bias = None
    elif variant.startswith("dense"):
        bias = dense = torch.randn(1, H, Lq, L, generator=g).to(dtype)
    meta = _attention_meta(
        q, q_kind, q_step, kind, step, None, None if seq is None else seq[:, -Lq:], seq, bias, dense, D, tuning
    )
    fused = variant.startswith("rel_fused") and D <= FUSED_DQ_MAX_D  # as attention_plan.Tuning.fused does
    meta = meta._replace(fused=fused, windows=meta.windows and variant != "rel_fused_atomics")
    pa._forward(q, k, v, meta)
    pa._backward(
        q,
        k,
        v,
        torch.zeros_like(q),
        torch.zeros(B, H, Lq),
        torch.randn_like(q),
        meta,
        dense_grad=variant == "dense_grad",
        table_grad=variant != "rel_frozen",
    )


def _attention_cross(dtype, D, B, H, L, g, tuning):
    masked = torch.stack([torch.randperm(L, generator=g) < round(0.15 * L) for _ in range(B)])  # (B, L)
    q_pos = torch.stack([m.nonzero()[:, 0] for m in masked])  # every row masks as many
    keep = [(~m).nonzero()[:, 0] for m in masked]
    Lk = len(keep[0])
    k_pos = torch.stack([keep[0], torch.cat([keep[1][:-9], keep[1].new_zeros(9)])])  # the second row 9 shorter
    k_valid = torch.arange(Lk)[None] < torch.tensor([Lk, Lk - 9])[:, None]
    Lq = q_pos.shape[1]
    q = torch.randn(B, Lq, H, D, generator=g).to(dtype).transpose(1, 2)
    k, v = (torch.randn(B, Lk, H, D, generator=g).to(dtype).transpose(1, 2) for _ in range(2))
    q_kind, k_kind = torch.zeros(B, Lq, dtype=torch.long), torch.zeros(B, Lk, dtype=torch.long)
    bias = rel_pos_bias(torch.randn(H, 32, generator=g), q_pos, k_pos, 128)
    meta = _attention_meta(q, q_kind, q_kind, k_kind, k_kind, k_valid, None, None, bias, None, D, tuning)
    pa._forward(q, k, v, meta)
    pa._backward(q, k, v, torch.zeros_like(q), torch.zeros(B, H, Lq), torch.randn_like(q), meta, dense_grad=False)


# -----------------------------------------------------------------------------
# the early-exit kernels (kernels/early_exit.py): shaped like an H100 launch of the base model (C = 768,
# the 8000-token vocabulary, 4096 active tokens)


def early_exit():
    M, N, C, V = 8192, 4096, 768, 8000

    def compact():
        flat = torch.zeros(M, dtype=torch.uint8)
        ee._compact_launch(
            flat, torch.empty(M, dtype=torch.long), torch.zeros(1, dtype=torch.int32), ee._compact_config("cuda")
        )

    def copy(dtype, kind):
        def thunk():
            x, rows = torch.empty((M, C), dtype=dtype), torch.empty((N, C), dtype=dtype)
            index, cfg = torch.arange(N), ee._copy_config("cuda", C)
            if kind == "gather":
                ee._gather_launch(x, index, rows, cfg)
            else:
                ee._scatter_launch(None if kind == "zero" else rows, index, x, cfg)

        return thunk

    def ramp(dtype, with_bias):
        def thunk():
            bias = torch.empty(V, dtype=torch.float32) if with_bias else None
            ee._offramp_launch(
                torch.empty((N, C), dtype=dtype),
                torch.empty((V, C), dtype=dtype),
                bias,
                ee._offramp_config("cuda", N, V, C, dtype),
            )

        return thunk

    cases = [("compact_index", compact)]
    # bf16 only, as for the attention: fp16 compiles these kernels to the same registers, spills and
    # loops, and CI's suite has a time budget
    for dtype in (torch.bfloat16,):
        name = str(dtype).split(".")[1]
        cases += [
            (f"gather_rows_{name}", copy(dtype, "gather")),
            (f"scatter_rows_{name}", copy(dtype, "scatter")),
            (f"scatter_zero_{name}", copy(dtype, "zero")),
            (f"offramp_{name}", ramp(dtype, False)),
            (f"offramp_bias_{name}", ramp(dtype, True)),
        ]
    return cases


# -----------------------------------------------------------------------------
# the tile map's kernels (kernels/tilemap.py)


def tilemap():
    """The codes and the two map kernels with their CUDA launches on a base-size PMLM batch (B=2,
    L=768) with a relative bias, at the blocks of head dims 64 and 128 (attention_plan.CUDA_CONFIGS),
    and the forward-only map of decoding (one query row)."""

    def thunk(Lq, backward, seq, D=64):
        B, L = 2, 768
        cfg = CUDA_CONFIGS[D]
        kind = torch.zeros(B, L, dtype=torch.long)
        step, pos = torch.zeros_like(kind), torch.arange(L).expand(B, L)
        qc = torch.empty(6, B, -(-Lq // 16) * 16, dtype=torch.int32)
        tm._codes_launch(kind, step, None, kind if seq else None, pos, "cuda")
        kc = torch.empty(6, B, L, dtype=torch.int32)
        tm.build_map(
            qc,
            kc,
            (cfg.BM, cfg.BN),
            (cfg.BMK, cfg.BNK) if backward else None,
            seq,
            128,
            warps=MAP_WARPS,
            device_type="cuda",
            Lq=Lq,
            Lk=L,
        )

    return [
        ("map-pmlm", lambda: thunk(768, True, False)),
        ("map-packed", lambda: thunk(768, True, True)),
        ("map-pmlm-d128", lambda: thunk(768, True, False, 128)),
        ("map-decode", lambda: thunk(1, False, False)),
    ]


# -----------------------------------------------------------------------------
# the off-ramp's training loss (kernels/offramp_loss.py)


def offramp_loss():
    """The row kernel as a 4,096-row chunk at V 8,000 launches it on a GPU, bf16 and fp16 logits,
    with and without a bias."""
    N, V = 4096, 8000

    def thunk(dtype, with_bias):
        def run():
            bias = torch.empty(V, dtype=torch.float32) if with_bias else None
            ol._rows_launch(
                torch.empty((N, V), dtype=dtype),
                bias,
                torch.zeros(N, dtype=torch.long),
                torch.ones((), dtype=torch.long),
                torch.empty(N, dtype=torch.long),
                torch.empty(N),
                torch.empty(N),
                0,
                -100,
                ol._rows_config("cuda", V),
            )

        return run

    return [
        (f"ce_rows{'_bias' if b else ''}_{str(d)[6:]}", thunk(d, b))
        for d in (torch.bfloat16,)  # bf16 only: see early_exit() above
        for b in (False, True)
    ]


# -----------------------------------------------------------------------------
# the yardstick: a plain FlashAttention-2 forward (no mask, no bias, every key tile in order),
# compiled with the pseudo-mask forward's blocks, so that the SASS of one loop iteration can be
# compared: how much the metadata, the tile list and the bias cost per tile


@triton.jit(do_not_specialize=["L"])
def _plain_flash_fwd(Q, K, V, O, sb, sh, sm, H, L, qk_scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    base = (bh // H).to(tl.int64) * sb + (bh % H).to(tl.int64) * sh
    rows = pid_m * BM + tl.arange(0, BM)
    offs_n, offs_d = tl.arange(0, BN), tl.arange(0, D)
    q = tl.load(Q + base + rows[:, None] * sm + offs_d[None, :], mask=rows[:, None] < L, other=0.0)
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, L, BN):
        cols = start + offs_n
        k = tl.load(K + base + cols[:, None] * sm + offs_d[None, :], mask=cols[:, None] < L, other=0.0)
        v = tl.load(V + base + cols[:, None] * sm + offs_d[None, :], mask=cols[:, None] < L, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(
        O + base + rows[:, None] * sm + offs_d[None, :],
        (acc / l_i[:, None]).to(O.dtype.element_ty),
        mask=rows[:, None] < L,
    )


@triton.jit(do_not_specialize=["L"])
def _plain_flash_bwd(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    DQ,
    sb,
    sh,
    sm,
    H,
    L,
    qk_scale,
    scale,
    D: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    FUSED_DQ: tl.constexpr,
):
    """A plain FlashAttention-2 dK/dV kernel (no mask, no bias, every query tile in order; the same
    contiguous (B, H, L, D) strides for every tensor), with dQ added by atomics where FUSED_DQ: what
    the pseudo-mask dK/dV kernel's loops are read against."""
    pid_n, bh = tl.program_id(0), tl.program_id(1)
    base = (bh // H).to(tl.int64) * sb + (bh % H).to(tl.int64) * sh
    cols = pid_n * BN + tl.arange(0, BN)
    offs_m, offs_d = tl.arange(0, BM), tl.arange(0, D)
    k = tl.load(K + base + cols[:, None] * sm + offs_d[None, :], mask=cols[:, None] < L, other=0.0)
    v = tl.load(V + base + cols[:, None] * sm + offs_d[None, :], mask=cols[:, None] < L, other=0.0)
    dk = tl.zeros((BN, D), tl.float32)
    dv = tl.zeros((BN, D), tl.float32)
    for start in range(0, L, BM):
        rows = start + offs_m
        q_t = tl.load(Q + base + rows[None, :] * sm + offs_d[:, None], mask=rows[None, :] < L, other=0.0)
        do = tl.load(DO + base + rows[:, None] * sm + offs_d[None, :], mask=rows[:, None] < L, other=0.0)
        lse = tl.load(LSE + bh.to(tl.int64) * L + rows, mask=rows < L, other=float("inf"))
        delta = tl.load(DELTA + bh.to(tl.int64) * L + rows, mask=rows < L, other=0.0)
        p_t = tl.exp2(tl.dot(k, q_t) * qk_scale - lse[None, :])  # (BN, BM)
        dv += tl.dot(p_t.to(do.dtype), do)
        ds_t = p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])
        dk += tl.dot(ds_t.to(q_t.dtype), tl.trans(q_t))
        if FUSED_DQ:
            dq_t = tl.dot(tl.trans(k), ds_t.to(k.dtype)) * scale  # (D, BM)
            tl.atomic_add(DQ + base + rows[None, :] * sm + offs_d[:, None], dq_t, mask=rows[None, :] < L, sem="relaxed")
    tl.store(
        DK + base + cols[:, None] * sm + offs_d[None, :], (dk * scale).to(DK.dtype.element_ty), mask=cols[:, None] < L
    )
    tl.store(DV + base + cols[:, None] * sm + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=cols[:, None] < L)


def yardstick(tuning=TUNING):
    """The yardsticks at D = 64 and 128: the forward with the pseudo-mask forward's CUDA blocks, the
    dK/dV kernel with the pseudo-mask dK/dV kernel's (and its dQ fused where the plan fuses it)."""

    def launch(dtype, D, B=2, H=12, L=768):
        cfg = tuning.config(torch.device("cuda"), D)
        BM, BN, warps, stages = cfg.BM, cfg.BN, cfg.fwd_warps, cfg.fwd_stages
        q, k, v, o = (torch.empty(B, H, L, D, dtype=dtype) for _ in range(4))
        _plain_flash_fwd[(triton.cdiv(L, BM), B * H)](
            q,
            k,
            v,
            o,
            *q.stride()[:3],
            H,
            L,
            D**-0.5 * 1.4426950408889634,
            D=D,
            BM=BM,
            BN=BN,
            num_warps=warps,
            num_stages=stages,
        )

    def launch_bwd(dtype, D, B=2, H=12, L=768):
        cfg = tuning.config(torch.device("cuda"), D)
        q, k, v, do, dk, dv = (torch.empty(B, H, L, D, dtype=dtype) for _ in range(6))
        lse, delta, dq = torch.empty(B, H, L), torch.empty(B, H, L), torch.empty(B, H, L, D)
        _plain_flash_bwd[(triton.cdiv(L, cfg.BNK), B * H)](
            q,
            k,
            v,
            do,
            lse,
            delta,
            dk,
            dv,
            dq,
            *q.stride()[:3],
            H,
            L,
            D**-0.5 * 1.4426950408889634,
            D**-0.5,
            D=D,
            BM=cfg.BMK,
            BN=cfg.BNK,
            FUSED_DQ=tuning.fused(D),
            num_warps=cfg.kv_warps,
            num_stages=cfg.kv_stages,
        )

    return [(f"plain-flash-bfloat16-d{D}", lambda D=D: launch(torch.bfloat16, D)) for D in (64, 128)] + [
        (f"plain-flash-bwd-bfloat16-d{D}", lambda D=D: launch_bwd(torch.bfloat16, D)) for D in (64, 128)
    ]


CASES = {
    "pseudo_attention": attention,
    "tilemap": tilemap,
    "early_exit": early_exit,
    "offramp_loss": offramp_loss,
    "yardstick": yardstick,
}
TUNED = ("pseudo_attention", "yardstick")  # the cases launched as a Tuning says (tools.aot --config)


def cases(name, tuning=None):
    """[(case name, thunk)] of module `name`, the attention's and the yardstick's launched as `tuning`
    says (None: the default)."""
    return CASES[name](tuning or TUNING) if name in TUNED else CASES[name]()


# where each name's Triton kernels are defined (the yardstick's here)
HOME = {name: f"kernels.{name}" for name in CASES if name != "yardstick"} | {"yardstick": "tools.aot_cases"}
