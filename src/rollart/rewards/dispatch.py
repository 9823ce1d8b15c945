"""Reward dispatch: score each trajectory the moment it finishes (RollArt §6.1).

A reward function is any ``async fn(trajectory) -> float``: the env's own return (default), a rule
from :mod:`rollart.rewards.rules`, or a client of the serverless reward endpoint. Calls run
concurrently (up to ``max_concurrency``) inside each trajectory's task, so scoring overlaps with
the rollouts still in flight; an error or timeout drops that one trajectory (status "failed", the reason
logged and counted by kind in ``dropped``), never the batch or the run.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any, Awaitable, Callable

from rollart.rewards.client import RewardCallError
from rollart.types import Trajectory

log = logging.getLogger("rollart.rollout")

RewardFn = Callable[[Trajectory], Awaitable[float]]


async def env_return_reward(traj: Trajectory) -> float:
    """The sum of the env's step rewards (rule rewards computed inside the env)."""
    return float(traj.info.get("env_return", 0.0))


def text_rule_reward(rule: Callable[[str, str], float], tokenizer, reference_key: str = "answer") -> RewardFn:
    """Score the model's last turn with ``rule(text, reference)``; the reference is read from the
    env's final info (``info[reference_key]``)."""

    async def score(traj: Trajectory) -> float:
        return float(rule(last_answer(traj, tokenizer), reference(traj, reference_key)))

    return score


def last_answer(traj: Trajectory, tokenizer) -> str:
    """The text of the model's last turn (its last run of loss-masked tokens)."""
    model_ids, last = [], []
    for tok, mask in zip(traj.token_ids, traj.loss_mask):
        if mask:
            last.append(tok)
        elif last:
            model_ids, last = last, []
    return tokenizer.decode(last or model_ids, skip_special_tokens=True)


def reference(traj: Trajectory, key: str) -> str:
    """The reference answer the env put in its final info under ``key`` ("" if none)."""
    return str(traj.info.get("env", {}).get(key, ""))


def endpoint_reward(call: Callable[..., Awaitable[Any]], function: str, tokenizer, reference_key: str = "answer",
                    tasks: tuple[str, ...] = ()) -> RewardFn:
    """Score through a reward endpoint: ``await call(function, text, reference)`` (a
    :class:`rollart.rewards.client.RewardClient`'s ``call``, with its retries, or the same routed through the
    action scheduler). Tasks outside ``tasks`` (when given) keep the env's return."""

    async def score(traj: Trajectory) -> float:
        if tasks and traj.task not in tasks:
            return await env_return_reward(traj)
        result = await call(function, last_answer(traj, tokenizer), reference(traj, reference_key))
        if isinstance(result, bool) or not isinstance(result, (int, float)):
            raise TypeError(f"reward function {function!r} returned {result!r}, not a number")
        return float(result)

    return score


def drop_kind(error: BaseException) -> str:
    """A short, tag-safe name of why a reward failed (the tensorboard counter it goes to)."""
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, RewardCallError):
        return f"endpoint_http_{error.status}" if error.status is not None else "endpoint_unreachable"
    return type(error).__name__


class RewardDispatcher:
    """Runs a reward fn per finished trajectory with a timeout and a concurrency cap."""

    def __init__(self, fn: RewardFn | None = None, timeout_s: float = 60.0, max_concurrency: int = 256):
        if timeout_s <= 0 or max_concurrency < 1:
            raise ValueError("timeout_s must be > 0 and max_concurrency >= 1")
        self.fn = fn or env_return_reward
        self.timeout_s = timeout_s
        self._slots = asyncio.Semaphore(max_concurrency)
        self.counters = {"scored": 0, "failed": 0}
        self.dropped: Counter = Counter()
        """Trajectories dropped because their reward failed, by :func:`drop_kind` (sums to counters["failed"])."""

    async def score(self, traj: Trajectory) -> Trajectory:
        """Set ``traj.reward`` (status stays 'done'), or mark it failed with the reason."""
        started = time.perf_counter()
        try:
            async with self._slots:
                async with asyncio.timeout(self.timeout_s):
                    traj.reward = float(await self.fn(traj))
            self.counters["scored"] += 1
        except TimeoutError as e:
            self._drop(traj, e, f"reward: no score within {self.timeout_s:g} s (reward.timeout_s)")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one bad reward call fails one trajectory
            self._drop(traj, e, f"reward: {type(e).__name__}: {e}")
        traj.timings["reward"] = time.perf_counter() - started
        return traj

    def _drop(self, traj: Trajectory, error: BaseException, reason: str) -> None:
        traj.status, traj.reason = "failed", reason
        self.counters["failed"] += 1
        self.dropped[drop_kind(error)] += 1
        log.warning("trajectory %s dropped: %s", traj.trajectory_id, reason)

    def metrics(self) -> dict[str, float]:
        """Cumulative counts for tensorboard: rollout/scoring/scored, .../dropped and .../dropped/<kind>."""
        out = {"rollout/scoring/scored": float(self.counters["scored"]),
               "rollout/scoring/dropped": float(self.counters["failed"])}
        out.update({f"rollout/scoring/dropped/{kind}": float(n) for kind, n in self.dropped.items()})
        return out
