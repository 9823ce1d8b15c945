"""SIMULATED: the discrete-event loop that gives the action-level simulations their simulated time.

Events run in time order (ties in the order they were scheduled); the loop doubles as the clock of the real
schedulers under test, so their decisions are stamped with simulated, not wall-clock, time.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Callable


class EventLoop:
    """A minimal discrete-event loop: ``at(t, fn)`` runs ``fn()`` at simulated time ``t``."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._seq = itertools.count()

    def __call__(self) -> float:  # usable as a scheduler clock
        return self.now

    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (max(t, self.now), next(self._seq), fn))

    def run(self) -> None:
        while self._heap:
            self.now, _, fn = heapq.heappop(self._heap)
            fn()

    def stop(self) -> None:
        """Drop every pending event (run() returns)."""
        self._heap.clear()
