"""Greedy evaluation: each task played with temperature 0 through the same proxy, outside the buffer; and the
run's evaluations (every ``eval_every`` steps, logged and kept), mixed into ``Coordinator``."""
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


class Evaluations:
    """The run's evaluations: greedy ones of ``eval_tasks`` recorded in ``evals``, held-out ones logged."""

    async def _maybe_evaluate(self, rollout: asyncio.Task | None = None) -> None:
        every = self.cfg.eval_every
        if every and self.step and self.step % every == 0 and (not self.evals or self.evals[-1][0] != self.step):
            coro = self._evaluate()
            await (self._unless_failed(coro, rollout) if rollout is not None else coro)

    async def _evaluate(self) -> dict[str, float]:
        success = await evaluate(self.eval_manager, self.eval_tasks, self.cfg.eval_episodes, seed=10_000)
        self.evals.append((self.step, success))
        self.logger.log({f"charts/eval_success/{k}": v for k, v in success.items()}, self.step)
        self.logger.flush()
        return success

    def _log_eval(self, metrics: dict, step: int) -> None:
        if self.logger is not None:
            self.logger.log(metrics, step)
            self.logger.flush()
