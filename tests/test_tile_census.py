"""tools/tile_census.py counts each visited tile of the dK/dV kernel in the loop the kernel runs it in."""

import torch

from kernels import CONTEXT, ORIGINAL, PSEUDO, reference
from tools.tile_census import loops_of


def seq2seq_like(valid_tail=True):
    """One UniLMv2 seq2seq example (core/unilm/seq2seq.py): a source of 4, a target of 2, its [P]s."""
    kind = torch.tensor([[CONTEXT] * 4 + [ORIGINAL] * 2 + [PSEUDO] * 2])
    step = torch.tensor([[0, 0, 0, 0, 1, 2, 1, 2]])
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 4, 5]])
    valid = torch.ones_like(kind, dtype=torch.bool)
    return kind, step, pos, valid


def census(kind, step, pos, valid, BM, BN, windows=True):
    see = reference.visible(kind, step, kind, step, valid)
    return loops_of(see, pos, valid, BM, BN, max_dist=100, windows=windows)


def test_the_source_keys_run_and_the_targets_with_their_pseudo_masks_do_not():
    loops, programs = census(*seq2seq_like(), BM=2, BN=4)
    # keys 0-3, the source: every query sees them, positions 0..3; keys 4-7 (y1 y2 P1 P2 at 4 5 4 5):
    # the source's queries see none, the target's and the [P]s' some
    assert programs == (2, 1)
    assert loops == {"FULL": 4, "PARTIAL atomic": 2}


def test_the_tile_across_the_last_query_row_is_edge():
    loops, _ = census(*seq2seq_like(), BM=3, BN=4)  # query tiles 0-2, 3-5, 6-7 (Lq % 3 != 0)
    assert loops == {"FULL": 2, "EDGE": 1, "PARTIAL atomic": 1, "EDGE atomic": 1}


def test_without_windows_no_program_runs_and_partial_tiles_have_one_loop():
    loops, programs = census(*seq2seq_like(), BM=2, BN=4, windows=False)
    assert programs == (2, 0)
    assert loops == {"FULL": 4, "PARTIAL": 2}  # one PARTIAL loop, adding by atomics (Tuning.grad_windows off)


def test_dead_keys_do_not_stop_a_run():
    kind, step, pos, valid = seq2seq_like()
    # the target and its [P]s become context, keys 6 and 7 padding
    kind[:, 4:], step[:, 4:], pos[:, 4:], valid[:, 4:] = CONTEXT, 0, 0, False
    pos[:, 4:6] = torch.tensor([4, 5])
    valid[:, 4:6] = True  # keys 4, 5 live at 4, 5, keys 6, 7 dead at 0: the live keys run
    loops, programs = census(kind, step, pos, valid, BM=2, BN=4)
    assert programs == (2, 2)
    assert loops == {"FULL": 4, "PARTIAL": 4}  # keys 4-7: seen by every query, but not 6 and 7


def test_the_per_pair_share_counts_the_loops_that_add_pair_by_pair():
    from tools.tile_census import weigh

    loop = lambda sass, atomics: dict(instructions=sass, atomics=atomics)  # noqa: E731
    windows = {"FAR": loop(1, 0), "FULL": loop(4, 0), "PARTIAL atomic": loop(2, 8)}
    got = weigh(dict(windows=True, iterations={"FAR": 1, "FULL": 1, "PARTIAL atomic": 2}), windows)
    assert got["sass"] == 9 and got["atomic_elements"] == 16
    assert got["per_pair_iterations"] == 0.5 and got["per_pair_sass"] == 4 / 9 and got["per_pair_atomic_elements"] == 1
    atomics = {"FAR": loop(1, 0), "FULL": loop(3, 8), "PARTIAL": loop(2, 8)}
    got = weigh(dict(windows=False, iterations={"FAR": 1, "FULL": 1, "PARTIAL": 2}), atomics)
    assert got["per_pair_iterations"] == 0.75 and got["per_pair_sass"] == 7 / 8 and got["atomic_elements"] == 24
