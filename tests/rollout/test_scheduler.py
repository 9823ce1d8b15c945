"""RolloutScheduler: redundancy cancels exactly the extras and releases their envs; failing or hanging
envs do not stall a batch."""
import asyncio

import pytest
from rollout_helpers import host_of, make_manager

from rollart.messages import GetStats
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.rollout.scripted import ScriptedPolicy


class GatedPolicy(ScriptedPolicy):
    """Trajectories whose id is in `slow` block in generate until released (stand-in for stragglers)."""

    def __init__(self, tokenizer, slow):
        super().__init__(tokenizer, lambda t, o: "next")
        self.slow = slow
        self.blocked = asyncio.Event()
        self.waiting = 0

    async def generate(self, tid, prompt, sampling=None, task="default"):
        if tid in self.slow:
            self.waiting += 1
            try:
                await asyncio.Event().wait()  # never set: only cancellation ends it
            except asyncio.CancelledError:
                self.counters["cancelled"] += 1
                raise
        return await super().generate(tid, prompt, sampling, task)


async def test_redundant_envs_cancel_exactly_the_extras_and_release_them(tokenizer):
    # groups g0..g2, 3 needed + 1 extra env each; g0-3, g1-3, g2-0 straggle; one extra group (g2).
    slow = {"g0-3", "g1-3", "g2-0"}
    policy = GatedPolicy(tokenizer, slow)
    manager = make_manager(policy, tokenizer)
    cfg = SchedulerConfig(group_size=3, extra_envs_per_group=1, extra_groups=1)
    scheduler = RolloutScheduler([TaskSpec("c", "usertest/Countdown-v0")], manager, cfg)
    async with asyncio.timeout(30):
        groups = await scheduler.collect_batch(2)
    ids = sorted(t.trajectory_id for g in groups for t in g)
    assert len(groups) == 2 and not slow & set(ids)
    # the stragglers' generations were cancelled (aborted), nothing else was
    assert policy.counters["cancelled"] == policy.waiting >= 2
    assert manager.pool.live == 0
    stats = host_of(manager).stats(GetStats())
    assert stats["live_envs"] == 0 and stats["created"] == stats["closed"]
    assert scheduler.counters["groups_complete"] >= 2


async def test_group_extras_are_cancelled_as_soon_as_the_group_is_complete(tokenizer):
    policy = GatedPolicy(tokenizer, {"g0-2"})
    manager = make_manager(policy, tokenizer)
    cfg = SchedulerConfig(group_size=2, extra_envs_per_group=1)
    scheduler = RolloutScheduler([TaskSpec("c", "usertest/Countdown-v0")], manager, cfg)
    async with asyncio.timeout(30):
        [group] = await scheduler.collect_batch(1)
    assert sorted(t.trajectory_id for t in group) == ["g0-0", "g0-1"]
    assert scheduler.counters["cancelled_extras"] == 1 and policy.counters["cancelled"] == 1
    assert scheduler.counters["launched"] == 3 and manager.pool.live == 0


@pytest.mark.timeout(60)
async def test_raising_and_hanging_envs_do_not_stall_the_batch(tokenizer):
    policy = ScriptedPolicy(tokenizer, lambda t, o: "next")
    manager = make_manager(policy, tokenizer, step_timeout_s=0.5)
    faults = {"fail_prob": 0.15, "hang_prob": 0.1, "hang_seconds": 120, "fault_seed": 1}
    tasks = [TaskSpec("faulty", "usertest/Countdown-v0", faults=faults)]
    cfg = SchedulerConfig(group_size=4, max_replacements=40, seed=3)
    scheduler = RolloutScheduler(tasks, manager, cfg)
    async with asyncio.timeout(45):  # a stalled batch would wait for the 120 s hangs
        groups = await scheduler.collect_batch(6)
    assert len(groups) == 6 and all(t.status == "done" for g in groups for t in g)
    assert scheduler.counters["failed"] > 0 and scheduler.counters["replaced"] > 0
    assert any("timed out" in r for r in scheduler.reasons) and any("InjectedEnvError" in r or "raised" in r
                                                                    for r in scheduler.reasons)
    assert manager.pool.live == 0


async def test_group_that_cannot_complete_is_replaced_by_another_group(tokenizer):
    manager = make_manager(ScriptedPolicy(tokenizer, lambda t, o: "next"), tokenizer)
    tasks = [TaskSpec("broken", "usertest/Countdown-v0", env_kwargs={"crash_at": 2}, weight=1.0),
             TaskSpec("fine", "usertest/Countdown-v0", weight=1.0)]
    scheduler = RolloutScheduler(tasks, manager, SchedulerConfig(group_size=2, max_replacements=1, seed=0))
    async with asyncio.timeout(30):
        groups = await scheduler.collect_batch(3)
    assert all(g[0].task == "fine" for g in groups)
    assert scheduler.counters["groups_failed"] >= 1
    # a seed whose env broke is not dealt again (it would break again)
    assert scheduler.seeds_again == {"broken": [], "fine": []} and not scheduler.counters["groups_dealt_again"]


def recording(scheduler):
    """The groups ``scheduler`` starts, in order."""
    drawn, new_group = [], scheduler._new_group

    def record():
        drawn.append(new_group())
        return drawn[-1]
    scheduler._new_group = record
    return drawn


async def test_a_cancelled_extra_groups_instance_is_dealt_again_before_new_ones(tokenizer):
    # g2 straggles and is the extra group cancelled; its reset seed (the env instance) starts the next batch
    policy = GatedPolicy(tokenizer, {"g2-0"})
    cfg = SchedulerConfig(group_size=2, extra_groups=1)
    scheduler = RolloutScheduler([TaskSpec("c", "usertest/Countdown-v0")], make_manager(policy, tokenizer), cfg)
    drawn = recording(scheduler)
    async with asyncio.timeout(30):
        first = await scheduler.collect_batch(2)
        second = await scheduler.collect_batch(1)
    assert sorted(g[0].group_id for g in first) == ["g0", "g1"]
    assert drawn[3].seed == drawn[2].seed and {t.info["seed"] for t in second[0]} == {drawn[2].seed}
    assert scheduler.counters["groups_dealt_again"] == 1
    # then a new instance, the second batch's extra, which waits to be dealt again in its turn
    assert drawn[4].seed not in {g.seed for g in drawn[:4]} and scheduler.seeds_again == {"c": [drawn[4].seed]}


async def test_unknown_env_id_and_hopeless_tasks_are_clear_errors(tokenizer):
    from rollart.rollout.buffer import BufferConfig, SampleBuffer
    from rollart.rollout.group_scheduler import RolloutError

    manager = make_manager(ScriptedPolicy(tokenizer, lambda t, o: "next"), tokenizer)
    with pytest.raises(ValueError, match="Countdown"):
        RolloutScheduler([TaskSpec("c", "usertest/Countdwn-v0")], manager)
    broken = [TaskSpec("broken", "usertest/Countdown-v0", env_kwargs={"crash_at": 3})]
    cfg = SchedulerConfig(group_size=2, max_replacements=1, max_failed_groups=3)
    with pytest.raises(RolloutError, match="user env exploded at counter 3"):  # the exact text, digits kept
        await RolloutScheduler(broken, manager, cfg).collect_batch(2)
    buf = SampleBuffer(BufferConfig(group_size=2, capacity=8))
    with pytest.raises(RolloutError, match="4 GRPO groups in a row"):
        async with asyncio.timeout(30):
            await RolloutScheduler(broken, manager, cfg, buffer=buf).run()
    assert manager.pool.live == 0


async def test_reseed_restarts_the_task_draws(tokenizer):
    """reseed(s) (a resumed run) draws the same task instances as a scheduler started with seed s."""
    tasks = [TaskSpec(f"c{i}", "usertest/Countdown-v0") for i in range(4)]

    async def drawn(scheduler):
        async with asyncio.timeout(30):
            groups = await scheduler.collect_batch(8)
        return sorted(g[0].task for g in groups)

    def scheduler(seed):
        manager = make_manager(ScriptedPolicy(tokenizer, lambda t, o: "next"), tokenizer)
        return RolloutScheduler(tasks, manager, SchedulerConfig(group_size=1, seed=seed))

    reseeded = scheduler(0)
    await drawn(reseeded)
    reseeded.reseed(5)
    assert await drawn(reseeded) == await drawn(scheduler(5))
