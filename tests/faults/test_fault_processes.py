"""The fault suite's real-process tools: finding a run's actor processes in /proc and kill -9 of one (the
runtime restarts it), and the rogue peer's malformed frames on a live coordinator socket."""
import asyncio
import subprocess
import sys

from rollart.actors import ActorSystem, RestartPolicy
from rollart.faults.frames import malformed
from rollart.faults.procs import actor_processes, find_actor, kill9

import random


async def test_find_and_kill9_an_actor_process():
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as system:
        h = await system.spawn("fault_actors:Counter", name="victim", restart=RestartPolicy(max_restarts=1))
        assert await h.add(2) == 2
        proc = find_actor("Counter")
        assert proc is not None and proc.name == "victim" and proc.endpoint == system.endpoint
        assert proc.pid == h.pid and find_actor("NoSuchActor") is None
        kill9(proc)
        for _ in range(200):  # the runtime notices the exit and restarts it in place
            try:
                if await h.add(1) == 1:
                    break
            except Exception:  # noqa: BLE001 - dead or restarting meanwhile
                await asyncio.sleep(0.1)
        assert h.pid != proc.pid and [p.pid for p in actor_processes()] == [h.pid]


def test_malformed_frames_are_malformed():
    from rollart.actors import messages as m
    from rollart.actors.errors import WireError
    rng = random.Random(0)
    accepted = 0
    for _ in range(2000):
        frames = malformed(rng)
        try:
            msg = m.decode(frames)
        except WireError:
            continue
        # what decodes is a reply to a call the sender never received, or a message only a coordinator sends
        assert type(msg).__name__ in {"Result", "End", "Error", "Item", "Init", "Call", "Stop", "Pong", "Cancel"}
        accepted += 1
    assert accepted < 600


async def test_a_live_coordinator_survives_the_rogue_peer():
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=15.0) as system:
        h = await system.spawn("fault_actors:Counter", name="bystander", mode="inprocess")
        out = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "rollart.faults.frames", system.endpoint,
                                                       "--count", "2000", "--seed", "1"],
                                      capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.splitlines()[-1] == "done 2000"
        for _ in range(200):
            if system.rejected > 1000:
                break
            await asyncio.sleep(0.05)
        assert system.rejected > 1000
        assert await h.add(42) == 42
