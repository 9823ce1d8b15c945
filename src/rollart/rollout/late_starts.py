"""Group starts under the per-turn α bound (RollArt §6.2): when a group should start, and which task the bound starves.

A version v leaves the window when the batch is taken at version v + α, about α + 1 iterations after v came (an
iteration: the mean spacing of the last versions, ``VersionClock``). A group that starts late in its version's
window has less than that. ``LateStarts`` keeps each task's recent group durations and holds a group that would
outlast what is left of the window, but would fit a whole one, until the next version (``rollout.defer_late_starts``),
instead of letting it run until the bound aborts it (or until the batch being formed lacks its task: ``TaskMix``). A task
whose groups the bound cuts again and again is named once.
"""
from __future__ import annotations

import logging
import statistics
import time
from collections import Counter, defaultdict, deque
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from rollart.rollout.buffer import SampleBuffer

log = logging.getLogger("rollart.rollout")


class VersionClock:
    """When the last policy versions came: the iteration time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, keep: int = 5):
        self.clock = clock
        self._times: deque[float] = deque(maxlen=keep)

    def came(self) -> None:
        self._times.append(self.clock())

    def reset(self) -> None:
        """A recovery is no iteration: time afresh."""
        self._times.clear()

    def iteration_s(self) -> float | None:
        """The mean spacing of the last versions; None until three have come."""
        t = self._times
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) >= 3 else None

    def since_last_s(self) -> float:
        return self.clock() - self._times[-1] if self._times else 0.0


class LateStarts:
    """See the module docstring. ``counters`` (the scheduler's) gets starts_deferred, deferred_ms and, per task,
    groups_stale/<task> and groups_complete/<task>."""

    def __init__(self, buffer: SampleBuffer, defer: bool, counters: Counter):
        self.buffer, self.defer, self.counters = buffer, defer, counters
        self.seconds: defaultdict[str, deque[float]] = defaultdict(lambda: deque(maxlen=16))
        """Per task: how long its last groups took, start to last member (a cut group's time so far)."""
        self._recent_cut: defaultdict[str, deque[bool]] = defaultdict(lambda: deque(maxlen=8))
        self._named: set[str] = set()

    def window(self) -> tuple[float, float] | None:
        """Per-turn bound: (seconds a group starting now has before its version leaves the window, seconds one
        starting at the next version will have), or None where nothing is cut mid-flight or no iteration is timed."""
        iteration = self.buffer.version_clock.iteration_s() if self.buffer.per_turn else None
        if iteration is None:
            return None
        whole = (self.buffer.config.alpha + 1) * iteration
        return whole - self.buffer.version_clock.since_last_s(), whole

    async def wait_turn(self, task: str) -> None:
        """Return when a group of ``task`` should start: now, or at the next version (at most a window away) when
        its recent groups say it would outlast what is left of this one's window but fit a whole one, unless the batch
        being formed waits for its task."""
        window = self.window() if self.defer else None
        past = self.seconds[task]
        if window is None or len(past) < 4 or self.buffer.lacks(task):
            return
        left, whole = window
        if left < statistics.median(past) <= whole:
            t0 = time.monotonic()
            self.counters["starts_deferred"] += 1
            await self.buffer.until_next_version_or_lacking(task, timeout=whole)
            self.counters["deferred_ms"] += round(1000 * (time.monotonic() - t0))

    def finished(self, task: str, seconds: float, cut: bool) -> None:
        """A group of ``task`` completed (or was cut by the bound) after ``seconds``."""
        self.seconds[task].append(seconds)
        self.counters[f"groups_stale/{task}" if cut else f"groups_complete/{task}"] += 1
        recent = self._recent_cut[task]
        recent.append(cut)
        if len(recent) < recent.maxlen or sum(recent) < 0.75 * len(recent) or task in self._named:
            return
        self._named.add(task)
        window = self.window()
        cost = ("their generation is wasted" if self.buffer.task_mix is not None else
                f"so the batches hold less of this task than its weight asks for (see rollout/share/{task})")
        log.warning("task %s: %d of its last %d groups were cut by the per-turn staleness bound (alpha=%d): they take "
                    "about %.1f s (median), and a group has at most %s from its start: %s. Raise alpha, or shorten "
                    "its trajectories (max_turns, max_new_tokens)", task, sum(recent), len(recent),
                    self.buffer.config.alpha, statistics.median(self.seconds[task]),
                    f"{window[1]:.1f} s" if window else "alpha + 1 iterations", cost)
