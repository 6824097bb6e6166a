"""core/decoding.py against toy decoders whose log-probabilities are known tables."""

import itertools
import math

import pytest
import torch

from core.decoding import ban_repeated_ngrams, beam_search, greedy

EOS = 3


class TableDecoder:
    """The IncrementalDecoder protocol over fixed tables: source b's next-token log-probabilities
    are first[b] at the first step, then table[b, previous token]. Counts its steps and records
    the rows of each call, so tests can see what the search asked for."""

    def __init__(self, first, table):
        self.first, self.table = first, table  # (B, V), (B, V, V) log-probabilities
        self.src = torch.arange(first.shape[0])  # (N,) the source of each row
        self.calls, self.rows_seen = 0, []

    @property
    def rows(self):
        return self.src.numel()

    def step(self, prev):
        self.calls += 1
        self.rows_seen.append(self.rows)
        if prev is None:
            return self.first[self.src]
        assert prev.shape == (self.rows,)
        return self.table[self.src, prev]

    def reorder(self, index):
        self.src = self.src[index]


def log_table(probs):
    return torch.tensor(probs, dtype=torch.float).log()


def random_decoder(B, V, seed, sharp=3.0):
    g = torch.Generator().manual_seed(seed)
    first = torch.log_softmax(sharp * torch.randn(B, V, generator=g), -1)
    table = torch.log_softmax(sharp * torch.randn(B, V, V, generator=g), -1)
    return first, table


def has_repeat(seq, n):
    grams = [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]
    return len(grams) != len(set(grams))


# -----------------------------------------------------------------------------
# the search finds what it should

# tokens 0, 1, 2 and EOS = 3. Greedy takes 0 (0.6) and then ends (0.4): 0.24. Starting with 1
# (0.4) and ending at once (0.9) gives 0.36, the best sequence of all.
FIRST = [[0.6, 0.4, 1e-3, 1e-3]]
TABLE = [
    [
        [0.25, 0.2, 0.15, 0.4],  # after 0
        [0.03, 0.03, 0.04, 0.9],  # after 1
        [0.1, 0.1, 0.1, 0.7],  # after 2
        [0.25, 0.25, 0.25, 0.25],
    ]
]  # after EOS (never asked)


def lure():
    return TableDecoder(log_table(FIRST), log_table(TABLE))


def test_greedy_is_lured():
    out, score = greedy(lure(), max_len=10, eos_id=EOS)
    assert out == [[0]]
    assert score.item() == pytest.approx(math.log(0.6 * 0.4), abs=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_finds_the_best_and_stops(alpha):
    dec = lure()
    out, score = beam_search(dec, beam=2, max_len=10, length_penalty=alpha, eos_id=EOS)
    assert out == [[1]]
    assert score.item() == pytest.approx(math.log(0.4 * 0.9) / 2**alpha, abs=1e-6)
    # step 2 fills the pool with [1 EOS] and [0 EOS]; the best live beam [0 0] (0.15) cannot beat them
    assert dec.calls == 2


def test_exhaustive_beam_is_exact():
    """A beam wide enough to keep every prefix, with length_penalty 0 (where the stopping rule
    is exact), returns the best of all sequences, found by enumeration."""
    V, max_len = 4, 4
    for seed in range(3):
        first, table = random_decoder(1, V, seed, sharp=1.0)
        best = -math.inf
        words = [w for w in range(V) if w != EOS]
        for n in range(max_len + 1):
            for seq in itertools.product(words, repeat=n):
                full = list(seq) + ([EOS] if n < max_len else [])
                s = first[0, full[0]].item() + sum(table[0, a, b].item() for a, b in zip(full, full[1:]))
                if s > best:
                    best, best_seq = s, list(seq)
        out, score = beam_search(TableDecoder(first, table), beam=200, max_len=max_len, length_penalty=0.0, eos_id=EOS)
        assert out == [best_seq]
        assert score.item() == pytest.approx(best, abs=1e-5)


# -----------------------------------------------------------------------------
# beam 1 is greedy; batches decode as their rows alone


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_beam_one_is_greedy(alpha):
    for seed in range(10):
        first, table = random_decoder(4, 12, seed, sharp=1.5)
        g_out, g_score = greedy(TableDecoder(first, table), max_len=15, min_len=2, eos_id=EOS, no_repeat_ngram=2)
        b_out, b_score = beam_search(
            TableDecoder(first, table),
            beam=1,
            max_len=15,
            min_len=2,
            length_penalty=alpha,
            eos_id=EOS,
            no_repeat_ngram=2,
        )
        assert b_out == g_out
        lens = torch.tensor([len(o) + (len(o) < 15) for o in g_out], dtype=torch.float)
        assert torch.allclose(b_score, g_score / lens**alpha, atol=1e-5)
        if alpha == 0.0:
            assert torch.equal(b_score, g_score)


@pytest.mark.parametrize("beam", [1, 3])
def test_batch_equals_alone(beam):
    first, table = random_decoder(5, 16, seed=7, sharp=1.5)
    kw = dict(max_len=12, min_len=2, eos_id=EOS, no_repeat_ngram=2)
    search = (lambda d: greedy(d, **kw)) if beam == 1 else (lambda d: beam_search(d, beam, length_penalty=1.0, **kw))
    out, score = search(TableDecoder(first, table))
    lengths = {len(o) for o in out}
    assert len(lengths) > 1, "the sources should end at different steps"
    for b in range(5):
        o, s = search(TableDecoder(first[b : b + 1], table[b : b + 1]))
        assert o == [out[b]]
        assert s.item() == pytest.approx(score[b].item(), abs=1e-6)


# -----------------------------------------------------------------------------
# lengths and stopping


def eos_lover(V=8):
    """EOS is always the likeliest token."""
    first = torch.log_softmax(torch.arange(V, dtype=torch.float) * 0.1, -1)
    first[EOS] = 0.0
    first = torch.log_softmax(first * 5, -1)
    return first[None], first[None, None].expand(1, V, V).clone()


def eos_hater(V=8):
    first, table = eos_lover(V)
    first[..., EOS] = -1e4
    table[..., EOS] = -1e4
    return first, table


@pytest.mark.parametrize("beam", [1, 4])
def test_min_len(beam):
    for min_len in (0, 1, 3):
        dec = TableDecoder(*eos_lover())
        out, _ = greedy(dec, 10, min_len, EOS) if beam == 1 else beam_search(dec, beam, 10, min_len, 1.0, EOS)
        assert len(out[0]) == min_len and EOS not in out[0]
        if beam == 1:
            assert dec.calls == min_len + 1, "EOS at the first allowed step ends the search"


@pytest.mark.parametrize("beam", [1, 4])
def test_max_len(beam):
    for max_len in (0, 1, 5):
        dec = TableDecoder(*eos_hater())
        out, _ = greedy(dec, max_len, 0, EOS) if beam == 1 else beam_search(dec, beam, max_len, 0, 1.0, EOS)
        assert len(out[0]) == max_len and EOS not in out[0]
        assert dec.calls == max_len


def countdown(starts, V=10):
    """Token a in 5..9 is followed by a-1 for sure, 4 by EOS: a hypothesis that starts with a ends
    after a-4+1 tokens and its EOS. starts: per source, {first token: log-probability}; every
    other choice costs -50."""
    first = torch.full((len(starts), V), -50.0)
    for b, s in enumerate(starts):
        for a, lp in s.items():
            first[b, a] = lp
    table = torch.full((len(starts), V, V), -50.0)
    for a in range(5, V):
        table[:, a, a - 1] = 0.0
    table[:, 4, EOS] = 0.0
    return TableDecoder(first, table)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_early_stop_counts_steps(alpha):
    """Starts 6, 5, 7, 4, 8 in that order of preference: [6 5 4] is the best; its EOS is the 4th
    step. Beams 1 and 2 hold K finished hypotheses better than any live one after 4 steps; beams
    3 and 4 must also see [7 6 5 4 EOS], the 5th step."""
    starts = [{6: -0.1, 5: -0.2, 7: -0.3, 4: -0.4, 8: -0.5}]
    dec = countdown(starts)
    assert greedy(dec, 30, eos_id=EOS)[0] == [[6, 5, 4]] and dec.calls == 4
    for beam, calls in ((1, 4), (2, 4), (3, 5), (4, 5)):
        dec = countdown(starts)
        out, score = beam_search(dec, beam, max_len=30, length_penalty=alpha, eos_id=EOS)
        assert out == [[6, 5, 4]]
        assert score.item() == pytest.approx(-0.1 / 4**alpha, abs=1e-6)
        assert dec.calls == calls, (beam, dec.calls)


def test_finished_sources_are_dropped():
    """Source 0 is done after 2 steps (greedy) or 3 (beam 2), source 1 after 5: from then on the
    decoder is asked for source 1's rows only, and nothing runs after the 5th step."""
    starts = [{4: -0.1, 5: -0.2}, {7: -0.1, 6: -0.2}]
    dec = countdown(starts)
    out, _ = greedy(dec, 30, eos_id=EOS)
    assert out == [[4], [7, 6, 5, 4]]
    assert dec.rows_seen == [2, 2, 1, 1, 1]
    dec = countdown(starts)
    out, _ = beam_search(dec, 2, 30, length_penalty=1.0, eos_id=EOS)
    assert out == [[4], [7, 6, 5, 4]]
    assert dec.rows_seen == [2, 4, 4, 2, 2]


# -----------------------------------------------------------------------------
# no-repeat-ngram


def test_ban_matches_a_loop():
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 3):
        hyps = torch.randint(0, 5, (7, 9), generator=g)
        logp = torch.randn(7, 6, generator=g)
        got = ban_repeated_ngrams(logp, hyps, n)
        want = logp.clone()
        for r in range(7):
            h = hyps[r].tolist()
            prefix = tuple(h[len(h) - n + 1 :]) if n > 1 else ()
            for i in range(len(h) - n + 1):
                if tuple(h[i : i + n - 1]) == prefix:
                    want[r, h[i + n - 1]] = -math.inf
        assert torch.equal(got, want)


@pytest.mark.parametrize("beam", [1, 3])
def test_no_repeat_ngram(beam):
    """A decoder that loves repeating (each token prefers itself and a short cycle) never repeats
    an n-gram when blocked, and does when not."""
    V, max_len = 24, 20
    repeats = 0
    for seed in range(8):
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(3, V, V, generator=g)
        idx = torch.arange(V)
        logits[:, idx, idx] += 6.0
        logits[:, idx, (idx + 1) % 4] += 5.0
        logits[..., EOS] = -30.0
        table = torch.log_softmax(logits, -1)
        first = torch.randn(3, V, generator=g)
        first[:, EOS] = -30.0
        first = torch.log_softmax(first, -1)
        for n in (0, 1, 2, 3):
            dec = TableDecoder(first, table)
            kw = dict(max_len=max_len, eos_id=EOS, no_repeat_ngram=n)
            out, _ = greedy(dec, **kw) if beam == 1 else beam_search(dec, beam, **kw)
            for o in out:
                assert len(o) == max_len
                if n == 0:
                    repeats += has_repeat(o, 2)
                else:
                    assert not has_repeat(o, n), (n, o)
    assert repeats > 0, "the toy decoder should repeat when nothing blocks it"
