"""Reward dispatch: rule rewards from the model's last turn, pluggable async reward fns, failures
and timeouts fail one trajectory only; scoring runs as each trajectory finishes."""
import asyncio

import pytest

import envs  # noqa: F401  (registers the rollart/* envs)
from rollart.rewards.dispatch import RewardDispatcher, text_rule_reward
from rollart.rewards.rules import math_reward
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.rollout.scripted import ByteTokenizer, ScriptedPolicy
from tests.rollout.rollout_helpers import make_manager


@pytest.fixture
def tokenizer():
    return ByteTokenizer()


def math_answers(right: bool):
    def choose(tid, obs):
        # the scripted "model" reads the answer back from the env's question via a calculator call
        if obs.startswith("Result: "):
            value = int(obs.split(": ")[1])
            return f"\\boxed{{{value if right else value + 1}}}"
        expr = obs.split("What is ", 1)[-1].rstrip("?")
        return f"<calc>{expr}</calc>" if "What is" in obs else "\\boxed{0}"
    return choose


async def test_rule_reward_reads_the_last_model_turn(tokenizer):
    for right in (True, False):
        manager = make_manager(ScriptedPolicy(tokenizer, math_answers(right)), tokenizer)
        rewards = RewardDispatcher(text_rule_reward(math_reward, tokenizer, "answer"))
        task = TaskSpec("math", "rollart/MathTool-v0")
        sched = RolloutScheduler([task], manager, SchedulerConfig(group_size=2, seed=1), rewards=rewards)
        groups = await sched.collect_batch(3)
        arithmetic = [t for g in groups for t in g if t.num_turns == 2]
        assert arithmetic, "seeded tasks include expression problems"
        assert all(t.reward == (1.0 if right else 0.0) for t in arithmetic)
        assert all(t.reward == t.info["env_return"] for t in arithmetic)  # the env's own rule agrees


async def test_reward_fn_errors_and_timeouts_fail_only_their_trajectory(tokenizer):
    seen = []

    async def flaky(traj):
        seen.append(traj.trajectory_id)
        if traj.trajectory_id.endswith("-0"):
            raise ConnectionError("reward endpoint down")
        if traj.trajectory_id.endswith("-1"):
            await asyncio.sleep(30)
        return 0.5

    manager = make_manager(ScriptedPolicy(tokenizer, lambda t, o: "next"), tokenizer)
    rewards = RewardDispatcher(flaky, timeout_s=0.2)
    sched = RolloutScheduler([TaskSpec("c", "usertest/Countdown-v0")], manager,
                             SchedulerConfig(group_size=2, max_replacements=4), rewards=rewards)
    async with asyncio.timeout(20):
        [group] = await sched.collect_batch(1)
    assert all(t.reward == 0.5 for t in group)
    assert rewards.counters["failed"] == 2 and sched.counters["replaced"] == 2
    assert any("reward endpoint down" in r for r in sched.reasons)
    assert any("no score within N.N s (reward.timeout_s)" in r for r in sched.reasons)
