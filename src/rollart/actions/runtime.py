"""``ActionScheduler``: the asyncio front of :class:`ElasticScheduler` that rollout code calls.

``result = await scheduler.submit(action)`` queues the action, runs Algorithm 1 on the arrival and on
every completion, executes each started action with ``await action.payload(grant)`` (the grant maps
resource names to what the pools handed out: core ids, a GPU chunk, ...) and returns its result.
Cancelling the awaiting coroutine removes a queued action or cancels a running one; a failing action
raises in its own caller only. Quota pools that refill with time wake the scheduler by a timer.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from rollart.actions.action import Action
from rollart.actions.elastic import ElasticScheduler, Running


class ActionScheduler:
    """Async adapter: one FCFS queue, decisions on arrival/completion, one task per running action."""

    def __init__(self, pools: dict[str, Any], depth: int = 2, lookahead: int = 128,
                 elastic: bool = True):
        self.core = ElasticScheduler(pools, depth=depth, lookahead=lookahead, clock=time.monotonic,
                                     elastic=elastic)
        self._futures: dict[int, asyncio.Future] = {}
        self._tasks: dict[int, asyncio.Task] = {}
        self._timer: Optional[asyncio.TimerHandle] = None
        self.cpu_seconds = 0.0
        """CPU time (this thread's) the scheduler spent deciding, starting and finishing actions: the system
        overhead of ARL-Tangram's Table 1, apart from the actions' own execution."""

    async def submit(self, action: Action) -> Any:
        """Queue ``action`` and wait for its result (exceptions of the payload propagate here)."""
        if not callable(action.payload):
            raise TypeError(f"action {action.kind}#{action.id}: payload must be an async callable "
                            "taking the grant dict, got " + type(action.payload).__name__)
        fut = asyncio.get_running_loop().create_future()
        self.core.submit(action)
        self._futures[action.id] = fut
        self._pump()
        try:
            return await fut
        except asyncio.CancelledError:
            self.core.cancel(action.id)  # no-op if it already started
            task = self._tasks.get(action.id)
            if task is not None:
                task.cancel()
            raise
        finally:
            self._futures.pop(action.id, None)

    def _pump(self) -> None:
        t0 = time.thread_time()
        try:
            self._decide_and_start()
        finally:
            self.cpu_seconds += time.thread_time() - t0

    def _decide_and_start(self) -> None:
        # 1) decide and start  2) arm a timer if only time (quota windows) can unblock the queue
        for run in self.core.step():
            self._tasks[run.action.id] = asyncio.create_task(self._execute(run))
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        wake = self.core.next_wakeup()
        if wake is not None:
            delay = max(0.0, wake - time.monotonic()) + 1e-3
            self._timer = asyncio.get_running_loop().call_later(delay, self._pump)

    async def _execute(self, run: Running) -> None:
        fut = self._futures.get(run.action.id)
        try:
            result = await run.action.payload(run.grant | {"units": run.units})
            if fut is not None and not fut.done():
                fut.set_result(result)
        except asyncio.CancelledError:
            if fut is not None and not fut.done():
                fut.cancel()
        except Exception as e:  # the action's own failure: reported to its caller only
            if fut is not None and not fut.done():
                fut.set_exception(e)
        finally:
            t0 = time.thread_time()
            self._tasks.pop(run.action.id, None)
            self.core.finish(run.action)
            self.cpu_seconds += time.thread_time() - t0
            self._pump()

    async def close(self) -> None:
        """Cancel every running action and drop queued ones."""
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        for a in list(self.core.queue):
            self.core.cancel(a.id)
            fut = self._futures.get(a.id)
            if fut is not None and not fut.done():
                fut.cancel()

    @property
    def decision_latency(self) -> list[float]:
        return self.core.decision_latency

    @property
    def records(self):
        return self.core.records
