"""Rewards of the fault runs. ``episode_reward`` is the function the serverless endpoint serves in the reward-fault
run (a FrozenLake episode's reward is its env return, so scores through the endpoint equal the quickstart's);
:class:`ScoreBook` scores trajectories — locally or through a :class:`rollart.rewards.client.RewardClient` — and
remembers every score by trajectory id, so that what was trained can be checked against what was scored."""
from __future__ import annotations

from typing import Any


def episode_reward(env_return: float) -> float:
    """Served by ``python -m rollart.rewards.serve --functions rollart.faults.rewards:episode_reward``."""
    return float(env_return)


class ScoreBook:
    """``await book(trajectory)`` -> its reward (the env return, or the endpoint's answer when ``client`` is set)."""

    def __init__(self, client: Any = None, function: str = "episode_reward"):
        self.client = client
        self.function = function
        self.scores: dict[str, float] = {}
        """Trajectory id -> the reward returned for it."""
        self.failures = 0
        """Calls that raised (after the client's retries): those trajectories fail with the reason."""

    async def __call__(self, traj: Any) -> float:
        env_return = float(traj.info.get("env_return", 0.0))
        if self.client is None:
            reward = env_return
        else:
            try:
                reward = float(await self.client.call(self.function, env_return))
            except Exception:
                self.failures += 1
                raise
        self.scores[traj.trajectory_id] = reward
        return reward
