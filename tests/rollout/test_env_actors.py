"""Env hosts as real actor processes: a batch runs across two hosts; an env that kills its host process
fails only its own trajectory and the pool moves new envs to the live host; an env opened while its only host
restarts waits for it."""
import asyncio

import pytest

from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_manager import EnvManager, TaskSpec
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig
from rollart.rollout.scripted import ByteTokenizer, ScriptedPolicy

actors = pytest.importorskip("rollart.actors")


@pytest.mark.timeout(120)
async def test_batch_over_process_env_hosts_survives_a_dying_env():
    tok = ByteTokenizer()
    async with actors.ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=2.0) as system:
        pool = await EnvPool.spawn(system, 2, {"step_timeout_s": 10}, imports=["envs"], grace_s=30)
        hosts = pool.host_objects
        pids = {h.pid for h in hosts}
        assert len(pids) == 2
        policy = ScriptedPolicy(tok, lambda t, o: "D", latency_s=0.001)
        manager = EnvManager(policy, tok, pool)
        sched = RolloutScheduler([TaskSpec("frozenlake", "rollart/FrozenLake-v0")], manager,
                                 SchedulerConfig(group_size=4))
        async with asyncio.timeout(60):
            groups = await sched.collect_batch(2)
        assert all(t.status == "done" and t.num_turns >= 1 for g in groups for t in g)
        assert pool.open_count == [0, 0] and pool.counters["opened"] == 8

        # an env whose first step calls os._exit: its host process dies mid-trajectory
        dying = TaskSpec("dies", "rollart/FrozenLake-v0", faults={"exit_prob": 1.0})
        healthy = TaskSpec("frozenlake", "rollart/FrozenLake-v0")
        async with asyncio.timeout(60):
            bad = await manager.run(dying, "t-dies", "g", 0)
        assert bad.status == "failed" and "env" in bad.reason and "host" in bad.reason
        dead = [h for h in hosts if not h.alive]
        assert len(dead) == 1
        async with asyncio.timeout(60):
            ok = await asyncio.gather(*(manager.run(healthy, f"t{i}", "g", 0) for i in range(4)))
        assert all(t.status == "done" for t in ok)  # new envs went to the live host
        assert pool.live == 0


@pytest.mark.timeout(120)
async def test_an_env_opened_while_its_host_restarts_waits_for_it():
    """kill -9 of the only host, then an open at once: it waits for the restarted process instead of failing (a
    send to a process not yet known dead fails at once; one to a restarting actor waits for it)."""
    import os
    import signal

    async with actors.ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=2.0) as system:
        pool = await EnvPool.spawn(system, 1, {"step_timeout_s": 10}, imports=["envs"], grace_s=30, restarts=1)
        host = pool.host_objects[0]
        before = host.pid
        os.kill(before, signal.SIGKILL)
        async with asyncio.timeout(60):
            session = await pool.open("rollart/FrozenLake-v0")
            obs, _ = await session.reset(seed=0)
        assert obs and host.pid != before and host.restarts == 1
        assert pool.counters["opened"] == 1 and pool.counters["open_failures"] == 0
        await pool.release(session)
