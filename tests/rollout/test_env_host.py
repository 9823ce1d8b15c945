"""EnvHost containment: raising, hanging and missing envs come back as errors; the host stays up; the env protocol."""
import asyncio

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401  (registers the rollart/* envs)

from rollart.rollout.env_client import EnvFailure, EnvPool
from rollart.rollout.env_host import EnvHost, EnvHostConfig, to_plain
from rollart.rollout.env_protocol import EnvDefaults, env_defaults
from rollart.messages import CloseEnv, CloseIdleEnvs, CreateEnv, GetStats, PrewarmEnvs, ResetEnv, StepEnv


async def test_reset_step_close_and_plain_info():
    host = EnvHost()
    r = await host.create(CreateEnv("rollart/FrozenLake-v0"))
    assert r["ok"] and r["system_prompt"].startswith("Move to G") and r["max_new_tokens"] == 4
    reset = await host.reset(ResetEnv(r["key"], 0))
    assert reset["observation"].startswith("PFFF")
    step = await host.step(StepEnv(r["key"], "D"))
    assert step["ok"] and step["reward"] == 0.0 and step["info"]["position"] == [1, 0]
    assert await host.close(CloseEnv(r["key"])) is True and await host.close(CloseEnv(r["key"])) is False
    assert host.stats(GetStats())["live_envs"] == 0
    assert to_plain({"a": np.int64(3), "b": (np.float32(0.5), np.array([1, 2])), 4: object}) == \
        {"a": 3, "b": [0.5, [1, 2]], "4": str(object)}


async def test_raising_env_is_dropped_and_reported():
    host = EnvHost()
    r = await host.create(CreateEnv("usertest/Countdown-v0", {"crash_at": 2}))
    await host.reset(ResetEnv(r["key"]))
    assert (await host.step(StepEnv(r["key"], "next")))["ok"]
    bad = await host.step(StepEnv(r["key"], "next"))
    assert not bad["ok"] and "RuntimeError: user env exploded" in bad["error"]
    again = await host.step(StepEnv(r["key"], "next"))
    assert not again["ok"] and "no env" in again["error"]
    assert host.stats(GetStats())["failed"] == 1 and host.stats(GetStats())["live_envs"] == 0


async def test_hanging_env_times_out_without_blocking_other_envs():
    host = EnvHost(EnvHostConfig(step_timeout_s=0.3))
    hung = await host.create(CreateEnv("rollart/GuessNumber-v0", {}, {"hang_prob": 1.0, "hang_seconds": 60}))
    fine = await host.create(CreateEnv("rollart/GuessNumber-v0"))
    await host.reset(ResetEnv(hung["key"], 1))
    await host.reset(ResetEnv(fine["key"], 1))
    hang_call = asyncio.create_task(host.step(StepEnv(hung["key"], "50")))
    steps = [await host.step(StepEnv(fine["key"], str(g))) for g in (10, 20, 30)]  # served while the other hangs
    assert all(s["ok"] for s in steps) and not hang_call.done()
    result = await hang_call
    assert not result["ok"] and "timed out after 0.3s" in result["error"]
    assert host.stats(GetStats())["timeouts"] == 1 and hung["key"] not in host.envs


async def test_unknown_env_id_and_full_host_are_clear_errors():
    host = EnvHost(EnvHostConfig(max_envs=1))
    bad = await host.create(CreateEnv("rollart/NoSuchEnv-v0"))
    assert not bad["ok"] and "NoSuchEnv" in bad["error"]
    assert (await host.create(CreateEnv("rollart/SortNumbers-v0")))["ok"]
    full = await host.create(CreateEnv("rollart/SortNumbers-v0"))
    assert not full["ok"] and "max_envs" in full["error"]


async def test_pool_spreads_envs_and_turns_errors_into_env_failure():
    pool = EnvPool([EnvHost(), EnvHost()])
    sessions = [await pool.open("rollart/SortNumbers-v0") for _ in range(4)]
    assert pool.open_count == [2, 2] and pool.live == 4
    obs, _ = await sessions[0].reset(seed=3)
    assert obs.startswith("Sort:")
    for s in sessions:
        await pool.release(s)
        await pool.release(s)  # idempotent
    assert pool.live == 0 and pool.counters["released"] == 4
    with pytest.raises(EnvFailure, match="cannot create"):
        await pool.open("rollart/Nope-v0")
    failing = await pool.open("rollart/SortNumbers-v0", faults={"fail_prob": 1.0})
    await failing.reset(seed=0)
    with pytest.raises(EnvFailure, match="InjectedEnvError"):
        await failing.step("1 2 3")


async def test_dead_host_becomes_env_failure():
    class DeadHandle:
        name = "envhost-0"

        async def send(self, message, timeout=None):
            raise ConnectionError("actor process exited")

    pool = EnvPool([DeadHandle(), EnvHost()])
    session = await pool.open("rollart/SortNumbers-v0")  # host0 is down: host1 serves it
    assert session.host_name == "host1"
    pool2 = EnvPool([DeadHandle()])
    with pytest.raises(EnvFailure, match="actor process exited"):
        await pool2.open("rollart/SortNumbers-v0")


async def test_reuse_keeps_healthy_envs_per_kind_and_never_a_failed_one():
    host = EnvHost(EnvHostConfig(reuse_envs=True, max_idle_envs=2))
    assert await host.prewarm(PrewarmEnvs("rollart/GuessNumber-v0", {"high": 10}, None, 2)) == 2
    assert host.stats(GetStats())["idle_envs"] == 2 and host.stats(GetStats())["created"] == 2
    a = await host.create(CreateEnv("rollart/GuessNumber-v0", {"high": 10}))
    other = await host.create(CreateEnv("rollart/GuessNumber-v0", {"high": 20}))  # another kind: made fresh
    assert host.stats(GetStats())["reused"] == 1 and host.stats(GetStats())["created"] == 3
    obs = (await host.reset(ResetEnv(a["key"], 1)))["observation"]
    assert "1 to 10" in obs  # a reused env starts its episode with reset() as usual
    bad = await host.create(CreateEnv("rollart/GuessNumber-v0", {"high": 10}, {"fail_prob": 1.0}))
    await host.reset(ResetEnv(bad["key"], 1))
    assert not (await host.step(StepEnv(bad["key"], "5")))["ok"]  # failed: dropped, not kept
    for r in (a, other, bad):
        await host.close(CloseEnv(r["key"]))
    stats = host.stats(GetStats())
    assert stats["idle_envs"] == 2 and stats["live_envs"] == 0  # max_idle_envs=2: the third was closed
    assert await host.close_idle(CloseIdleEnvs()) == 2 and host.stats(GetStats())["idle_envs"] == 0
    with pytest.raises(ValueError, match="reuse_envs"):
        await EnvHost().prewarm("rollart/GuessNumber-v0")


def test_gc_freeze_moves_the_objects_alive_at_host_start_out_of_the_collector():
    import subprocess
    import sys

    code = ("import gc; from rollart.rollout.env_host import EnvHost, EnvHostConfig; "
            "before = gc.get_freeze_count(); EnvHost(EnvHostConfig(gc_freeze={})); "
            "print(before, gc.get_freeze_count())")
    for flag, frozen in ((False, False), (True, True)):  # a subprocess: freezing is process-wide
        out = subprocess.run([sys.executable, "-c", code.format(flag)], capture_output=True, text=True,
                             timeout=60, check=True).stdout.split()
        assert int(out[0]) == 0 and (int(out[1]) > 1000) == frozen, out


class _Plain(gym.Env):
    observation_space = action_space = gym.spaces.Text(8)

    def reset(self, *, seed=None, options=None):
        return "obs", {}


class _Declared(EnvDefaults, _Plain):
    system_prompt = "Be brief."
    max_new_tokens = 7


class _DuckTyped(_Plain):
    system_prompt = None
    max_new_tokens = np.int64(5)


class _BadBudget(EnvDefaults, _Plain):
    max_new_tokens = "lots"


def test_env_defaults_read_the_declared_protocol_through_wrappers():
    assert env_defaults(_Plain()) == ("", 0)
    assert env_defaults(gym.wrappers.OrderEnforcing(_Declared())) == ("Be brief.", 7)
    assert env_defaults(_DuckTyped()) == ("", 5)
    with pytest.raises(TypeError, match="_BadBudget.max_new_tokens must be an int"):
        env_defaults(_BadBudget())


async def test_an_env_with_a_bad_default_is_refused_and_closed():
    gym.register(id="usertest/BadBudget-v0", entry_point=_BadBudget, disable_env_checker=True)
    host = EnvHost()
    r = await host.create(CreateEnv("usertest/BadBudget-v0"))
    assert not r["ok"] and "max_new_tokens must be an int" in r["error"]
    assert host.stats(GetStats())["live_envs"] == 0 and host.stats(GetStats())["failed"] == 1
