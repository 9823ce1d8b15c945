"""EnvHost's thread pool: batched result delivery, one watchdog timer for call timeouts, thread accounting."""
import asyncio
import threading
import time

from rollart.rollout.env_host import DaemonThreadPool, EnvHost, EnvHostConfig


def _sleep_then(value, seconds):
    time.sleep(seconds)
    return value


def _boom():
    raise ValueError("bad env call")


async def test_a_burst_of_calls_returns_every_result_to_its_caller():
    pool = DaemonThreadPool(max_workers=64)
    jobs = [pool.run(_sleep_then, i, 0.01) for i in range(200)]  # more calls than threads
    assert await asyncio.gather(*(j.future for j in jobs)) == list(range(200))
    failing = pool.run(_boom)
    try:
        await failing.future
        raise AssertionError("the call's exception must reach its caller")
    except ValueError as e:
        assert "bad env call" in str(e)
    assert pool.live_threads <= 64 and pool._outstanding == 0  # every completion was drained


async def test_burst_completions_share_loop_wakeups():
    pool = DaemonThreadPool(max_workers=32)
    pool.prestart(32)
    loop = asyncio.get_running_loop()
    wakeups = 0
    original = loop.call_soon_threadsafe

    def counting(*args):
        nonlocal wakeups
        wakeups += 1
        return original(*args)

    loop.call_soon_threadsafe = counting
    try:
        barrier = threading.Barrier(32)  # all 32 calls finish at the same moment
        jobs = [pool.run(barrier.wait) for _ in range(32)]
        results = await asyncio.gather(*(j.future for j in jobs))
    finally:
        del loop.call_soon_threadsafe
    assert sorted(results) == list(range(32))  # Barrier.wait returns each thread's arrival index
    assert 1 <= wakeups < 32  # completions that arrive together are delivered together


async def test_abandoned_thread_is_replaced_and_exits_when_its_call_returns():
    pool = DaemonThreadPool(max_workers=1, name="abandontest")
    stuck = pool.run(_sleep_then, "late", 0.3)
    await asyncio.sleep(0.05)  # the one thread is inside the call now
    assert stuck.started
    stuck.future.cancel()
    pool.abandon(stuck)
    assert pool.live_threads == 0  # written off: a replacement may start
    fresh = pool.run(_sleep_then, "fresh", 0.0)
    assert await fresh.future == "fresh" and pool.live_threads == 1
    await asyncio.sleep(0.4)  # the stuck call returns; its thread exits instead of serving again
    assert len([t for t in threading.enumerate() if t.name.startswith("abandontest-")]) == 1


async def test_timeouts_fire_at_their_own_deadlines_with_one_timer():
    host = EnvHost(EnvHostConfig(step_timeout_s=0.2, reset_timeout_s=5.0))
    hung = await host.create("rollart/GuessNumber-v0", {}, {"hang_prob": 1.0, "hang_seconds": 30})
    ok = await host.create("rollart/GuessNumber-v0")
    await host.reset(ok["key"], 1)
    started = time.perf_counter()
    slow_reset = asyncio.create_task(host.reset(hung["key"], 1))  # no fault on reset: returns
    hang = asyncio.create_task(host.step(ok["key"], "50"))
    assert (await slow_reset)["ok"] and (await hang)["ok"]
    hang = asyncio.create_task(host.step(hung["key"], "50"))  # hangs: only its own timeout ends it
    result = await hang
    assert not result["ok"] and "timed out after 0.2s" in result["error"]
    assert time.perf_counter() - started < 5.0  # not held to the longer reset timeout
    assert host._watchdog.jobs == {}  # nothing left watched once every call settled


def test_host_reused_under_a_new_event_loop_still_enforces_timeouts():
    host = EnvHost(EnvHostConfig(step_timeout_s=0.2))

    async def one_hang() -> dict:
        r = await host.create("rollart/GuessNumber-v0", {}, {"hang_prob": 1.0, "hang_seconds": 30})
        await host.reset(r["key"], 1)
        return await host.step(r["key"], "50")

    for _ in range(2):  # two asyncio.run()s: the watchdog re-arms on the second loop
        result = asyncio.run(one_hang())
        assert not result["ok"] and "timed out" in result["error"]
    assert host.stats()["timeouts"] == 2


async def test_prewarm_replaces_written_off_threads_before_the_step():
    host = EnvHost(EnvHostConfig(step_timeout_s=0.2, min_threads=2, max_threads=8, reuse_envs=True))
    hung = await host.create("rollart/GuessNumber-v0", {}, {"hang_prob": 1.0, "hang_seconds": 30})
    await host.reset(hung["key"], 1)
    assert not (await host.step(hung["key"], "50"))["ok"]  # timed out: its thread is written off
    assert host.stats()["threads"] == 1
    assert await host.prewarm("rollart/GuessNumber-v0", None, None, 3) == 3
    assert host.stats()["threads"] == 3  # max(min_threads, count) live again, before any call needs them
