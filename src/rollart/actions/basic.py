"""Basic resource manager (ARL-Tangram §5.1): concurrency-limited and quota-per-period resources.

A *pool* is what the scheduler sees of one resource type: its free state as a DP operator, whether a
demand fits, and acquire/release. These two pools cover resources that cannot be scaled, such as web
API quotas and QPS limits; CPU cores (cpu.py) and GPU chunks (gpu.py) refine them with topology.

- :class:`CountPool` limits concurrent usage (units are returned on release).
- :class:`QuotaPool` limits the total usage within any sliding window of ``period`` seconds (units
  are consumed at start and come back only when their window has passed), so the number of starts in
  any window never exceeds ``limit``.
"""
from __future__ import annotations

import collections
import time
from typing import Any, Callable, Optional

from rollart.actions.dp import CountOperator


class CountPool:
    """``capacity`` interchangeable units; an action holds its units until it finishes."""

    elastic_units = True

    def __init__(self, name: str, capacity: float, clock: Callable[[], float] = time.monotonic):
        if capacity <= 0:
            raise ValueError(f"pool {name!r}: capacity must be > 0, got {capacity}")
        self.name, self.capacity, self.clock = name, capacity, clock
        self.used = 0.0
        self.peak = 0.0

    def free(self) -> float:
        return self.capacity - self.used

    def operator_from(self, state: float) -> CountOperator:
        return CountOperator(int(state + 1e-9))

    def take(self, state: float, amount: float) -> Optional[float]:
        """State after reserving ``amount`` from free state ``state`` (None if it does not fit)."""
        return state - amount if amount <= state + 1e-9 else None

    def state(self) -> float:
        return self.free()

    def acquire(self, amount: float, action: Any = None) -> Any:
        if amount > self.free() + 1e-9:
            raise RuntimeError(f"pool {self.name!r}: acquire {amount} with only {self.free()} free "
                               "(scheduler bug: it must check fits first)")
        self.used += amount
        self.peak = max(self.peak, self.used)
        return amount

    def release(self, handle: Any) -> None:
        self.used = max(0.0, self.used - handle)

    def next_change(self) -> Optional[float]:
        """When the free state changes without a release (never for a count pool)."""
        return None


class QuotaPool:
    """At most ``limit`` units started within any ``period``-second sliding window (e.g. API QPM)."""

    elastic_units = False

    def __init__(self, name: str, limit: int, period: float, clock: Callable[[], float] = time.monotonic):
        if limit <= 0 or period <= 0:
            raise ValueError(f"quota {name!r}: limit and period must be > 0, got {limit}, {period}")
        self.name, self.capacity, self.period, self.clock = name, limit, period, clock
        self.starts: collections.deque[tuple[float, float]] = collections.deque()  # (time, amount)
        self.history: list[tuple[float, float]] = []

    def _expire(self) -> None:
        now = self.clock()
        while self.starts and self.starts[0][0] + self.period <= now:
            self.starts.popleft()

    def free(self) -> float:
        self._expire()
        return self.capacity - sum(a for _, a in self.starts)

    def state(self) -> float:
        return self.free()

    def operator_from(self, state: float) -> CountOperator:
        return CountOperator(int(state + 1e-9))

    def take(self, state: float, amount: float) -> Optional[float]:
        return state - amount if amount <= state + 1e-9 else None

    def acquire(self, amount: float, action: Any = None) -> Any:
        if amount > self.free() + 1e-9:
            raise RuntimeError(f"quota {self.name!r}: {amount} requested, {self.free()} left in window")
        entry = (self.clock(), amount)
        self.starts.append(entry)
        self.history.append(entry)
        return None

    def release(self, handle: Any) -> None:
        """Quota is consumed, not returned: it frees when its window passes."""

    def next_change(self) -> Optional[float]:
        self._expire()
        return self.starts[0][0] + self.period if self.starts else None


def max_in_window(history: list[tuple[float, float]], period: float) -> float:
    """Largest total amount started within any half-open window [t, t + period) of ``history``."""
    times = sorted(history)
    best, j, total = 0.0, 0, 0.0
    for i, (t, a) in enumerate(times):
        total += a
        while times[j][0] + period <= t:
            total -= times[j][1]
            j += 1
        best = max(best, total)
    return best
