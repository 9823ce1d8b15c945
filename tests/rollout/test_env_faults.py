"""The fault/latency wrapper: Gaussian delays clipped at 0, heavy-tailed stragglers, failures, hangs."""
import time

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401
from rollart.rollout.env_faults import FaultConfig, InjectedEnvError, InjectFaults


def test_delay_distribution_and_accounting():
    env = InjectFaults(gym.make("rollart/GuessNumber-v0"), mean=0.01, std=0.02, fault_seed=0)
    delays = np.array([env.sample_delay() for _ in range(4000)])
    assert delays.min() == 0.0 and (delays == 0).mean() > 0.2  # N(10ms, 20ms) clipped at 0
    env.reset(seed=0)
    start = time.perf_counter()
    *_, info = env.step("50")
    *_, info = env.step("25")
    assert info["injected_delay_total"] == pytest.approx(env.delay_total)
    assert time.perf_counter() - start >= env.delay_total


def test_stragglers_are_heavy_tailed_and_seeded():
    cfg = FaultConfig(mean=1.0, std=0.0, straggler_prob=0.1, straggler_scale=5.0, straggler_alpha=2.0,
                      fault_seed=3)
    a = [InjectFaults(gym.make("rollart/SortNumbers-v0"), cfg).sample_delay() for _ in range(1)]
    env = InjectFaults(gym.make("rollart/SortNumbers-v0"), cfg)
    delays = np.array([env.sample_delay() for _ in range(5000)])
    assert 0.07 < (delays > 1.0).mean() < 0.13 and delays[delays > 1.0].min() >= 5.0
    assert delays.max() > 20.0
    assert a[0] == InjectFaults(gym.make("rollart/SortNumbers-v0"), cfg).sample_delay()


def test_failures_and_hangs():
    env = InjectFaults(gym.make("rollart/SortNumbers-v0"), fail_prob=1.0)
    env.reset(seed=0)  # on_reset=False: reset is untouched
    with pytest.raises(InjectedEnvError, match="injected failure in step"):
        env.step("1 2 3")
    env = InjectFaults(gym.make("rollart/SortNumbers-v0"), hang_prob=1.0, hang_seconds=0.2, on_reset=True)
    start = time.perf_counter()
    env.reset(seed=0)
    assert time.perf_counter() - start >= 0.2
    with pytest.raises(ValueError, match="fail_prob"):
        FaultConfig(fail_prob=1.5)
