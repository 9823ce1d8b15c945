"""DPArrange (Algorithm 3) with the basic and GPU-chunk operators equals brute-force enumeration."""
import itertools
import math
import random

import pytest

from rollart.actions.dp import CHUNK_SIZES, ChunkOperator, CountOperator, chunk_size_for, dp_arrange, take_chunk


def brute_count(choices, dur, free):
    best = math.inf
    for alloc in itertools.product(*choices):
        if sum(alloc) <= free:
            best = min(best, sum(dur(i, k) for i, k in enumerate(alloc)))
    return best


def ffd_fits(free_counts, alloc):
    """Independent feasibility check: first-fit decreasing is exact for power-of-two sizes."""
    cap = sorted([s for s, c in zip(CHUNK_SIZES, free_counts) for _ in range(c)], reverse=True)
    for r in sorted((chunk_size_for(k) for k in alloc), reverse=True):
        for i, c in enumerate(cap):
            if c >= r:
                cap[i] -= r
                break
        else:
            return False
    return True


def brute_chunk(choices, dur, free_counts):
    best = math.inf
    for alloc in itertools.product(*choices):
        if ffd_fits(free_counts, alloc):
            best = min(best, sum(dur(i, k) for i, k in enumerate(alloc)))
    return best


def random_durations(rng, m):
    t = [rng.uniform(1, 100) for _ in range(m)]
    p = [rng.uniform(0, 1) for _ in range(m)]
    return lambda i, k: t[i] * ((1 - p[i]) + p[i] / k)


@pytest.mark.parametrize("seed", range(60))
def test_count_operator_matches_brute_force(seed):
    rng = random.Random(seed)
    m = rng.randint(1, 4)
    choices = [sorted(rng.sample(range(1, 9), rng.randint(1, 4))) for _ in range(m)]
    dur = random_durations(rng, m)
    free = rng.randint(0, 20)
    arr = dp_arrange(choices, dur, CountOperator(free))
    for length in range(m + 1):
        cost, alloc = arr.best(length)
        expect = brute_count(choices[:length], dur, free)
        assert cost == pytest.approx(expect)
        if math.isfinite(cost):
            assert sum(alloc) <= free and all(k in c for k, c in zip(alloc, choices))
            assert sum(dur(i, k) for i, k in enumerate(alloc)) == pytest.approx(cost)


@pytest.mark.parametrize("seed", range(60))
def test_chunk_operator_matches_brute_force(seed):
    rng = random.Random(1000 + seed)
    m = rng.randint(1, 4)
    choices = [sorted(rng.sample([1, 2, 4, 8], rng.randint(1, 4))) for _ in range(m)]
    dur = random_durations(rng, m)
    free = tuple(rng.randint(0, 2) for _ in CHUNK_SIZES)
    arr = dp_arrange(choices, dur, ChunkOperator(free))
    cost, alloc = arr.best(m)
    assert cost == pytest.approx(brute_chunk(choices, dur, free))
    if math.isfinite(cost):
        assert ffd_fits(free, alloc)


def test_take_chunk_splits_into_buddies():
    assert take_chunk((0, 0, 0, 1), 1) == (1, 1, 1, 0)  # 8 -> 1 used + 1 + 2 + 4 free
    assert take_chunk((0, 0, 0, 1), 3) == (0, 0, 1, 0)  # 3 rounds up to a 4-chunk
    assert take_chunk((1, 0, 0, 0), 2) is None
    with pytest.raises(ValueError, match="1..8"):
        take_chunk((0, 0, 0, 1), 9)
