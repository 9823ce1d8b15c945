"""Thin adapters that turn rollout-side calls (env tool calls, reward calls) into scheduled actions.

    pools = {"cpu": CountPool("cpu", 8), "reward_api": CountPool("reward_api", 16)}
    actions = ActionScheduler(pools)
    obs = await actions.submit(call_action(env.step, action_text, cost={"cpu": 1}, kind="tool"))
    score = await actions.submit(serverless_reward_action(client, "math_reward", text, ref))

A synchronous callable runs in a thread so the event loop (and every other trajectory) keeps going.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Optional

from rollart.actions.action import Action


def call_action(fn: Callable[..., Any], *args: Any, cost: Optional[dict[str, float]] = None,
                kind: str = "tool", trajectory: Any = None, t_ori: Optional[float] = None,
                **kwargs: Any) -> Action:
    """An action that runs ``fn(*args, **kwargs)`` (sync or async) once its ``cost`` is granted."""
    async def payload(grant: dict) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        result = await asyncio.to_thread(fn, *args, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    return Action(dict(cost or {}), kind=kind, trajectory=trajectory, t_ori=t_ori, payload=payload)


def serverless_reward_action(client: Any, function: str, *args: Any, quota: str = "reward_api",
                             trajectory: Any = None, **kwargs: Any) -> Action:
    """A reward call to the serverless endpoint, holding one unit of the ``quota`` pool while in flight
    (a concurrency limit that keeps a burst of finished trajectories from overrunning the endpoint)."""
    return call_action(client.call, function, *args, cost={quota: 1}, kind="reward", trajectory=trajectory,
                       **kwargs)
