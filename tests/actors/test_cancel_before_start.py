"""A call cancelled before the actor's task first runs (Call and Cancel in one drain) leaves no unawaited coroutine.

Before the fix the actor made the method's coroutine while reading the Call, the Cancel then cancelled
the task that was to await it before its first step, and the coroutine stayed referenced by that task
until the actor stopped: "coroutine ... was never awaited" at shutdown.
"""
import asyncio
import gc
import warnings

import pytest


async def _cancel_in_same_drain(make_call, n: int = 5) -> None:
    """Send a call, then its cancel, before the actor's event-loop callback has read the call."""
    for _ in range(n):
        task = asyncio.ensure_future(make_call())
        await asyncio.sleep(0)  # the task's first step sends the Call frames; nobody has read them yet
        task.cancel()           # its Cancel frame follows: the actor drains both at once
        with pytest.raises(asyncio.CancelledError):
            await task


def _never_awaited(caught: list) -> list[str]:
    return [str(w.message) for w in caught
            if issubclass(w.category, RuntimeWarning) and "never awaited" in str(w.message)]


@pytest.mark.parametrize("method, args", [("sleep", (5.0, "x")), ("busy", (0.01,))])
async def test_cancel_before_start_creates_no_orphan_coroutine(system, method, args):
    echo = await system.spawn("sample_actors:Echo", mode="inprocess", name=f"early-cancel-{method}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await _cancel_in_same_drain(lambda: echo.call(method, *args))
        assert await echo.add(2, 3) == 5  # the actor serves on
        # the method never ran (no coroutine, no thread job), so it never saw a cancel either
        assert await echo.get_cancelled() == [] and await echo.get_busy_runs() == 0
        await echo.stop()  # where the orphaned coroutines used to be reported
        gc.collect()
    assert _never_awaited(caught) == []


async def test_stream_cancelled_before_start_leaves_the_actor_serving(system):
    echo = await system.spawn("sample_actors:Echo", mode="inprocess", name="early-cancel-stream")

    async def first_item():
        async for item in echo.stream("count", 3, delay=1.0):
            return item

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await _cancel_in_same_drain(first_item)
        assert [x async for x in echo.stream("count", 3)] == [0, 1, 2]
        await echo.stop()
        gc.collect()
    assert _never_awaited(caught) == []
