"""DPArrange (ARL-Tangram Algorithm 3) and its DP operators (basic and GPU-chunk, Algorithm 4).

DPArrange gives each scalable candidate a unit count from its allowed set so that the sum of their
predicted durations is minimal, under the topology of the free units. It is topology-agnostic: the
topology enters only through a *DP operator* that knows the start state (the free units now) and how
taking ``k`` units changes a state (``take``; ``None`` when ``k`` does not fit).

We run the DP forward over operator states (a dict per candidate row) instead of the paper's
backward ``PREV`` indexing; the recurrence and the optimum are the same. Rows are kept, so the
optimum for every prefix ``C[:i]`` — what Algorithm 1's greedy eviction asks for — comes from one pass.

- :class:`CountOperator` (the basic operator): the state is the number of free units.
- :class:`ChunkOperator` (Algorithm 4): the state is (a, b, c, d), the number of free GPU chunks of
  1, 2, 4 and 8 units; taking ``k`` units takes the smallest chunk of size ``2^ceil(log2 k)`` or
  larger and splits the rest into buddy chunks, as the GPU manager allocates (§5.3).
"""
from __future__ import annotations

import math
from typing import Callable, Hashable, Optional, Sequence

CHUNK_SIZES = (1, 2, 4, 8)


class CountOperator:
    """Basic DP operator: interchangeable units (CPU cores, concurrency slots)."""

    def __init__(self, free: int):
        self.free = int(free)

    def start(self) -> int:
        return self.free

    def take(self, state: int, k: int) -> Optional[int]:
        return state - k if k <= state else None

    def units(self, state: int) -> int:
        return state

    def prune(self, row: dict) -> dict:
        """Drop states dominated by one with more free units and no higher cost (exact)."""
        kept, best = {}, math.inf
        for state in sorted(row, reverse=True):
            if row[state][0] < best:
                kept[state] = row[state]
                best = row[state][0]
        return kept


def chunk_size_for(k: int) -> int:
    """Smallest legal chunk (1/2/4/8) that holds ``k`` units."""
    if not 1 <= k <= 8:
        raise ValueError(f"a GPU action takes 1..8 units of one node, got {k}")
    return 1 << math.ceil(math.log2(k))


def take_chunk(state: tuple[int, ...], k: int) -> Optional[tuple[int, ...]]:
    """Buddy allocation on chunk counts: use the smallest free chunk >= k, split the rest."""
    size = chunk_size_for(k)
    counts = list(state)
    level = CHUNK_SIZES.index(size)
    for lv in range(level, len(CHUNK_SIZES)):
        if counts[lv] > 0:
            counts[lv] -= 1
            for split in range(level, lv):  # halves left over from splitting: one of each size
                counts[split] += 1
            return tuple(counts)
    return None


class ChunkOperator:
    """GPU-topology DP operator over free chunk counts (a, b, c, d) of sizes 1, 2, 4, 8."""

    def __init__(self, free_chunks: Sequence[int]):
        if len(free_chunks) != 4:
            raise ValueError(f"free_chunks needs counts for sizes {CHUNK_SIZES}, got {free_chunks}")
        self.free = tuple(int(c) for c in free_chunks)

    def start(self) -> tuple[int, ...]:
        return self.free

    def take(self, state: tuple[int, ...], k: int) -> Optional[tuple[int, ...]]:
        return take_chunk(state, k)

    def units(self, state: tuple[int, ...]) -> int:
        return sum(c * s for c, s in zip(state, CHUNK_SIZES))


class Arrangement:
    """DP rows for a candidate list; ``best(i)`` is the optimal allocation of the first ``i``."""

    def __init__(self, rows: list[dict[Hashable, tuple[float, Hashable, int]]]):
        self.rows = rows

    def best(self, i: int) -> tuple[float, list[int]]:
        """(minimal summed duration, units per candidate) for ``C[:i]``; (inf, []) if infeasible."""
        row = self.rows[i]
        if not row:
            return math.inf, []
        state = min(row, key=lambda s: row[s][0])
        cost = row[state][0]
        alloc: list[int] = []
        for r in range(i, 0, -1):
            _, prev, k = self.rows[r][state]
            alloc.append(k)
            state = prev
        return cost, alloc[::-1]


def dp_arrange(choices: Sequence[Sequence[int]], duration: Callable[[int, int], float],
               operator) -> Arrangement:
    """Algorithm 3: ``choices[i]`` are candidate i's allowed units, ``duration(i, k)`` its time."""
    start = operator.start()
    rows: list[dict] = [{start: (0.0, None, 0)}]
    for i, allowed in enumerate(choices):
        prev_row, row = rows[-1], {}
        for state, (cost, _, _) in prev_row.items():
            for k in allowed:
                nxt = operator.take(state, k)
                if nxt is None:
                    continue
                total = cost + duration(i, k)
                if nxt not in row or total < row[nxt][0]:
                    row[nxt] = (total, state, k)
        prune = getattr(operator, "prune", None)
        rows.append(prune(row) if prune else row)
    return Arrangement(rows)
