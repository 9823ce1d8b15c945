"""EnvHostConfig.cpu_affinity: every thread of the host's process, env threads started later included, runs on the CPUs asked for."""
import json
import os
import subprocess
import sys

import pytest

from rollart.rollout.env_host import EnvHost, EnvHostConfig

# Runs in its own process: pinning is process-wide and never undone, so it must not touch pytest's.
_HOST_SCRIPT = """
import asyncio, json, os, sys, threading
from rollart.rollout.env_host import EnvHost, EnvHostConfig
from rollart.messages import CreateEnv, PrewarmEnvs, ResetEnv, StepEnv

async def main():
    host = EnvHost(EnvHostConfig(min_threads=2, max_threads=64, reuse_envs=True, cpu_affinity=json.loads(sys.argv[1])),
                   imports=["envs"])
    await host.prewarm(PrewarmEnvs("rollart/FrozenLake-v0", count=24))  # starts 22 more env threads after the host started
    keys = [(await host.create(CreateEnv("rollart/FrozenLake-v0")))["key"] for _ in range(24)]
    await asyncio.gather(*(host.reset(ResetEnv(k, seed=i)) for i, k in enumerate(keys)))
    steps = await asyncio.gather(*(host.step(StepEnv(k, "D")) for k in keys))
    tids = os.listdir("/proc/self/task")
    print(json.dumps({
        "steps_ok": sum(s["ok"] for s in steps),
        "env_threads": sum(t.name.startswith("env-") for t in threading.enumerate()),
        "os_threads": len(tids),
        "affinities": sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in tids}),
    }))

asyncio.run(main())
"""

needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="needs Linux CPU affinity and at least 2 usable CPUs to tell pinned from not")


def _run_host(cpu_affinity: list[int]) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", _HOST_SCRIPT, json.dumps(cpu_affinity)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_two_cpus
def test_pinned_host_runs_every_thread_on_the_chosen_cpu():
    cpu = max(os.sched_getaffinity(0))
    got = _run_host([cpu])
    assert got["steps_ok"] == 24
    assert got["env_threads"] >= 24 and got["os_threads"] > got["env_threads"]  # the loop's thread too
    assert got["affinities"] == [[cpu]]


@needs_two_cpus
def test_unpinned_host_leaves_affinity_alone():
    got = _run_host([])
    assert got["steps_ok"] == 24
    assert got["affinities"] == [sorted(os.sched_getaffinity(0))]


def test_cpu_affinity_is_validated_with_a_clear_error():
    assert EnvHostConfig(cpu_affinity=[0]).cpu_affinity == (0,)  # lists (msgpack, CLI) become tuples
    with pytest.raises(ValueError, match="cpu_affinity must be CPU numbers"):
        EnvHostConfig(cpu_affinity=(-1,))
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with pytest.raises(ValueError, match="cpu_affinity.*available"):
        EnvHost(EnvHostConfig(cpu_affinity=(100_000,)))
    if before is not None:
        assert os.sched_getaffinity(0) == before  # refused before anything was pinned
