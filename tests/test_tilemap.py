"""The codes and the tile map of the pseudo-mask attention (kernels/tilemap.py): the codes give the
rule of kernels/reference.py exactly, and the map kernel's lists are those of the dense mask, for
both orientations and any blocks. Runs under TRITON_INTERPRET=1 on CPU (set in conftest.py)."""

import pytest
import torch

from kernels import CONTEXT, ORIGINAL, PSEUDO, reference
from kernels.tilemap import (
    FAR,
    FULL,
    NEVER,
    PARTIAL,
    build_map,
    code_tensor,
    codes,
    lists_from_classes,
    reference_classes,
    see_from_codes,
)

pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def layouts():
    """(name, q_kind, q_step, k_kind, k_step, k_valid, q_seq, k_seq, q_pos, k_pos): random, smooth
    (whole tiles of one kind, so that EMPTY, FULL and FAR tiles occur), packed, and cross-shaped."""
    g = gen(0)
    out = []
    B, Lq, Lk = 2, 70, 90
    qk, kk = torch.randint(0, 3, (B, Lq), generator=g), torch.randint(0, 3, (B, Lk), generator=g)
    qs, ks = torch.randint(-3, 4, (B, Lq), generator=g), torch.randint(-3, 4, (B, Lk), generator=g)
    valid = torch.rand(B, Lk, generator=g) > 0.15
    out.append(
        (
            "random",
            qk,
            qs,
            kk,
            ks,
            valid,
            None,
            None,
            torch.randint(0, 40, (B, Lq), generator=g),
            torch.randint(0, 40, (B, Lk), generator=g),
        )
    )
    L = 96
    kind = torch.tensor([CONTEXT] * 48 + [ORIGINAL] * 24 + [PSEUDO] * 24).expand(B, L).clone()
    step = torch.tensor([0] * 48 + list(range(24)) * 2).expand(B, L).clone()
    pos = torch.cat([torch.arange(72), torch.arange(48, 72)]).expand(B, L).clone()
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[1, -9:] = False
    out.append(("seq2seq", kind, step, kind, step, valid, None, None, pos, pos))
    seq = (torch.arange(L) // 40).expand(B, L).clone()
    causal = torch.full((B, L), ORIGINAL)
    cstep = torch.arange(L).expand(B, L) - 40 * seq
    out.append(("packed", causal, cstep, causal, cstep, None, seq, seq, cstep, cstep))
    out.append(
        (
            "cross",
            torch.zeros(B, 37, dtype=torch.long),
            torch.zeros(B, 37, dtype=torch.long),
            torch.zeros(B, 100, dtype=torch.long),
            torch.zeros(B, 100, dtype=torch.long),
            torch.arange(100)[None] < torch.tensor([[100], [77]]),
            None,
            None,
            torch.arange(37).expand(B, 37) * 3,
            torch.arange(100).expand(B, 100),
        )
    )
    # every position run of 16 consecutive, but the runs out of order: a 32-key tile made of two
    # 16-key cells that each run is still GATHER (the map combines cells of the finer blocks)
    ctx = torch.zeros(B, 64, dtype=torch.long)
    jumps = torch.cat([torch.arange(16), torch.arange(40, 56), torch.arange(16, 32), torch.arange(56, 72)]).expand(
        B, 64
    )
    out.append(("jumps", ctx, ctx, ctx, ctx, None, None, None, jumps, jumps))
    return out


@pytest.mark.parametrize("case", layouts(), ids=lambda c: c[0])
def test_codes_give_the_rule(case):
    _, qk, qs, kk, ks, valid, qseq, kseq, qp, kp = case
    qc, kc = codes(qk, qs, None, qseq, qp), codes(kk, ks, valid, kseq, kp)
    want = reference.visible(qk, qs, kk, ks, valid, qseq, kseq)
    assert torch.equal(see_from_codes(qc, kc, qseq is not None), want)
    # the kernel writes the same planes
    dev = [x if x is None else x.to(DEVICE) for x in (kk, ks, valid, kseq, kp)]
    assert torch.equal(code_tensor(*dev).cpu()[..., : kk.shape[1]], kc)  # rows padded to a multiple of 16


def test_codes_of_padding_keys_are_dead_whatever_their_kind():
    kind = torch.tensor([[CONTEXT, ORIGINAL, PSEUDO, NEVER]])
    step = torch.tensor([[0, 1, 1, 0]])
    kc = codes(kind, step, torch.tensor([[False, False, False, True]]))
    qc = codes(torch.tensor([[CONTEXT, ORIGINAL, PSEUDO]]), torch.tensor([[0, 5, 1]]))
    assert not see_from_codes(qc, kc).any()


@pytest.mark.parametrize("case", layouts(), ids=lambda c: c[0])
@pytest.mark.parametrize("q_blocks,k_blocks", [((16, 16), (16, 32)), ((32, 16), (16, 16))])
@pytest.mark.parametrize("max_dist", [None, 6])
def test_map_kernel_lists_the_dense_mask_tiles(case, q_blocks, k_blocks, max_dist):
    """Both orientations, against the classes read off the dense mask: every PARTIAL, FULL and FAR
    tile in its own list, in increasing order, FAR entries with the sign of their distance."""
    _, qk, qs, kk, ks, valid, qseq, kseq, qp, kp = case
    qc, kc = codes(qk, qs, None, qseq, qp), codes(kk, ks, valid, kseq, kp)
    tiles = build_map(qc.to(DEVICE), kc.to(DEVICE), q_blocks, k_blocks, qseq is not None, max_dist)
    see = reference.visible(qk, qs, kk, ks, valid, qseq, kseq)
    for lst, count, blocks, dense in (
        (tiles.q_list, tiles.q_count, q_blocks, see),
        (tiles.k_list, tiles.k_count, k_blocks, None),
    ):
        if dense is None:  # k-major: the transposed problem, positions swapped
            cls, ahead = reference_classes(see, *k_blocks, qp, kp, max_dist)
            cls, ahead = cls.transpose(1, 2), ahead.transpose(1, 2)
        else:
            cls, ahead = reference_classes(see, *blocks, qp, kp, max_dist)
        want_lists, want_counts = lists_from_classes(cls, ahead)
        assert torch.equal(count.cpu(), want_counts)
        n = want_counts
        for b in range(n.shape[0]):
            for r in range(n.shape[1]):
                for j in range(4):
                    assert torch.equal(lst[b, r, j, : n[b, r, j]].cpu(), want_lists[b, r, j, : n[b, r, j]])


def test_map_classes_are_tight_on_structured_layouts():
    """The point of the map: on a causal layout the tiles above the diagonal are EMPTY, those on it
    PARTIAL, those below FULL; with sorted positions and M = 16, tiles 16+ positions apart FAR."""
    L = 64
    kind = torch.full((1, L), ORIGINAL)
    step = torch.arange(L)[None]
    see = reference.visible(kind, step, kind, step)
    cls, _ = reference_classes(see, 16, 16)
    assert torch.equal(cls[0], torch.tensor([[1, 0, 0, 0], [2, 1, 0, 0], [2, 2, 1, 0], [2, 2, 2, 1]], dtype=torch.int8))
    cls, ahead = reference_classes(see, 16, 16, step, step, 16)
    assert torch.equal(cls[0], torch.tensor([[1, 0, 0, 0], [2, 1, 0, 0], [3, 2, 1, 0], [3, 3, 2, 1]], dtype=torch.int8))
    assert not ahead[0][cls[0] == FAR].any()  # every FAR tile lies behind: distance -M
    assert (cls == PARTIAL).sum() == 4 and (cls == FULL).sum() == 3
