"""A gymnasium env that kills its own process once (env hosts restart; only its trajectory fails)."""
import os
from pathlib import Path

import gymnasium as gym

ENV_ID = "crash_envs/ExitOnce-v0"


class ExitOnceEnv(gym.Env):
    """Say the word shown. The first step taken by any instance (the ``marker`` file not yet there) calls
    os._exit: the process hosting the env dies mid-step, as a segfaulting or OOM-killed env would."""

    def __init__(self, marker: str = ""):
        self.marker = marker
        self.observation_space = gym.spaces.Text(32)
        self.action_space = gym.spaces.Text(32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "say: cat", {}

    def step(self, action):
        if self.marker and not Path(self.marker).exists():
            Path(self.marker).write_text(str(os.getpid()))
            os._exit(3)
        ok = "cat" in action
        return "say: cat", float(ok), True, False, {"success": ok}


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=ExitOnceEnv, max_episode_steps=2)
