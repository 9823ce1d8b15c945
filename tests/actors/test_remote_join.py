"""Actors joining from "another host" with `python -m rollart.actors.serve --connect`, with and without CURVE keys."""
import asyncio
import os
import subprocess
import sys

import pytest

from rollart.actors import ActorDeadError, ActorSystem
from sample_actors import Echo

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))


def serve(endpoint: str, name: str, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, *sys.path]))
    return subprocess.Popen([sys.executable, "-m", "rollart.actors.serve", "--connect", endpoint,
                             "--cls", "sample_actors:Echo", "--name", name, "--args", '["remote"]',
                             "--kwargs", '{"scale": 5}', *extra], env=env)


def make_keys(outdir, client="client") -> None:
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "curve_keys.py"), str(outdir), "--client", client],
                   check=True, capture_output=True)


async def test_remote_actor_joins_and_is_watched_by_heartbeats():
    async with ActorSystem(heartbeat_interval=0.2, heartbeat_timeout=2.0) as system:
        proc = serve(system.endpoint, "joiner")
        try:
            h = await system.wait_for_actor("joiner", timeout=60)
            assert await h.add(1, 2) == 15 and (await h.info())["tag"] == "remote"
            assert await h.getpid() == proc.pid
            pending = asyncio.ensure_future(h.sleep(60))
            await asyncio.sleep(0.2)
            proc.kill()  # not our child: only missing heartbeats can reveal this
            with pytest.raises(ActorDeadError, match="no heartbeat"):
                await asyncio.wait_for(pending, 20)
            assert h.state == "dead"
        finally:
            proc.kill()
            proc.wait()


async def test_duplicate_name_join_is_refused():
    async with ActorSystem() as system:
        await system.spawn(Echo, name="taken", mode="inprocess")
        proc = serve(system.endpoint, "taken")
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, proc.wait, 60) == 0  # told to stop
        finally:
            proc.kill()
            proc.wait()


async def test_non_loopback_bind_requires_curve():
    with pytest.raises(ValueError, match="curve_keys.py"):
        await ActorSystem(bind="tcp://0.0.0.0:0").start()


async def test_curve_authenticated_join_spawn_and_rejection(tmp_path):
    keys, stranger = tmp_path / "keys", tmp_path / "stranger"
    make_keys(keys)
    make_keys(stranger)  # a valid keypair the coordinator never authorized
    (stranger / "server.key").write_bytes((keys / "server.key").read_bytes())
    async with ActorSystem(bind="tcp://0.0.0.0:0", curve_dir=str(keys)) as system:
        port = system.endpoint.rsplit(":", 1)[1]
        endpoint = f"tcp://127.0.0.1:{port}"
        local = await system.spawn(Echo, name="local-curve")  # spawned children get the keys too
        inproc = await system.spawn(Echo, name="inproc-curve", mode="inprocess")
        assert await local.add(1, 1) == 2 and await inproc.add(2, 2) == 4
        good = serve(endpoint, "trusted", "--curve-dir", str(keys))
        bad = serve(endpoint, "intruder", "--curve-dir", str(stranger), "--coordinator-timeout", "4")
        plain = serve(endpoint, "plaintext")
        try:
            h = await system.wait_for_actor("trusted", timeout=60)
            assert await h.add(2, 3) == 25
            with pytest.raises(asyncio.TimeoutError):
                await system.wait_for_actor("intruder", timeout=3)
            with pytest.raises(asyncio.TimeoutError):
                await system.wait_for_actor("plaintext", timeout=0.5)
            assert "intruder" not in system.actors and "plaintext" not in system.actors
            # a rejected actor does not linger: it gives up after its coordinator timeout
            assert await asyncio.get_running_loop().run_in_executor(None, bad.wait, 60) == 3
        finally:
            for p in (good, bad, plain):
                p.kill()
                p.wait()
