"""Helpers for rollout tests (a module with its own name, so no other folder's conftest can shadow it):
a user-registered env, a scripted policy, an in-process env manager."""
import string

import gymnasium as gym

from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_host import EnvHost, EnvHostConfig
from rollart.rollout.env_manager import EnvManager
from rollart.rollout.scripted import ScriptedPolicy


class Countdown(gym.Env):
    """A user's own text env (not part of rollart): say 'next' until the counter reaches 0."""

    def __init__(self, start: int = 3, crash_at: int | None = None):
        self.start, self.crash_at = start, crash_at
        self.observation_space = gym.spaces.Text(64, charset=string.printable)
        self.action_space = gym.spaces.Text(64, charset=string.printable)
        self.left = start

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.left = self.start
        return f"counter {self.left}", {}

    def step(self, action):
        if self.crash_at is not None and self.left == self.crash_at:
            raise RuntimeError(f"user env exploded at counter {self.left}")
        if action.strip() != "next":
            return f"counter {self.left} (say next)", -0.1, False, False, {"success": False}
        self.left -= 1
        done = self.left == 0
        return f"counter {self.left}", 1.0 if done else 0.0, done, False, {"success": done}


if "usertest/Countdown-v0" not in gym.registry:
    gym.register(id="usertest/Countdown-v0", entry_point=Countdown, max_episode_steps=10)


def next_policy(tokenizer, latency_s=0.0, **kw):
    return ScriptedPolicy(tokenizer, lambda tid, obs: "next", latency_s=latency_s, **kw)


def make_manager(policy, tokenizer, gate=None, step_timeout_s=30.0):
    pool = EnvPool([EnvHost(EnvHostConfig(step_timeout_s=step_timeout_s, reset_timeout_s=step_timeout_s))])
    return EnvManager(policy, tokenizer, pool, gate)


def host_of(manager):
    """The in-process EnvHost behind a manager's pool (for release checks)."""
    return manager.pool.host_objects[0]
