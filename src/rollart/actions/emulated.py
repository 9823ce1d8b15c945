"""Emulated execution time for actions (SIMULATED timing): an action's real work runs, and its caller waits out
the time the action would take on the emulated hardware — a pool sized as ARL-Tangram's 256-core nodes, driven
from two real cores.

:class:`EmulatedClock` counts emulated seconds on the running asyncio loop, ``scale`` real seconds each. It has
the clock interface of :class:`rollart.sim.event_loop.EventLoop` (``now``, ``at(t, fn)``), so the simulation's
models run in real time on it (e.g. :class:`rollart.sim.actions_baselines.SharedCores`, CFS sharing a node's
cores among pods). :meth:`EmulatedExecution.hold` awaits an action's real work and its emulated duration
together and returns when both are done: where the real work is the longer (a sandbox command that takes
longer on this machine than the emulated action would), the action *outran* its emulated time; the run counts
such actions and their excess, so a figure can say how much of it is real time rather than emulated.
"""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")


class EmulatedClock:
    """Emulated seconds since creation, each lasting ``scale`` real seconds."""

    def __init__(self, scale: float):
        if not scale > 0:
            raise ValueError(f"scale must be > 0 real seconds per emulated second, got {scale}")
        self.scale = scale
        self.t0 = time.monotonic()

    @property
    def now(self) -> float:
        return (time.monotonic() - self.t0) / self.scale

    def __call__(self) -> float:  # usable as a scheduler clock, as EventLoop is
        return self.now

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn()`` at emulated time ``t`` (at once if it has passed) on the running loop."""
        asyncio.get_running_loop().call_later(max(0.0, (t - self.now) * self.scale), fn)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` emulated seconds."""
        if seconds > 0:
            await asyncio.sleep(seconds * self.scale)


class EmulatedExecution:
    """Holds actions to their emulated durations on one :class:`EmulatedClock`; counts outruns."""

    def __init__(self, scale: float):
        self.clock = EmulatedClock(scale)
        self.records: list[tuple[float, float, float]] = []
        """(start, real end, emulated end) of every held action, in emulated seconds."""

    @property
    def actions(self) -> int:
        return len(self.records)

    @property
    def outruns(self) -> int:
        """Actions whose real work ended after their emulated time."""
        return sum(real > emulated for _, real, emulated in self.records)

    @property
    def excess_s(self) -> float:
        """Emulated seconds by which those actions' real work outlasted their emulated time, summed."""
        return sum(max(0.0, real - emulated) for _, real, emulated in self.records)

    async def hold(self, real: Awaitable[T], emulated: Awaitable[object]) -> T:
        """Run ``real`` (the action's work) and ``emulated`` (waits out its emulated duration: ``clock.sleep``,
        or a shared-cores job's completion) from now; return ``real``'s result once both have ended."""
        start = self.clock.now
        ended: list[float] = []
        timer = asyncio.ensure_future(emulated)
        timer.add_done_callback(lambda _: ended.append(self.clock.now))
        try:
            result = await real
        except BaseException:
            timer.cancel()
            raise
        real_end = self.clock.now
        await timer
        # its callback may not have run yet: then it ended just now
        self.records.append((start, real_end, ended[0] if ended else self.clock.now))
        return result

    def shared(self, cores: object, work: float) -> asyncio.Future:
        """A future done when ``work`` CPU-seconds have run on ``cores`` — a SharedCores model built on this
        execution's clock — alongside whatever else runs there."""
        done = asyncio.get_running_loop().create_future()
        cores.run(work, lambda: done.done() or done.set_result(None))
        return done
