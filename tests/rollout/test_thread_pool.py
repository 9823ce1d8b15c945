"""EnvHost's thread pool: batched result delivery, one watchdog timer for call timeouts, thread accounting."""
import asyncio
import threading
import time

import envs  # noqa: F401  (registers the rollart/* envs)

from rollart.rollout.env_host import DaemonThreadPool, EnvHost, EnvHostConfig
from rollart.messages import CreateEnv, GetStats, PrewarmEnvs, ResetEnv, StepEnv


def _sleep_then(value, seconds):
    time.sleep(seconds)
    return value


def _wait_then(event, value):
    event.wait(30)
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
        go = threading.Event()
        jobs = [pool.run(_wait_then, go, i) for i in range(32)]
        mailbox = pool._mailbox(loop)
        go.set()
        for _ in range(1000):  # block the loop (not awaiting) until all 32 results wait in the mailbox
            if len(mailbox.items) == 32:
                break
            time.sleep(0.01)
        results = await asyncio.gather(*(j.future for j in jobs))
    finally:
        del loop.call_soon_threadsafe
    assert results == list(range(32))
    assert wakeups == 1  # 32 completions while the loop was busy: one wake-up, one drain


async def _until(predicate, what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def test_abandoned_thread_is_replaced_and_exits_when_its_call_returns():
    pool = DaemonThreadPool(max_workers=1, name="abandontest")
    release = threading.Event()
    stuck = pool.run(_wait_then, release, "late")
    await _until(lambda: stuck.started, "the one thread entered the call")
    stuck.future.cancel()
    pool.abandon(stuck)
    assert pool.live_threads == 0  # written off: a replacement may start
    fresh = pool.run(_sleep_then, "fresh", 0.0)
    assert await fresh.future == "fresh" and pool.live_threads == 1
    ours = lambda: [t for t in threading.enumerate() if t.name.startswith("abandontest-")]  # noqa: E731
    assert len(ours()) == 2
    release.set()  # the stuck call returns; its thread exits instead of serving again
    await _until(lambda: len(ours()) == 1, "the written-off thread exited")
    assert pool.live_threads == 1


async def test_a_short_timeout_fires_while_a_longer_call_is_in_flight():
    host = EnvHost(EnvHostConfig(step_timeout_s=0.2, reset_timeout_s=60.0))
    slow = await host.create(CreateEnv("rollart/GuessNumber-v0", {},
                             {"hang_prob": 1.0, "hang_seconds": 1.0, "on_reset": True}))  # reset: 1 s
    hung = await host.create(CreateEnv("rollart/GuessNumber-v0", {}, {"hang_prob": 1.0, "hang_seconds": 30}))
    await host.reset(ResetEnv(hung["key"], 1))
    slow_reset = asyncio.create_task(host.reset(ResetEnv(slow["key"], 1)))  # watchdog armed for its 60 s deadline
    await asyncio.sleep(0)
    result = await host.step(StepEnv(hung["key"], "50"))  # must not wait for the reset's later deadline
    assert not result["ok"] and "timed out after 0.2s" in result["error"]
    assert not slow_reset.done()  # the 1 s reset is still running: the step's own deadline fired first
    assert (await slow_reset)["ok"]
    assert host._watchdog.jobs == {}  # nothing left watched once every call settled


async def test_prewarm_replaces_written_off_threads_before_the_step():
    host = EnvHost(EnvHostConfig(step_timeout_s=0.2, min_threads=2, max_threads=8, reuse_envs=True))
    hung = await host.create(CreateEnv("rollart/GuessNumber-v0", {}, {"hang_prob": 1.0, "hang_seconds": 30}))
    await host.reset(ResetEnv(hung["key"], 1))
    assert not (await host.step(StepEnv(hung["key"], "50")))["ok"]  # timed out: its thread is written off
    assert host.stats(GetStats())["threads"] == 1
    assert await host.prewarm(PrewarmEnvs("rollart/GuessNumber-v0", None, None, 3)) == 3
    assert host.stats(GetStats())["threads"] == 3  # max(min_threads, count) live again, before any call needs them


def test_host_reused_under_a_new_event_loop_still_enforces_timeouts():
    host = EnvHost(EnvHostConfig(step_timeout_s=0.2))

    async def one_hang() -> dict:
        r = await host.create(CreateEnv("rollart/GuessNumber-v0", {}, {"hang_prob": 1.0, "hang_seconds": 30}))
        await host.reset(ResetEnv(r["key"], 1))
        return await host.step(StepEnv(r["key"], "50"))

    for _ in range(2):  # two asyncio.run()s: the watchdog re-arms on the second loop
        result = asyncio.run(one_hang())
        assert not result["ok"] and "timed out" in result["error"]
    assert host.stats(GetStats())["timeouts"] == 2


def test_a_call_left_running_by_a_closed_loop_still_occupies_its_thread():
    pool = DaemonThreadPool(max_workers=4, name="looptest")
    release = threading.Event()

    async def leave_one_behind() -> None:
        pool.run(_wait_then, release, 1)  # still running when this loop closes

    async def next_loop() -> tuple[int, int]:
        job = pool.run(_sleep_then, 2, 0.0)
        return pool.live_threads, await job.future

    try:
        asyncio.run(leave_one_behind())
        # the next loop's call gets a thread of its own instead of queueing behind the stuck one
        assert asyncio.run(next_loop()) == (2, 2)
    finally:
        release.set()
