"""SampleBuffer: the α gate (mid-flight aborts vs AReaL's start-only bound), whole-group batches,
the capacity bound under out-of-order completion, and count in = trained + evicted-with-reason."""
import asyncio
import random

import pytest
from rollout_helpers import make_manager, next_policy

from rollart.rollout.buffer import BufferConfig, SampleBuffer
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.rollout.scripted import ScriptedPolicy
from rollart.types import Trajectory


def group(gid, start_version, size=2):
    return [Trajectory(f"{gid}-{i}", gid, "t", start_version=start_version, status="done") for i in range(size)]


async def test_get_batch_returns_whole_groups_oldest_first_and_blocks_until_ready():
    buf = SampleBuffer(BufferConfig(group_size=2, capacity=8))
    waiter = asyncio.create_task(buf.get_batch(4))
    await buf.put(group("a", 0))
    await asyncio.sleep(0)
    assert not waiter.done()
    await buf.put(group("b", 0))
    batch = await waiter
    assert [t.trajectory_id for t in batch] == ["a-0", "a-1", "b-0", "b-1"]
    with pytest.raises(ValueError, match="multiple of group_size"):
        await buf.get_batch(3)
    with pytest.raises(ValueError, match="group_size=2"):
        await buf.put(group("c", 0, size=3))


async def test_put_blocks_at_capacity_until_a_batch_is_taken():
    buf = SampleBuffer(BufferConfig(group_size=2, capacity=4))
    await buf.put(group("a", 0))
    await buf.put(group("b", 0))
    third = asyncio.create_task(buf.put(group("c", 0)))
    await asyncio.sleep(0.01)
    assert not third.done() and buf.buffered == 4
    await buf.get_batch(2)
    assert await third is True and buf.max_buffered == 4


async def test_stale_groups_are_evicted_before_a_batch_forms_with_reasons_counted():
    buf = SampleBuffer(BufferConfig(alpha=1, group_size=2, capacity=8))
    await buf.put(group("old", 0))
    await buf.put(group("new", 1))
    await buf.set_version(2)  # window is [1, 2]: 'old' leaves
    batch = await buf.get_batch(2)
    assert {t.group_id for t in batch} == {"new"}
    assert await buf.put(group("late", 0)) is False  # arrived stale
    assert dict(buf.evicted) == {"stale": 2, "stale_on_arrival": 2}
    assert buf.counters["accepted"] == 6 and buf.counters["trained"] == 2 and buf.accounting_ok()


async def test_oneoff_and_areal_at_batch_time():
    oneoff = SampleBuffer(BufferConfig(mode="oneoff", alpha=5, group_size=2, capacity=8))
    areal = SampleBuffer(BufferConfig(mode="areal", alpha=1, group_size=2, capacity=8))
    assert oneoff.config.alpha == 1
    for buf in (oneoff, areal):
        await buf.put(group("v0", 0))
        await buf.put(group("v1", 1))
        await buf.set_version(2)
    assert {t.group_id for t in await oneoff.get_batch(2)} == {"v1"} and oneoff.evicted["stale"] == 2
    assert [t.group_id for t in await areal.get_batch(4)] == ["v0", "v0", "v1", "v1"]  # never evicted
    assert oneoff.accounting_ok() and areal.accounting_ok()


def test_admit_turn_per_turn_versus_start_only():
    ours = SampleBuffer(BufferConfig(mode="async", alpha=1), version=3)
    areal = SampleBuffer(BufferConfig(mode="areal", alpha=1), version=3)
    assert ours.admit_turn(2, first_turn=False) is None
    assert "started at version 1" in ours.admit_turn(1, first_turn=False)
    assert areal.admit_turn(1, first_turn=False) is None  # AReaL: only the start is checked
    assert areal.admit_turn(1, first_turn=True) is not None
    assert SampleBuffer(BufferConfig(mode="sync", alpha=5)).config.alpha == 0


class Blocking(ScriptedPolicy):
    """The second turn of every trajectory waits until `go` is set."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, lambda t, o: "next")
        self.go = asyncio.Event()
        self.at_second_turn = asyncio.Event()
        self.turns = {}

    async def generate(self, tid, prompt, sampling=None, task="default"):
        self.turns[tid] = self.turns.get(tid, 0) + 1
        if self.turns[tid] == 2:
            self.at_second_turn.set()
            try:
                await self.go.wait()
            except asyncio.CancelledError:
                self.counters["cancelled"] += 1
                raise
        return await super().generate(tid, prompt, sampling, task)


@pytest.mark.parametrize("mode", ["async", "areal"])
async def test_gate_aborts_mid_flight_only_in_per_turn_mode(tokenizer, mode):
    buf = SampleBuffer(BufferConfig(mode=mode, alpha=1, group_size=1, capacity=4))
    policy = Blocking(tokenizer)
    manager = make_manager(policy, tokenizer, gate=buf)
    run = asyncio.create_task(manager.run(TaskSpec("c", "usertest/Countdown-v0"), "t0", "g0", 0))
    await policy.at_second_turn.wait()  # mid-trajectory, generating its second turn, started at v0
    await buf.set_version(1)
    await asyncio.sleep(0)
    assert not run.done()  # still inside the window [0, 1]
    await buf.set_version(2)  # start version 0 < 2 - 1: out of the window
    policy.go.set()
    async with asyncio.timeout(10):
        traj = await run
    if mode == "async":
        assert traj.status == "aborted" and "stale mid-flight: started at version 0" in traj.reason
        assert policy.counters["cancelled"] == 1 and buf.aborted["stale_midflight"] == 1
    else:
        assert traj.status == "done" and traj.num_turns == 3 and policy.counters["cancelled"] == 0
    assert traj.start_version == 0 and manager.pool.live == 0 and buf.inflight == 0


async def test_buffer_bound_and_accounting_under_out_of_order_completion(tokenizer):
    rng = random.Random(0)
    version = {"v": 0}
    policy = ScriptedPolicy(tokenizer, lambda t, o: "next", latency_s=0.002, version=lambda: version["v"])
    capacity, concurrency = 6, 8
    buf = SampleBuffer(BufferConfig(mode="async", alpha=1, group_size=2, capacity=capacity))
    manager = make_manager(policy, tokenizer, gate=buf)
    # variable turns and per-step latency: trajectories and groups finish out of order
    tasks = [TaskSpec(f"c{n}", "usertest/Countdown-v0", env_kwargs={"start": n},
                      faults={"mean": 0.01, "std": 0.01, "straggler_prob": 0.1, "fault_seed": n})
             for n in (1, 2, 4, 7)]
    scheduler = RolloutScheduler(tasks, manager, SchedulerConfig(group_size=2, max_concurrency=concurrency),
                                 buffer=buf)
    producer = asyncio.create_task(scheduler.run())
    sizes, trained = [], 0
    async with asyncio.timeout(40):
        for step in range(8):
            batch = await buf.get_batch(4)
            trained += len(batch)
            counts = [sum(t.group_id == g for t in batch) for g in {t.group_id for t in batch}]
            assert counts == [2] * len(counts)  # whole GRPO groups only
            assert all(t.start_version >= buf.version - 1 for t in batch)
            sizes.append(buf.buffered)
            await asyncio.sleep(rng.uniform(0, 0.05))  # a "train step" of random length
            version["v"] = step + 1
            await buf.set_version(step + 1)
    producer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await producer
    assert buf.max_buffered <= capacity and max(sizes) <= capacity
    assert trained == buf.counters["trained"] == 32
    assert buf.accounting_ok()
    assert buf.counters["accepted"] == trained + sum(buf.evicted.values()) + buf.buffered
    assert manager.pool.live == 0 and buf.inflight == 0
    assert sum(buf.aborted.values()) > 0  # long trajectories really did fall out of the window


async def test_closing_the_buffer_stops_waiters_and_the_producer(tokenizer):
    from rollart.rollout.buffer import BufferClosed

    buf = SampleBuffer(BufferConfig(group_size=2, capacity=2))
    manager = make_manager(next_policy(tokenizer), tokenizer, gate=buf)
    scheduler = RolloutScheduler([TaskSpec("c", "usertest/Countdown-v0")], manager,
                                 SchedulerConfig(group_size=2, max_concurrency=4), buffer=buf)
    producer = asyncio.create_task(scheduler.run())
    async with asyncio.timeout(10):
        assert len(await buf.get_batch(2)) == 2
        assert len(await buf.get_batch(2)) == 2
    waiter = asyncio.create_task(buf.get_batch(2))
    await buf.close()
    with pytest.raises(BufferClosed):
        await waiter
    with pytest.raises(BufferClosed):  # its next put fails: run() ends with that one error
        async with asyncio.timeout(10):
            await producer
    assert manager.pool.live == 0


async def test_retire_before_next_aborts_and_evicts_what_no_later_batch_can_take(tokenizer):
    buf = SampleBuffer(BufferConfig(mode="async", alpha=1, group_size=1, capacity=4))
    policy = Blocking(tokenizer)  # its weights are version 0: the trajectory starts at version 0
    manager = make_manager(policy, tokenizer, gate=buf)
    run = asyncio.create_task(manager.run(TaskSpec("c", "usertest/Countdown-v0"), "t0", "g0", 0))
    await policy.at_second_turn.wait()
    await buf.set_version(1)
    await buf.put(group("old", 0, size=1))    # in the window [0, 1] now, not in [1, 2] of the next batch
    await buf.put(group("fresh", 1, size=1))
    assert not run.done() and buf.buffered == 2
    assert await buf.retire_before_next(2) == 2  # "old" evicted and the in-flight v0 trajectory aborted
    assert buf.evicted["stale_ahead"] == 1 and buf.buffered == 1
    policy.go.set()
    async with asyncio.timeout(10):
        traj = await run
    assert traj.status == "aborted" and "cannot join the next batch" in traj.reason
    assert buf.aborted["stale_ahead"] == 1 and buf.accounting_ok()
    assert await buf.retire_before_next(3) == 1 and buf.buffered == 0  # "fresh" (v1) cannot join [2, 3]
    areal = SampleBuffer(BufferConfig(mode="areal", alpha=1, group_size=1, capacity=4))
    await areal.put(group("x", 0, size=1))
    assert await areal.retire_before_next(5) == 0 and areal.buffered == 1  # AReaL never evicts for staleness


class SecondMemberBlocks(Blocking):
    """Only the trajectory ending in -1 waits at its second turn; its sibling finishes."""

    async def generate(self, tid, prompt, sampling=None, task="default"):
        if not tid.endswith("-1"):
            return await ScriptedPolicy.generate(self, tid, prompt, sampling, task)
        return await super().generate(tid, prompt, sampling, task)


async def test_a_group_holding_a_member_no_batch_can_take_stops_without_replacements(tokenizer):
    buf = SampleBuffer(BufferConfig(mode="async", alpha=1, group_size=2, capacity=4))
    policy = SecondMemberBlocks(tokenizer)  # weights at version 0: both members start at version 0
    manager = make_manager(policy, tokenizer, gate=buf)
    scheduler = RolloutScheduler([TaskSpec("c", "usertest/Countdown-v0")], manager,
                                 SchedulerConfig(group_size=2, max_concurrency=4), buffer=buf)
    producer = asyncio.create_task(scheduler.run(max_groups=1))
    await policy.at_second_turn.wait()  # g0-1 mid-flight; g0-0 runs to its end
    async with asyncio.timeout(10):
        while scheduler.counters["launched"] < 2 or "g0-0" in buf._inflight:
            await asyncio.sleep(0.01)
    assert await buf.retire_before_next(2) == 1  # g0-1 aborted: nothing begun at version 0 joins [1, 2]
    async with asyncio.timeout(10):
        await producer
    # the finished g0-0 began at version 0 too: the group stops at once instead of replacing g0-1 with a
    # trajectory at the current version and completing only to be evicted on arrival
    assert scheduler.counters["groups_stale"] == 1 and scheduler.counters["replaced"] == 0
    assert scheduler.counters["groups_failed"] == 0 and scheduler._failed_in_a_row == 0
    assert buf.counters["accepted"] == 0 and buf.outstanding_groups == 0 and buf.accounting_ok()
    assert manager.pool.live == 0 and buf.inflight == 0
    assert buf.can_join(1) and not buf.can_join(0)


async def test_areal_start_bound_keeps_rollout_at_most_alpha_batches_ahead():
    buf = SampleBuffer(BufferConfig(mode="areal", alpha=1, group_size=1, capacity=8, max_outstanding_groups=4))
    for _ in range(4):
        await buf.admit_group()
    fifth = asyncio.create_task(buf.admit_group())
    await asyncio.sleep(0.01)
    assert not fifth.done() and buf.outstanding_groups == 4
    await buf.discard_group()  # a failed group no longer counts
    await asyncio.wait_for(fifth, 1)
    sixth = asyncio.create_task(buf.admit_group())
    for gid in "abcd":
        await buf.put(group(gid, 0, size=1))
    await asyncio.sleep(0.01)
    assert not sixth.done()
    await buf.get_batch(2)  # taken to train: they count until the train step is done
    await asyncio.sleep(0.01)
    assert not sixth.done() and buf.outstanding_groups == 4
    await buf.batch_trained()  # trained: room for two more starts
    await asyncio.wait_for(sixth, 1)
    assert buf.outstanding_groups == 3


@pytest.mark.parametrize("mode", ["async", "areal"])
async def test_per_turn_batches_take_the_groups_begun_longest_ago_first(mode):
    buf = SampleBuffer(BufferConfig(mode=mode, alpha=1, group_size=1, capacity=8), version=1)
    for gid, start in (("short", 1), ("long", 0), ("short2", 1)):  # the long group, begun first, finished second
        await buf.put(group(gid, start, size=1))
    batch = await buf.get_batch(1)
    # the window moves on at the next version: the group begun at 0 leaves it, so per-turn batches take it now
    assert batch[0].group_id == ("long" if mode == "async" else "short")
    await buf.set_version(2)  # taken first-come, "long" would be evicted here, its generation wasted
    assert sum(buf.evicted.values()) == 0 and buf.buffered == 2


async def test_an_evicted_groups_instance_is_dealt_again_by_the_scheduler_that_fills_the_buffer(tokenizer):
    # the per-turn bound evicts a buffered group that left the window: its env seed and its dataset row come again
    buf = SampleBuffer(BufferConfig(mode="async", alpha=1, group_size=2, capacity=8))
    tasks = [TaskSpec("env", "usertest/Countdown-v0"), TaskSpec("data", "usertest/Countdown-v0", rows=4)]
    scheduler = RolloutScheduler(tasks, make_manager(next_policy(tokenizer), tokenizer),
                                 SchedulerConfig(group_size=2), buffer=buf)
    row = scheduler.row_orders["data"].next()
    for task, seed in (("env", 12345), ("data", row)):
        await buf.put([Trajectory(f"{task}-{i}", task, task, start_version=0, status="done", info={"seed": seed})
                       for i in range(2)])
    await buf.set_version(3)
    assert buf.evicted["stale"] == 4 and buf.buffered == 0
    assert scheduler.seeds_again["env"] == [12345] and scheduler.row_orders["data"].again == [(row, 0)]
