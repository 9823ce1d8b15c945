"""keep_task_mix: each task's share of the groups started and trained follows its weight, a batch waits for a task
it lacks only while a group of it can come, and a task whose envs fail holds up nothing."""
import asyncio
from collections import Counter

import pytest
from rollout_helpers import make_manager, next_policy

from rollart.rollout.buffer import BufferConfig, SampleBuffer
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.rollout.task_mix import TaskMix
from rollart.types import Trajectory


def group(task: str, gid: str, start_version: int = 0) -> list[Trajectory]:
    return [Trajectory(f"{gid}-0", gid, task, start_version=start_version, status="done")]


def test_quotas_keep_every_tasks_share_within_a_group_of_its_weight():
    mix = TaskMix({"lake": 3.0, "math": 1.0, "game": 1.0})
    for batch in range(1, 21):
        quota = mix.quota(6)
        assert sum(quota.values()) == 6
        mix.took([group(task, "g") for task, k in quota.items() for _ in range(k)])
        for task, share in mix.shares.items():
            assert abs(mix.settled[task] - share * 6 * batch) < 1
    assert mix.settled == Counter(lake=72, math=24, game=24)


def test_draws_follow_the_weights_and_a_lost_group_is_drawn_again_but_not_a_failed_one():
    mix = TaskMix({"lake": 3.0, "math": 1.0, "game": 1.0})
    assert Counter(mix.draw() for _ in range(50)) == Counter(lake=30, math=10, game=10)
    mix.lost("math")
    assert mix.draw() == "math"
    mix.failed("math")  # settled: not drawn again ahead of its share
    assert Counter(mix.draw() for _ in range(5)) == Counter(lake=3, math=1, game=1)
    assert TaskMix.of([TaskSpec("only", "usertest/Countdown-v0")]) is None
    with pytest.raises(ValueError, match="weights > 0"):
        TaskMix({"a": 1.0, "b": 0.0})


def mixed_buffer(capacity: int = 8, max_outstanding_groups: int = 0) -> SampleBuffer:
    buf = SampleBuffer(BufferConfig(mode="async", group_size=1, capacity=capacity,
                                    max_outstanding_groups=max_outstanding_groups))
    buf.task_mix = TaskMix({"quick": 1.0, "slow": 1.0})
    return buf


async def admitted(buf: SampleBuffer, *tasks: str) -> None:
    for task in tasks:
        await buf.admit_group()
        assert buf.task_mix.draw() == task


async def test_a_batch_waits_for_the_task_it_lacks_and_leaves_the_surplus_buffered():
    buf = mixed_buffer()
    await admitted(buf, "quick", "slow", "quick", "slow")
    for gid in ("q0", "q1"):
        await buf.put(group("quick", gid))
    batch = asyncio.create_task(buf.get_batch(2))
    await asyncio.sleep(0.01)
    assert not batch.done() and buf.task_mix.lacking == {"slow"}  # first come would have taken q0, q1
    await buf.put(group("slow", "s0"))
    assert [t.group_id for t in await asyncio.wait_for(batch, 1)] == ["q0", "s0"]
    assert [g[0].group_id for g in buf.groups] == ["q1"] and buf.task_mix.unmet == 0 and buf.accounting_ok()


async def two_quick_groups_buffered(max_outstanding_groups: int, capacity: int = 8) -> SampleBuffer:
    """Two quick groups started and finished; no slow group runs."""
    buf = mixed_buffer(capacity=capacity, max_outstanding_groups=max_outstanding_groups)
    for gid in ("q0", "q1"):
        await buf.admit_group()
        buf.task_mix.kept["quick"] += 1
        await buf.put(group("quick", gid))
    return buf


async def test_a_batch_waits_for_no_task_that_cannot_come():
    can_start = await two_quick_groups_buffered(max_outstanding_groups=3)
    batch = asyncio.create_task(can_start.get_batch(2))
    await asyncio.sleep(0.01)
    assert not batch.done()  # a slow group may still start: the batch waits for it
    await admitted(can_start, "slow")
    await can_start.put(group("slow", "s0"))
    assert [t.group_id for t in await asyncio.wait_for(batch, 1)] == ["q0", "s0"]
    for shut in (await two_quick_groups_buffered(max_outstanding_groups=2),  # no group may start
                 await two_quick_groups_buffered(max_outstanding_groups=0, capacity=2)):  # nothing more fits
        assert [t.group_id for t in await asyncio.wait_for(shut.get_batch(2), 1)] == ["q0", "q1"]
        assert shut.task_mix.unmet == shut.stats()["mix_unmet"] == 1 and shut.accounting_ok()


async def produce_and_train(tokenizer, keep_task_mix: bool, tasks: list[TaskSpec], batches: int = 6) -> Counter:
    """A real scheduler fills a buffer while the trainer side takes ``batches`` batches of two groups, a version every
    10 ms or so (a turn takes 5 ms); returns the groups trained per task."""
    buf = SampleBuffer(BufferConfig(mode="async", alpha=1, group_size=2, capacity=16))
    manager = make_manager(next_policy(tokenizer, latency_s=0.005, version=lambda: buf.version), tokenizer, gate=buf)
    scheduler = RolloutScheduler(tasks, manager, SchedulerConfig(group_size=2, max_concurrency=8, seed=0,
                                                                 keep_task_mix=keep_task_mix), buffer=buf)
    trained: Counter = Counter()
    producer = asyncio.create_task(scheduler.run())
    try:
        async with asyncio.timeout(60):
            for version in range(1, batches + 1):
                batch = await buf.get_batch(4)
                trained.update(t.task for t in batch[::2])
                await asyncio.sleep(0.01)  # the train step
                await buf.batch_trained()
                await buf.set_version(version)
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
    return trained


QUICK_AND_SLOW = [TaskSpec("quick", "usertest/Countdown-v0", env_kwargs={"start": 1}),
                  TaskSpec("slow", "usertest/Countdown-v0", env_kwargs={"start": 9})]


async def test_batches_train_each_task_at_its_weight_where_first_come_trains_the_quick_one(tokenizer):
    kept = await produce_and_train(tokenizer, True, QUICK_AND_SLOW)
    assert kept == Counter(quick=6, slow=6)
    # first come: a slow group (9 turns, 45 ms) outlasts the alpha=1 window (two iterations of 10-20 ms): the bound
    # cuts most of them, and the quick task fills the batches
    first_come = await produce_and_train(tokenizer, False, QUICK_AND_SLOW)
    assert first_come["slow"] < first_come["quick"], first_come


async def test_a_task_whose_envs_fail_holds_up_neither_the_batches_nor_the_other_task(tokenizer):
    tasks = [TaskSpec("broken", "usertest/Countdown-v0", env_kwargs={"crash_at": 1}),
             TaskSpec("fine", "usertest/Countdown-v0", env_kwargs={"start": 2})]
    assert await produce_and_train(tokenizer, True, tasks, batches=3) == Counter(fine=6)
