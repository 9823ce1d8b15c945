"""Elastic action scheduling (ARL-Tangram Algorithms 1 and 2) as a plain, clock-injected class.

:class:`ElasticScheduler` is the logic: FCFS candidates that fit their minimum demands on every
resource (Algorithm 1, lines 1-2), split by key elastic resource, and for each scalable group a greedy
eviction of the last candidate while Algorithm 2's approximated objective (exact DPArrange ACTs of the
kept candidates + a completion-heap estimate of the remaining queue, exploring ``depth`` unit choices
for the first remaining action) keeps improving. It is called on every arrival and completion and
records its own decision latency. The async wrapper lives in :mod:`rollart.actions.runtime`.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
import time
from typing import Any, Callable, Optional, Sequence

from rollart.actions.action import Action, check_resources
from rollart.actions.dp import dp_arrange
from rollart.actions.queue import ActionQueue


@dataclasses.dataclass
class Decision:
    """One action to start now with ``units`` of its key resource (0 if it has no key)."""

    action: Action
    units: int


@dataclasses.dataclass
class Running:
    action: Action
    units: int
    start: float
    predicted_end: float
    grant: dict[str, Any]


@dataclasses.dataclass
class Record:
    """What happened to one action: for ACT = queue + execution time."""

    kind: str
    submit: float
    start: float
    end: float
    units: int

    @property
    def act(self) -> float:
        return self.end - self.submit


class ElasticScheduler:
    """Algorithm 1 over ``pools`` ({resource name: pool}); time comes from ``clock``."""

    def __init__(self, pools: dict[str, Any], depth: int = 2, lookahead: int = 128,
                 clock: Callable[[], float] = time.monotonic, elastic: bool = True,
                 explore: str = "smallest"):
        if depth < 1:
            raise ValueError(f"depth must be >= 1 (the paper uses 2), got {depth}")
        if explore not in ("smallest", "spread"):
            raise ValueError(f"explore={explore!r}: use 'smallest' (Algorithm 2 as written: the first "
                             "remaining action tries 1..depth units) or 'spread' (depth choices spread "
                             "from its minimum to its maximum)")
        self.explore = explore
        if lookahead < 1:
            raise ValueError(f"lookahead must be >= 1, got {lookahead}")
        self.pools, self.depth, self.lookahead, self.clock = pools, depth, lookahead, clock
        self.elastic = elastic
        self.queue = ActionQueue()
        self.running: dict[int, Running] = {}
        self.records: list[Record] = []
        self.decision_latency: list[float] = []  # seconds per decide() call (real wall time)
        self.evictions = 0  # candidates held back by the greedy eviction (Algorithm 1), summed over decisions
        self._avg: dict[str, tuple[float, int]] = {}  # kind -> (mean duration, count)

    # -- bookkeeping --------------------------------------------------------------------------
    def submit(self, action: Action) -> None:
        check_resources([action], list(self.pools))
        action.submit_time = self.clock()
        self.queue.push(action)

    def cancel(self, action_id: int) -> bool:
        """Remove a still-queued action; False if it already started or is unknown."""
        return self.queue.remove(action_id) is not None

    def expected(self, action: Action, units: Optional[int] = None) -> float:
        """Predicted duration: the profile if known, else the kind's historical average."""
        mean = self._avg.get(action.kind, (0.0, 0))[0]
        return action.duration(units, default=mean)

    def start(self, decision: Decision) -> Running:
        """Acquire the decision's demand vector from every pool and mark the action running."""
        a, now = decision.action, self.clock()
        self.queue.remove(a.id)
        demand = a.demand(decision.units or None)
        grant = {}
        try:
            for name, amount in demand.items():
                if amount:
                    grant[name] = self.pools[name].acquire(amount, a)
        except Exception:
            for name, handle in grant.items():
                self.pools[name].release(handle)
            raise
        run = Running(a, decision.units, now, now + self.expected(a, decision.units or None), grant)
        self.running[a.id] = run
        return run

    def finish(self, action: Action) -> Record:
        run = self.running.pop(action.id)
        for name, handle in run.grant.items():
            self.pools[name].release(handle)
        now = self.clock()
        mean, count = self._avg.get(action.kind, (0.0, 0))
        self._avg[action.kind] = ((mean * count + (now - run.start)) / (count + 1), count + 1)
        rec = Record(action.kind, action.submit_time, run.start, now, run.units)
        self.records.append(rec)
        return rec

    def step(self) -> list[Running]:
        """Decide (timed) and start every selected action; call on each arrival and completion."""
        return [self.start(d) for d in self.decide()]

    def next_wakeup(self) -> Optional[float]:
        """Earliest time a pool frees without a completion (quota windows), if work is waiting."""
        if not len(self.queue):
            return None
        times = [t for t in (p.next_change() for p in self.pools.values()) if t is not None]
        return min(times) if times else None

    # -- Algorithm 1 --------------------------------------------------------------------------
    def decide(self) -> list[Decision]:
        t0 = time.perf_counter()
        try:
            return self._decide()
        finally:
            self.decision_latency.append(time.perf_counter() - t0)

    def _decide(self) -> list[Decision]:
        waiting = self.queue.head(self.lookahead)
        if not waiting:
            return []
        # 1) candidates: the longest FCFS prefix whose minimum demands fit every pool's topology
        states = {name: pool.state() for name, pool in self.pools.items()}
        n = 0
        for a in waiting:
            nxt = self._take_all(states, a.demand())
            if nxt is None:
                break
            states, n = nxt, n + 1
        candidates = waiting[:n]
        if not candidates:
            return []
        # 2) per key resource: fixed-size groups go at minimum units, scalable ones greedily evict
        units = {a.id: a.min_units for a in candidates}
        evicted: set[int] = set()
        for key in dict.fromkeys(a.key for a in candidates if a.key is not None):
            group = [a for a in candidates if a.key == key]
            if not self.elastic or not any(a.scalable for a in group):
                continue
            kept, alloc = self._evict_greedily(key, group, candidates, waiting)
            evicted.update(a.id for a in group[len(kept):])
            units.update({a.id: k for a, k in zip(kept, alloc)})
        self.evictions += len(evicted)
        return [Decision(a, units[a.id]) for a in candidates if a.id not in evicted]

    def _take_all(self, states: dict, demand: dict[str, float]) -> Optional[dict]:
        out = dict(states)
        for name, amount in demand.items():
            if amount:
                nxt = self.pools[name].take(out[name], amount)
                if nxt is None:
                    return None
                out[name] = nxt
        return out

    def _evict_greedily(self, key: str, group: list[Action], candidates: list[Action],
                        waiting: list[Action]) -> tuple[list[Action], list[int]]:
        pool, now = self.pools[key], self.clock()
        # free state of the key resource after the other candidates' fixed use of it
        base = pool.state()
        others = [a for a in candidates if a.key != key and a.demand().get(key)]
        for a in others:
            base = pool.take(base, a.demand()[key])
        operator = pool.operator_from(base)
        choices = [a.units if a.scalable else (a.min_units,) for a in group]
        arrangement = dp_arrange(choices, lambda i, k: self.expected(group[i], k), operator)
        # completion heap: one entry per unit, the time it becomes free
        heap_base = [max(now, run.predicted_end) for run in self.running.values()
                     for _ in range(int(run.action.demand(run.units or None).get(key, 0)))]
        heap_base += [now + self.expected(a) for a in others for _ in range(int(a.demand()[key]))]
        rest = [a for a in waiting[len(candidates):] if a.key == key]

        def objective(length: int) -> tuple[float, list[int]]:
            exact, alloc = arrangement.best(length)
            if not math.isfinite(exact):
                return math.inf, alloc
            used = sum(alloc)
            heap = heap_base + [now] * max(0, int(operator.units(operator.start())) - used)
            heap += [now + self.expected(a, k) for a, k in zip(group, alloc) for _ in range(k)]
            remaining = group[length:] + rest
            return exact + self._estimate(heap, remaining, now), alloc

        best_len = len(group)
        obj, alloc = objective(best_len)
        # evict the last candidate while it helps; evicting all (waiting for units to free) is allowed
        # only when something holding this resource will finish and re-run the decision
        floor = 0 if heap_base else 1
        for length in range(len(group) - 1, floor - 1, -1):
            new_obj, new_alloc = objective(length)
            if new_obj >= obj:
                break
            obj, alloc, best_len = new_obj, new_alloc, length
        return group[:best_len], alloc

    # -- Algorithm 2: ESTIMATE ----------------------------------------------------------------
    def _estimate(self, heap: list[float], remaining: Sequence[Action], now: float) -> float:
        """Summed ACT of ``remaining`` (from now) inserted at minimum units into the heap; the first
        one also tries its 2nd..depth-th unit choice, and the best total is kept."""
        if not remaining:
            return 0.0
        heapq.heapify(heap)
        first = remaining[0]
        # the rest go in at minimum units whatever the first one does: their durations once
        rest = [(max(1, a.min_units), self.expected(a, max(1, a.min_units) if a.key else None))
                for a in remaining[1:]]
        best = math.inf
        for choice in self._first_choices(first):
            if choice > len(heap):
                continue
            h = list(heap)
            start = max(heapq.heappop(h) for _ in range(choice))
            end = start + self.expected(first, choice if first.key else None)
            for _ in range(choice):
                heapq.heappush(h, end)
            total = end - now
            for u, duration in rest:
                if u == 1 and h:  # the common case: one unit, pop + push in one sift
                    end = h[0] + duration
                    heapq.heapreplace(h, end)
                else:
                    if u > len(h):
                        total = math.inf
                        break
                    end = max(heapq.heappop(h) for _ in range(u)) + duration
                    for _ in range(u):
                        heapq.heappush(h, end)
                total += end - now
            best = min(best, total)
        return best

    def _first_choices(self, first: Action) -> list[int]:
        """Unit counts the first remaining action explores in ESTIMATE (``depth`` of them)."""
        units = list(first.units) if first.units and first.scalable else [max(1, first.min_units)]
        if self.explore == "smallest" or len(units) <= self.depth:
            return units[:self.depth]
        # spread: minimum, maximum and log-spaced choices between (so "wait for more units" is seen)
        picks = {units[0], units[-1]}
        for d in range(1, self.depth - 1):
            target = units[0] * (units[-1] / units[0]) ** (d / (self.depth - 1))
            picks.add(min(units, key=lambda u: abs(math.log(u / target))))
        return sorted(picks)
