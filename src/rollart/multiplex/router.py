"""Router: logical deployment id -> worker-process group (WPG); one operation at a time per group.

Every admitted operation gets the group's next sequence number and is sent to every rank of the group as an
``Operation(seq, job, request)`` (``rollart.multiplex.messages``) while the group's lock is held; the lock is
released only when every rank has answered, even if the caller was cancelled meanwhile (the call is shielded),
so a later operation can never overlap an earlier one. Each group keeps an operation log
``(seq, job, op, start, end)``; ``check_serial`` verifies it. Different groups have different locks and run
concurrently. The Router itself is stateless beyond this namespace:
*when* an operation may run is the Scheduler's decision.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable

from rollart.multiplex.messages import Operation, op_name


@dataclass
class OpRecord:
    seq: int
    job: str
    op: str
    start: float
    end: float = float("nan")
    ok: bool = True


class UnknownDeploymentError(KeyError):
    pass


class Router:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.groups: dict[str, list[Any]] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.seq: dict[str, int] = {}
        self.log: dict[str, list[OpRecord]] = {}
        self.clock = clock
        self.emulated: dict[str, Any] = {}
        """job -> its ``rollart.multiplex.emulated.EmulatedJob``: the job's operations hold their group for the
        emulated time too (the lock held throughout: the emulated device is exclusive)."""

    def add(self, deployment: str, workers: list[Any]) -> None:
        if deployment in self.groups:
            raise ValueError(f"deployment {deployment!r} already exists")
        if not workers:
            raise ValueError(f"deployment {deployment!r} needs at least one worker")
        self.groups[deployment] = list(workers)
        self.locks[deployment] = asyncio.Lock()
        self.seq[deployment] = 0
        self.log[deployment] = []

    def workers(self, deployment: str) -> list[Any]:
        try:
            return self.groups[deployment]
        except KeyError:
            raise UnknownDeploymentError(f"no deployment {deployment!r}; known: {sorted(self.groups)}") from None

    async def execute(self, deployment: str, job: str, request: Any,
                      on_admit: Callable[[], None] | None = None) -> Any:
        """Run ``job``'s ``request`` on every rank of the group, alone; returns rank 0's answer."""
        group = self.workers(deployment)
        async with self.locks[deployment]:
            if on_admit is not None:
                on_admit()
            self.seq[deployment] += 1
            rec = OpRecord(self.seq[deployment], job, op_name(request), self.clock())
            self.log[deployment].append(rec)
            op = Operation(rec.seq, job, request)
            call = asyncio.ensure_future(asyncio.gather(*(w.send(op) for w in group)))
            try:
                results = await asyncio.shield(call)
                emulated = self.emulated.get(job)
                if emulated is not None:
                    results[0] = await emulated.hold(request, results[0], self.clock() - rec.start)
            except asyncio.CancelledError:
                # the caller gave up, but the ranks may still be executing: hold the lock until they finish
                await asyncio.gather(call, return_exceptions=True)
                rec.ok = False
                raise
            except BaseException:
                rec.ok = False
                raise
            finally:
                rec.end = self.clock()
            return results[0]

    async def notify(self, deployment: str, hint: Any) -> None:
        """A hint outside the serial order (e.g. ``Prefetch``): sent to every rank, failures ignored."""
        async def one(w: Any) -> Any:
            return await w.send(hint)
        await asyncio.gather(*(one(w) for w in self.workers(deployment)), return_exceptions=True)


def check_serial(log: list[OpRecord]) -> None:
    """Raise AssertionError unless sequence numbers are 1..n in order and no two operations overlap."""
    for i, rec in enumerate(log):
        if rec.seq != i + 1:
            raise AssertionError(f"operation {i} has seq {rec.seq}, expected {i + 1}")
        if i and rec.start < log[i - 1].end:
            raise AssertionError(f"op {rec.seq} ({rec.job}:{rec.op}) started before op {rec.seq - 1} ended")
