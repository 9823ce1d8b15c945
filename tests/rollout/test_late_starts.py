"""defer_late_starts: a group expected to outlast what is left of its start version's window starts at the next
version instead of running until the per-turn bound aborts it."""
import asyncio
import time
from collections import Counter

import pytest
from rollout_helpers import make_manager, next_policy

from rollart.rollout.buffer import BufferConfig, SampleBuffer
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.rollout.late_starts import LateStarts, VersionClock
from rollart.rollout.task_mix import TaskMix
from rollart.types import Trajectory


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def versions_one_second_apart(buf: SampleBuffer, clock: Clock, last: int = 3) -> None:
    for v in range(1, last + 1):
        clock.now = float(v - 1)
        await buf.set_version(v)


def timed_buffer(clock: Clock, mode: str = "async", alpha: int = 1, group_size: int = 1) -> SampleBuffer:
    return SampleBuffer(BufferConfig(mode=mode, alpha=alpha, group_size=group_size, capacity=8),
                        version_clock=VersionClock(clock))


def window(buf: SampleBuffer):
    return LateStarts(buf, defer=True, counters=Counter()).window()


async def test_the_window_is_alpha_plus_one_iterations_from_the_current_versions_arrival():
    clock = Clock()
    buf = timed_buffer(clock)
    assert window(buf) is None  # no iteration timed yet
    await buf.set_version(1)
    await buf.set_version(2)
    assert window(buf) is None  # one interval is no mean
    clock.now = 3.0
    await buf.set_version(3)  # versions at 0, 0, 3: an iteration of 1.5 s
    await buf.set_version(3)  # the same version again is no arrival
    clock.now = 3.5
    assert window(buf) == pytest.approx((3.0 + 3.0 - 3.5, 3.0))
    alpha2 = timed_buffer(clock, alpha=2)
    await versions_one_second_apart(alpha2, clock)
    clock.now = 2.25
    assert window(alpha2) == pytest.approx((2.0 + 3.0 - 2.25, 3.0))
    await alpha2.rewind(1)  # a recovery is no iteration: the window is timed afresh
    assert window(alpha2) is None
    areal = timed_buffer(clock, mode="areal")
    await versions_one_second_apart(areal, clock)
    assert window(areal) is None  # a start-only bound cuts nothing mid-flight


async def test_a_held_back_start_wakes_on_a_new_version_or_when_the_batch_lacks_its_task():
    buf = SampleBuffer(BufferConfig(mode="async", alpha=1, group_size=1, capacity=4))
    t0 = time.monotonic()
    await buf.until_next_version_or_lacking("slow", timeout=0.05)  # nothing happens: it gives up after its timeout
    assert time.monotonic() - t0 >= 0.05
    waiting = asyncio.create_task(buf.until_next_version_or_lacking("slow", timeout=10))
    await asyncio.sleep(0)
    await buf.set_version(1)
    await asyncio.wait_for(waiting, 1)
    buf.task_mix = TaskMix({"quick": 1.0, "slow": 1.0})
    waiting = asyncio.create_task(buf.until_next_version_or_lacking("slow", timeout=10))
    batch = asyncio.create_task(buf.get_batch(2))
    await buf.put([Trajectory("q0", "q", "quick", start_version=1, status="done")])
    await buf.put([Trajectory("q1", "q1", "quick", start_version=1, status="done")])
    await asyncio.wait_for(waiting, 1)  # the batch takes one group of each task: it lacks "slow"
    assert not batch.done() and buf.task_mix.lacking == {"slow"}
    await buf.put([Trajectory("s0", "s", "slow", start_version=1, status="done")])
    assert [t.task for t in await asyncio.wait_for(batch, 1)] == ["quick", "slow"]


async def start_one_group(tokenizer, expected_s: float, defer: bool = True):
    """One group of a task whose recent groups took ``expected_s``, asked to start 0.5 s before its version
    (3, come at 2.0 with an iteration of 1 s) is retired at 4.0. Returns the buffer and the running producer."""
    clock = Clock()
    buf = timed_buffer(clock, group_size=2)
    await versions_one_second_apart(buf, clock)
    clock.now = 3.5
    assert window(buf) == pytest.approx((0.5, 2.0))
    manager = make_manager(next_policy(tokenizer, version=lambda: buf.version), tokenizer, gate=buf)
    scheduler = RolloutScheduler([TaskSpec("c", "usertest/Countdown-v0")], manager,
                                 SchedulerConfig(group_size=2, max_concurrency=4, defer_late_starts=defer),
                                 buffer=buf)
    scheduler.late.seconds["c"].extend([expected_s] * 4)
    return buf, scheduler, asyncio.create_task(scheduler.run(max_groups=1))


async def test_a_group_that_would_outlast_its_window_starts_at_the_next_version(tokenizer):
    buf, scheduler, producer = await start_one_group(tokenizer, expected_s=1.0)
    await asyncio.sleep(0.2)
    assert scheduler.counters["starts_deferred"] == 1 and scheduler.counters["launched"] == 0
    await buf.set_version(4)
    async with asyncio.timeout(10):
        await producer
    batch = await asyncio.wait_for(buf.get_batch(2), 10)
    assert {t.start_version for t in batch} == {4}  # a whole window ahead of it, not half of one
    assert scheduler.counters["deferred_ms"] > 0


@pytest.mark.parametrize("expected_s, defer", [(0.4, True), (3.0, True), (1.0, False)],
                         ids=["fits what is left", "fits no window", "defer_late_starts off"])
async def test_a_group_starts_at_once_when_deferring_would_not_help(tokenizer, expected_s, defer):
    buf, scheduler, producer = await start_one_group(tokenizer, expected_s, defer)
    async with asyncio.timeout(10):
        await producer
    batch = await asyncio.wait_for(buf.get_batch(2), 10)
    assert {t.start_version for t in batch} == {3} and scheduler.counters["starts_deferred"] == 0


def test_a_task_the_bound_starves_is_named_once_with_what_to_change(caplog):
    counters = Counter()
    late = LateStarts(SampleBuffer(BufferConfig(mode="async", alpha=1, group_size=2, capacity=8)), True, counters)
    for i in range(16):
        late.finished("long", 4.0, cut=i % 8 != 0)  # 7 of every 8 cut
        late.finished("short", 1.0, cut=i % 3 == 0)  # 1 of every 3
    said = [r.getMessage() for r in caplog.records if "per-turn staleness bound" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("task long: 7 of its last 8 groups") and "Raise alpha" in said[0]
    assert "less of this task than its weight" in said[0]
    assert counters["groups_stale/long"] == 14 and counters["groups_complete/short"] == 10
    mixed = SampleBuffer(BufferConfig(mode="async", alpha=1, group_size=2, capacity=8))
    mixed.task_mix = TaskMix({"long": 1.0, "short": 1.0})  # the batches keep its share: the cut groups are waste
    late = LateStarts(mixed, True, Counter())
    for _ in range(8):
        late.finished("long", 4.0, cut=True)
    said = [r.getMessage() for r in caplog.records if "per-turn staleness bound" in r.getMessage()]
    assert len(said) == 2 and "their generation is wasted" in said[1]
