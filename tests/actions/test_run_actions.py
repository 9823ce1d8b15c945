"""rollart.actions in a run: env steps get real cores from the CPU pool and the processes they start are pinned
to them (env host -> thread grant -> sandbox preexec); reward calls go through the API-quota pool; decisions
are reported as metrics."""
import asyncio
import os
import subprocess
import sys

import gymnasium as gym
import pytest

from rollart.actions.basic import max_in_window
from rollart.actions.config import ActionsConfig
from rollart.cpus import granted_cores, on_cores, pin_preexec
from rollart.actions.run import RunActions
from rollart.config import ConfigError
from rollart.rollout.env_host import EnvHost
from rollart.sandbox.config import SandboxConfig
from rollart.sandbox.limits import make_preexec
from rollart.messages import CloseEnv, CreateEnv, ResetEnv, StepEnv

AFFINITY = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
CORES = sorted(os.sched_getaffinity(0))


class AffinityEnv(gym.Env):
    """Each step starts a process (as a sandbox command would) and observes the cores it ran on."""

    action_space = gym.spaces.Text(16)
    observation_space = gym.spaces.Text(64, min_length=0, charset="0123456789[], ")

    def reset(self, *, seed=None, options=None):
        return "", {}

    def step(self, action):
        out = subprocess.run(AFFINITY, capture_output=True, text=True, preexec_fn=pin_preexec(), check=True)
        return out.stdout.strip(), 0.0, True, False, {}


gym.register("test/Affinity-v0", entry_point=AffinityEnv)


def test_a_granted_core_set_pins_sandbox_processes_started_on_this_thread():
    assert granted_cores() is None and pin_preexec() is None
    with on_cores((CORES[-1],)):
        preexec = make_preexec(SandboxConfig(), None, [])
    assert granted_cores() is None
    out = subprocess.run(AFFINITY, capture_output=True, text=True, preexec_fn=preexec, check=True)
    assert out.stdout.strip() == str([CORES[-1]])


async def test_env_steps_run_on_the_cores_the_scheduler_grants():
    host = EnvHost()
    actions = RunActions(ActionsConfig(enabled=True, cores=tuple(CORES)))
    keys = []
    try:
        keys += [(await host.create(CreateEnv("test/Affinity-v0")))["key"] for _ in range(2 * len(CORES))]
        for key in keys:
            await host.reset(ResetEnv(key))

        async def step(key):
            async def on(cores):
                assert len(cores) == 1
                result = await host.step(StepEnv(key, "go", list(cores)))
                return cores, result["observation"]
            return await actions.env_step(on, trajectory=key)

        results = await asyncio.gather(*(step(k) for k in keys))
        for cores, seen in results:
            assert seen == str(list(cores))  # the child ran exactly on its grant
        records = actions.scheduler.records
        for r in records:  # never more steps at once than cores
            assert sum(o.start <= r.start < o.end for o in records) <= len(CORES)
        m = actions.metrics()
        assert m["system/actions/env_step/count"] == len(keys) and m["system/actions/env_step/units_mean"] == 1
        assert m["system/actions/env_step/queue_s_mean"] >= 0 and m["system/actions/evictions"] == 0
        assert "system/actions/env_step/count" not in actions.metrics()  # only decisions since the last report
    finally:
        await actions.close()
        for key in keys:
            await host.close(CloseEnv(key))


async def test_reward_calls_keep_to_the_api_quota():
    actions = RunActions(ActionsConfig(enabled=True, reward_calls_per_period=2, reward_period_s=0.3))
    calls = []

    async def call(x):
        calls.append(x)
        return x * 2

    try:
        assert await asyncio.gather(*(actions.reward_call(call, i) for i in range(5))) == [0, 2, 4, 6, 8]
        assert sorted(calls) == list(range(5))
        assert max_in_window(actions.pools["api:reward"].history, 0.3) <= 2
        assert actions.metrics()["system/actions/reward/count"] == 5
    finally:
        await actions.close()


def test_bad_actions_settings_name_the_setting():
    with pytest.raises(ConfigError, match="actions.step_cores"):
        ActionsConfig(enabled=True, cores=(0,), step_cores=2)
    with pytest.raises(ConfigError, match="reward_calls_per_period"):
        ActionsConfig(reward_calls_per_period=-1)


@pytest.mark.parametrize("speedup,expected", [((1.0, 1.8), 2), ((1.0, 0.9), 1)])
async def test_a_test_run_gets_the_cores_its_profiled_curve_pays_for(speedup, expected):
    if len(CORES) < 2:
        pytest.skip("needs 2 cores")
    actions = RunActions(ActionsConfig(enabled=True, cores=tuple(CORES[:2]), test_speedup=speedup))
    try:
        async def step(cores):
            return cores
        got = await actions.env_step(step, "t", kind="test_run", max_units=4)
        assert len(got) == expected
        assert len(await actions.env_step(step, "t", kind="sandbox_command", max_units=1)) == 1
        assert await actions.env_step(step, "t", kind="file_op", max_units=0) == ()  # holds no core
        assert actions.metrics()["system/actions/test_run/units_mean"] == expected
        assert actions.scheduler.cpu_seconds > 0  # the scheduler's own CPU time (Table 1's system overhead)
    finally:
        await actions.close()


def test_granted_cores_are_capped_by_a_cgroup_cpu_quota_where_writable():
    from rollart.cpus import cpu_limit, cpu_limit_line
    line = cpu_limit_line()
    assert line.startswith("actions: ")
    if not cpu_limit().mode:
        pytest.skip(line)
    show = [sys.executable, "-c", "print(open('/proc/self/cgroup').read())"]
    out = subprocess.run(show, capture_output=True, text=True, preexec_fn=pin_preexec((CORES[0],)), check=True)
    group = os.path.dirname(cpu_limit().procs_file((CORES[0],)))
    assert group.split("/sys/fs/cgroup/")[1].split("/", 1)[1] in out.stdout  # the child runs in the quota group
    quota = "cpu.max" if cpu_limit().mode == "v2" else "cpu.cfs_quota_us"
    assert open(os.path.join(group, quota)).read().split()[0] == "100000"
    # the group weighs one process per core it holds, the parent one per core of all its groups
    weight, one = ("cpu.weight", 100) if cpu_limit().mode == "v2" else ("cpu.shares", 1024)
    assert int(open(os.path.join(group, weight)).read()) == one
    both = os.path.dirname(cpu_limit().procs_file(tuple(CORES[:2])))
    assert int(open(os.path.join(both, weight)).read()) == one * len(CORES[:2])
    parent = int(open(os.path.join(os.path.dirname(group), weight)).read())
    assert min(10_000, one * len(CORES[:2])) <= parent <= min(10_000, one * len(CORES))
