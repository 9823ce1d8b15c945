"""rollart.sim.batched: the batched-interaction baseline plays a batch's trajectories in lockstep turns (no env
starts turn k+1 before every live one finished turn k), with redundant extras, and releases every env."""
import asyncio

import pytest

from rollart.messages import GetStats
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.rollout.scripted import ByteTokenizer, ScriptedPolicy
from rollart.sim.batched import BatchedInteraction, TurnBarrier
from tests.rollout.rollout_helpers import host_of, make_manager


@pytest.fixture
def tokenizer():
    return ByteTokenizer()


async def test_batched_interaction_steps_all_envs_together(tokenizer):
    order = []

    class Logging(ScriptedPolicy):
        async def generate(self, tid, prompt, sampling=None, task="default"):
            turn = tokenizer.decode(prompt).count("<|im_start|>assistant")
            order.append(turn)
            return await super().generate(tid, prompt, sampling, task)

    manager = make_manager(Logging(tokenizer, lambda t, o: "next", latency_s=0.001), tokenizer)
    tasks = [TaskSpec("short", "usertest/Countdown-v0", env_kwargs={"start": 2}),
             TaskSpec("long", "usertest/Countdown-v0", env_kwargs={"start": 4})]
    cfg = SchedulerConfig(group_size=2, seed=1)
    scheduler = RolloutScheduler(tasks, BatchedInteraction(manager), cfg)
    groups = await scheduler.collect_batch(4)
    assert len(groups) == 4
    assert order == sorted(order)  # no env starts turn k+1 before every live env finished turn k


async def test_turn_barrier_membership_changes():
    barrier = TurnBarrier()
    for _ in range(3):
        barrier.join()
    arrived = [asyncio.create_task(barrier.wait()) for _ in range(2)]
    await asyncio.sleep(0)
    assert not any(t.done() for t in arrived)
    barrier.leave()  # the third member finished: the other two go on
    await asyncio.gather(*arrived)
    waiter = asyncio.create_task(barrier.wait())
    other = asyncio.create_task(barrier.wait())
    await asyncio.sleep(0)
    await asyncio.gather(waiter, other)



async def test_batched_mode_with_redundant_extras_completes_and_releases_everything(tokenizer):
    class SlowFor(ScriptedPolicy):
        async def generate(self, tid, prompt, sampling=None, task="default"):
            if tid.endswith("-2"):  # a finite straggler: batched mode makes everyone wait for it
                await asyncio.sleep(0.05)
            return await super().generate(tid, prompt, sampling, task)

    manager = make_manager(SlowFor(tokenizer, lambda t, o: "next"), tokenizer)
    cfg = SchedulerConfig(group_size=2, extra_envs_per_group=1, extra_groups=1)
    scheduler = RolloutScheduler([TaskSpec("c", "usertest/Countdown-v0")], BatchedInteraction(manager), cfg)
    async with asyncio.timeout(30):
        groups = await scheduler.collect_batch(2)
    assert len(groups) == 2 and all(len(g) == 2 for g in groups)
    assert manager.pool.live == 0 and host_of(manager).stats(GetStats())["live_envs"] == 0
