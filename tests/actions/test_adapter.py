"""Adapters: env-style sync/async calls and serverless reward calls run through the action scheduler."""
import asyncio
import threading

import gymnasium as gym
from aiohttp import web

from rollart.actions.adapter import call_action, serverless_reward_action
from rollart.actions.basic import CountPool
from rollart.actions.runtime import ActionScheduler
from rollart.rewards.client import RewardClient
from rollart.rewards.rules import math_reward
from rollart.rewards.serve import RewardEndpoint, ServeConfig


async def test_gym_env_steps_as_actions_run_off_the_event_loop():
    env = gym.make("FrozenLake-v1", is_slippery=False)
    env.reset(seed=0)
    sched = ActionScheduler({"cpu": CountPool("cpu", 1)})
    threads = set()

    def step(a):
        threads.add(threading.get_ident())
        return env.step(a)

    obs = [await sched.submit(call_action(step, a, cost={"cpu": 1}, kind="env_step")) for a in (2, 2, 1)]
    assert [o[0] for o in obs] == [1, 2, 6]
    assert threading.get_ident() not in threads  # ran in a worker thread, loop stayed free
    assert [r.kind for r in sched.records] == ["env_step"] * 3


async def test_serverless_reward_through_scheduler_with_concurrency_quota():
    endpoint = RewardEndpoint(ServeConfig(functions=("rollart.rewards.rules:math_reward",), port=0))
    runner = web.AppRunner(endpoint.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    quota = CountPool("reward_api", 2)
    sched = ActionScheduler({"reward_api": quota})
    try:
        async with RewardClient(url) as client:
            data = [(f"Answer: {i % 3}", "1") for i in range(8)]
            scores = await asyncio.gather(*(sched.submit(serverless_reward_action(client, "math_reward", t, r))
                                            for t, r in data))
        assert scores == [math_reward(t, r) for t, r in data]
        assert quota.peak <= 2 and quota.used == 0
    finally:
        await runner.cleanup()
