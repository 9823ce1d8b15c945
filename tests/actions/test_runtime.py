"""ActionScheduler (async): results and errors reach callers, cancellation, quota pools never exceed their rate."""
import asyncio
import time

import pytest

from rollart.actions.action import Action
from rollart.actions.basic import CountPool, QuotaPool, max_in_window
from rollart.actions.runtime import ActionScheduler


def call(fn, **kw):
    async def payload(grant):
        return await fn(grant)
    return Action(kw.pop("cost", {}), payload=payload, **kw)


async def test_results_and_failures_reach_their_callers_only():
    sched = ActionScheduler({"api": CountPool("api", 2)})

    async def ok(grant):
        await asyncio.sleep(0.01)
        return grant["api"]

    async def bad(grant):
        raise ValueError("tool crashed")

    results = await asyncio.gather(sched.submit(call(ok, cost={"api": 1})),
                                   sched.submit(call(bad, cost={"api": 1})),
                                   sched.submit(call(ok, cost={"api": 1})), return_exceptions=True)
    assert results[0] == 1.0 and results[2] == 1.0
    assert isinstance(results[1], ValueError) and "tool crashed" in str(results[1])
    assert sched.core.pools["api"].used == 0 and len(sched.records) == 3
    assert len(sched.decision_latency) >= 6  # decided on every arrival and completion


async def test_concurrency_limit_holds_and_cancel_removes_queued_action():
    pool = CountPool("site", 1)
    sched = ActionScheduler({"site": pool})
    gate = asyncio.Event()
    active, peak = 0, 0

    async def work(grant):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await gate.wait()
        active -= 1
        return "done"

    first = asyncio.create_task(sched.submit(call(work, cost={"site": 1})))
    second = asyncio.create_task(sched.submit(call(work, cost={"site": 1})))
    await asyncio.sleep(0.05)
    assert len(sched.core.queue) == 1
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    assert len(sched.core.queue) == 0  # cancelled while queued: gone, never ran
    gate.set()
    assert await first == "done" and peak == 1


async def test_quota_manager_never_exceeds_its_rate():
    quota = QuotaPool("search", limit=5, period=0.2)
    sched = ActionScheduler({"search": quota})
    starts = []

    async def query(grant):
        starts.append(time.monotonic())
        return len(starts)

    out = await asyncio.gather(*(sched.submit(call(query, cost={"search": 1})) for _ in range(23)))
    assert sorted(out) == list(range(1, 24))  # all served (the timer refills the window)
    assert max_in_window(quota.history, 0.2) <= 5


def test_max_in_window_counts_correctly():
    hist = [(0.0, 1), (0.1, 1), (0.17, 1), (0.3, 1)]
    assert max_in_window(hist, 0.2) == 3
    assert max_in_window(hist, 0.05) == 1


async def test_payload_must_be_async_callable():
    sched = ActionScheduler({"api": CountPool("api", 1)})
    with pytest.raises(TypeError, match="payload must be an async callable"):
        await sched.submit(Action({"api": 1}, payload="ls"))
