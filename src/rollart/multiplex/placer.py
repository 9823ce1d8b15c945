"""Spatio-temporal placement: fit jobs' periodic demand traces into a cyclic horizon (PlexRL §4.3, §5.2.1).

    CyclicHorizon   H slots as a ring buffer; time t maps to slot t mod H
    SegmentTree     free-node count per slot, range-add + range-min (the Global Capacity Profile): a
                    gang of n nodes is possible over [a, b) only if min(free[a:b]) >= n — prunes shifts
                    before any per-node work
    IntervalSet     one node's sorted disjoint free windows; ``fits`` is a bisect (simulate_insert)
    Placer          cold start (dedicated nodes while a job is profiled) -> warm start (fit the profiled
                    trace with the smallest micro-shift) -> repack (release the dedicated nodes, fit)

Reservations are atomic: a placed job's segments are subtracted over the whole horizon at once, so a
slot of a node is never committed twice (tests/multiplex/test_placement.py checks it on random loads).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field


class SegmentTree:
    """Range add / range min over n integer cells (lazy propagation)."""

    def __init__(self, values: list[int]):
        self.n = len(values)
        self.mn = [0] * (4 * self.n)
        self.lz = [0] * (4 * self.n)
        self._build(1, 0, self.n, values)

    def _build(self, i: int, lo: int, hi: int, v: list[int]) -> None:
        if hi - lo == 1:
            self.mn[i] = v[lo]
            return
        mid = (lo + hi) // 2
        self._build(2 * i, lo, mid, v)
        self._build(2 * i + 1, mid, hi, v)
        self.mn[i] = min(self.mn[2 * i], self.mn[2 * i + 1])

    def add(self, a: int, b: int, delta: int, i: int = 1, lo: int = 0, hi: int | None = None) -> None:
        hi = self.n if hi is None else hi
        if b <= lo or hi <= a:
            return
        if a <= lo and hi <= b:
            self.mn[i] += delta
            self.lz[i] += delta
            return
        mid = (lo + hi) // 2
        self.add(a, b, delta, 2 * i, lo, mid)
        self.add(a, b, delta, 2 * i + 1, mid, hi)
        self.mn[i] = min(self.mn[2 * i], self.mn[2 * i + 1]) + self.lz[i]

    def min(self, a: int, b: int, i: int = 1, lo: int = 0, hi: int | None = None) -> int:
        hi = self.n if hi is None else hi
        if b <= lo or hi <= a:
            return 1 << 60
        if a <= lo and hi <= b:
            return self.mn[i]
        mid = (lo + hi) // 2
        return min(self.min(a, b, 2 * i, lo, mid), self.min(a, b, 2 * i + 1, mid, hi)) + self.lz[i]


class IntervalSet:
    """Sorted disjoint free windows [start, end) of one node inside [0, horizon)."""

    def __init__(self, horizon: int):
        self.starts = [0]
        self.ends = [horizon]

    def fits(self, a: int, b: int) -> bool:
        i = bisect.bisect_right(self.starts, a) - 1
        return i >= 0 and self.ends[i] >= b

    def reserve(self, a: int, b: int) -> None:
        i = bisect.bisect_right(self.starts, a) - 1
        if i < 0 or self.ends[i] < b:
            raise ValueError(f"[{a}, {b}) is not free")
        s, e = self.starts[i], self.ends[i]
        del self.starts[i], self.ends[i]
        for lo, hi in ((b, e), (s, a)):  # insert right part then left part at i
            if hi > lo:
                self.starts.insert(i, lo)
                self.ends.insert(i, hi)

    def release(self, a: int, b: int) -> None:
        i = bisect.bisect_left(self.starts, a)
        if (i > 0 and self.ends[i - 1] > a) or (i < len(self.starts) and self.starts[i] < b):
            raise ValueError(f"[{a}, {b}) overlaps a free window: not reserved")
        self.starts.insert(i, a)
        self.ends.insert(i, b)
        # merge with neighbours
        if i + 1 < len(self.starts) and self.ends[i] == self.starts[i + 1]:
            self.ends[i] = self.ends.pop(i + 1); self.starts.pop(i + 1)
        if i > 0 and self.ends[i - 1] == self.starts[i]:
            self.ends[i - 1] = self.ends.pop(i); self.starts.pop(i)

    def free_slots(self) -> int:
        return sum(e - s for s, e in zip(self.starts, self.ends))


@dataclass
class Trace:
    """A job's periodic demand: active segments (offset, duration) within one period, in slots."""
    period: int
    segments: list[tuple[int, int]]

    def __post_init__(self):
        if self.period < 1:
            raise ValueError("period must be >= 1 slot")
        for off, dur in self.segments:
            if off < 0 or dur < 1 or off + dur > self.period:
                raise ValueError(f"segment ({off}, {dur}) must lie inside the period {self.period}")
        segs = sorted(self.segments)
        if any(a[0] + a[1] > b[0] for a, b in zip(segs, segs[1:])):
            raise ValueError(f"trace segments overlap: {segs}")

    def duty(self) -> float:
        return sum(d for _, d in self.segments) / self.period


@dataclass
class Placement:
    job: str
    nodes: list[int]
    shift: int
    windows: list[tuple[int, int]] = field(default_factory=list)
    dedicated: bool = False


class Placer:
    def __init__(self, num_nodes: int, horizon: int, max_shift: int | None = None, prefer: str = "spread"):
        if prefer not in ("spread", "pack"):
            raise ValueError(f"prefer must be 'spread' or 'pack', got {prefer!r}")
        self.num_nodes, self.horizon = num_nodes, horizon
        self.max_shift = horizon if max_shift is None else max_shift
        self.prefer = prefer
        self.nodes = [IntervalSet(horizon) for _ in range(num_nodes)]
        self.capacity = SegmentTree([num_nodes] * horizon)  # free nodes per slot (Global Capacity Profile)
        self.placed: dict[str, Placement] = {}

    # ------------------------------------------------------------------ the cyclic projection
    def windows(self, trace: Trace, shift: int) -> list[tuple[int, int]]:
        """The trace's segments repeated over the horizon, shifted, split at the ring's wrap point."""
        if self.horizon % trace.period:
            raise ValueError(f"trace period {trace.period} must divide the horizon {self.horizon} "
                             "(round the profiled period to a divisor)")
        out = []
        for k in range(self.horizon // trace.period):
            for off, dur in trace.segments:
                a = (k * trace.period + off + shift) % self.horizon
                b = a + dur
                out += [(a, b)] if b <= self.horizon else [(a, self.horizon), (0, b - self.horizon)]
        return sorted(out)

    # ------------------------------------------------------------------ policies
    def cold_start(self, job: str, n: int, nodes: list[int] | None = None) -> Placement | None:
        """Dedicated nodes (whole horizon) while the job is profiled; None if not enough idle nodes.
        ``nodes`` restricts the candidates."""
        if job in self.placed:
            raise ValueError(f"job {job!r} is already placed on nodes {self.placed[job].nodes}; release it first")
        allowed = range(self.num_nodes) if nodes is None else sorted(set(nodes))
        idle = [i for i in allowed if 0 <= i < self.num_nodes and self.nodes[i].free_slots() == self.horizon]
        if len(idle) < n or self.capacity.min(0, self.horizon) < n:
            return None
        return self._commit(Placement(job, idle[:n], 0, [(0, self.horizon)], dedicated=True))

    def warm_start(self, job: str, trace: Trace, n: int = 1, nodes: list[int] | None = None) -> Placement | None:
        """Fit the profiled trace on n nodes with the smallest micro-shift (Eq. 1–2); None if it fits nowhere.
        ``nodes`` restricts the candidates (e.g. deployments that are not full for other reasons)."""
        if job in self.placed:
            raise ValueError(f"job {job!r} is already placed on nodes {self.placed[job].nodes}; release it first")
        allowed = range(self.num_nodes) if nodes is None else sorted(set(nodes))
        if any(not 0 <= i < self.num_nodes for i in allowed):
            raise ValueError(f"nodes must lie in [0, {self.num_nodes}), got {list(nodes or [])}")
        for shift in range(min(self.max_shift, trace.period) + 1):
            wins = self.windows(trace, shift)
            if any(self.capacity.min(a, b) < n for a, b in wins):  # gang-infeasible: pruned without node scans
                continue
            fitting = [i for i in allowed if all(self.nodes[i].fits(a, b) for a, b in wins)]
            if len(fitting) >= n:
                load = {i: self.horizon - self.nodes[i].free_slots() for i in fitting}
                fitting.sort(key=lambda i: (load[i] if self.prefer == "spread" else -load[i], i))
                return self._commit(Placement(job, fitting[:n], shift, wins))
        return None

    def repack(self, job: str, trace: Trace, nodes: list[int] | None = None) -> Placement:
        """After profiling: give back the dedicated nodes and fit the measured trace (on ``nodes`` only, if
        given — e.g. the ones already holding the job's state); keeps the old placement if it fits nowhere."""
        old = self.release(job)
        placed = self.warm_start(job, trace, len(old.nodes), nodes=nodes)
        return placed if placed is not None else self._commit(old)

    def free_share(self) -> list[float]:
        """Per node, the share of the horizon still free."""
        return [node.free_slots() / self.horizon for node in self.nodes]

    def release(self, job: str) -> Placement:
        p = self.placed.pop(job)
        for node in p.nodes:
            for a, b in p.windows:
                self.nodes[node].release(a, b)
        for a, b in p.windows:
            self.capacity.add(a, b, len(p.nodes))
        return p

    def _commit(self, p: Placement) -> Placement:
        for node in p.nodes:  # atomic: everything was checked before the first write
            for a, b in p.windows:
                self.nodes[node].reserve(a, b)
        for a, b in p.windows:
            self.capacity.add(a, b, -len(p.nodes))
        self.placed[p.job] = p
        return p
