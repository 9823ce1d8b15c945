"""Greedy evaluation: each task played with temperature 0 through the same proxy, outside the buffer; and the
run's evaluations (every ``eval_every`` steps, logged and kept) and its stop-at-success rule."""
from __future__ import annotations

import asyncio
import dataclasses
import itertools

from rollart.monitor import MetricsLogger
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.run_state import Evaluation, RunState
from rollart.rollout.env_manager import EnvManager, TaskSpec

_eval_ids = itertools.count()


async def evaluate(manager: EnvManager, tasks: list[TaskSpec], episodes: int, seed: int) -> dict[str, float]:
    """Success rate per task (and their mean under ``"mean"``) over ``episodes`` greedy episodes each."""
    greedy = [dataclasses.replace(t, temperature=0.0, top_p=1.0) for t in tasks]
    runs = []
    for task in greedy:
        for i, episode_seed in enumerate(task.episode_seeds(episodes, seed)):
            tid = f"eval{next(_eval_ids)}-{task.name}-{i}"
            runs.append((task.name, manager.run(task, tid, group_id=tid, seed=episode_seed)))
    results = await asyncio.gather(*(coro for _, coro in runs))
    per_task: dict[str, list[float]] = {}
    for (name, _), traj in zip(runs, results):
        per_task.setdefault(name, []).append(float(traj.success and traj.status == "done"))
    success = {name: sum(v) / len(v) for name, v in per_task.items()}
    success["mean"] = sum(success.values()) / len(success)
    return success


class Evaluator:
    """The run's greedy evaluations of its eval tasks: every ``eval_every`` steps, recorded in the run state and
    logged as ``charts/eval_success/<task>``."""

    def __init__(self, cfg: PipelineConfig, state: RunState, manager: EnvManager, tasks: list[TaskSpec],
                 logger: MetricsLogger):
        self.cfg, self.state, self.manager, self.tasks, self.logger = cfg, state, manager, tasks, logger

    def due(self) -> bool:
        every = self.cfg.eval_every
        return bool(every and self.state.step and self.state.step % every == 0 and not self.state.evaluated_now())

    async def evaluate(self) -> dict[str, float]:
        """Evaluate the weights of the current step (recorded and logged)."""
        success = await evaluate(self.manager, self.tasks, self.cfg.eval_episodes, seed=10_000)
        self.state.evals.append(Evaluation(self.state.step, success))
        self.logger.log({f"charts/eval_success/{k}": v for k, v in success.items()}, self.state.step)
        self.logger.flush()
        return success

    def target_held(self) -> bool:
        """stop_at_success met on every task by each of the last ``stop_consecutive`` evaluations."""
        cfg = self.cfg
        recent = self.state.evals[-cfg.stop_consecutive:]
        if cfg.stop_at_success is None or len(recent) < cfg.stop_consecutive:
            return False
        return all(v >= cfg.stop_at_success for e in recent for k, v in e.success.items() if k != "mean")
