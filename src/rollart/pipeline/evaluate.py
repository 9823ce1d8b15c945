"""Greedy evaluation: each task played with temperature 0 through the same proxy, outside the buffer."""
from __future__ import annotations

import asyncio
import dataclasses
import itertools

from rollart.rollout.env_manager import EnvManager, TaskSpec

_eval_ids = itertools.count()


async def evaluate(manager: EnvManager, tasks: list[TaskSpec], episodes: int, seed: int) -> dict[str, float]:
    """Success rate per task (and their mean under ``"mean"``) over ``episodes`` greedy episodes each."""
    greedy = [dataclasses.replace(t, temperature=0.0, top_p=1.0) for t in tasks]
    runs = []
    for task in greedy:
        for i in range(episodes):
            tid = f"eval{next(_eval_ids)}-{task.name}-{i}"
            runs.append((task.name, manager.run(task, tid, group_id=tid, seed=seed + i)))
    results = await asyncio.gather(*(coro for _, coro in runs))
    per_task: dict[str, list[float]] = {}
    for (name, _), traj in zip(runs, results):
        per_task.setdefault(name, []).append(float(traj.success and traj.status == "done"))
    success = {name: sum(v) / len(v) for name, v in per_task.items()}
    success["mean"] = sum(success.values()) / len(success)
    return success
