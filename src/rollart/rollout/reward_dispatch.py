"""Reward dispatch: score each trajectory the moment it finishes (RollArt §6.1).

A reward function is any ``async fn(trajectory) -> float``: the env's own return (default), a rule
from :mod:`rollart.rewards.rules`, or a client of the serverless reward endpoint. Calls run
concurrently (up to ``max_concurrency``) inside each trajectory's task, so scoring overlaps with
the rollouts still in flight; an error or timeout fails that one trajectory, never the batch.
"""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from rollart.types import Trajectory

RewardFn = Callable[[Trajectory], Awaitable[float]]


async def env_return_reward(traj: Trajectory) -> float:
    """The sum of the env's step rewards (rule rewards computed inside the env)."""
    return float(traj.info.get("env_return", 0.0))


def text_rule_reward(rule: Callable[[str, str], float], tokenizer, reference_key: str = "answer") -> RewardFn:
    """Score the model's last turn with ``rule(text, reference)``; the reference is read from the
    env's final info (``info[reference_key]``)."""

    async def score(traj: Trajectory) -> float:
        model_ids, last = [], []
        for tok, mask in zip(traj.token_ids, traj.loss_mask):
            if mask:
                last.append(tok)
            elif last:
                model_ids, last = last, []
        text = tokenizer.decode(last or model_ids, skip_special_tokens=True)
        return float(rule(text, str(traj.info.get("env", {}).get(reference_key, ""))))

    return score


class RewardDispatcher:
    """Runs a reward fn per finished trajectory with a timeout and a concurrency cap."""

    def __init__(self, fn: RewardFn | None = None, timeout_s: float = 60.0, max_concurrency: int = 256):
        if timeout_s <= 0 or max_concurrency < 1:
            raise ValueError("timeout_s must be > 0 and max_concurrency >= 1")
        self.fn = fn or env_return_reward
        self.timeout_s = timeout_s
        self._slots = asyncio.Semaphore(max_concurrency)
        self.counters = {"scored": 0, "failed": 0}

    async def score(self, traj: Trajectory) -> Trajectory:
        """Set ``traj.reward`` (status stays 'done'), or mark it failed with the reason."""
        started = time.perf_counter()
        try:
            async with self._slots:
                async with asyncio.timeout(self.timeout_s):
                    traj.reward = float(await self.fn(traj))
            self.counters["scored"] += 1
        except TimeoutError:
            traj.status, traj.reason = "failed", f"reward: timed out after {self.timeout_s:g}s"
            self.counters["failed"] += 1
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one bad reward call fails one trajectory
            traj.status, traj.reason = "failed", f"reward: {type(e).__name__}: {e}"
            self.counters["failed"] += 1
        traj.timings["reward"] = time.perf_counter() - started
        return traj
