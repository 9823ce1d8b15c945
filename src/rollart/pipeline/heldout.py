"""Held-out evaluation: tasks disjoint from training, played in the background during training.

**Disjointness** (``check_disjoint``, called before any process starts): a held-out task with the same env id
and env kwargs as a training task is the training distribution, not held out - an error. An env class may
also declare the finite set of task instances a set of kwargs can produce, as a classmethod
``task_instances(**env_kwargs) -> frozenset | None`` (FrozenLake: every (map, start cell) pair; None: not
finite, e.g. random maps); when both sides declare one, any instance they share is an error.

**Background** (``HeldOutEval``): every ``eval_every`` steps ``maybe_start`` starts the held-out episodes as
one asyncio task and returns at once. Their requests go through the same proxy and inference workers as
rollout, at whatever policy version those hold (the version at the start and the versions of the tokens
are logged), concurrently with rollout; nothing waits for them - not the trainer, not the sample buffer
(their EnvManager has no gate). When an evaluation is still running at the next trigger, that trigger is
skipped (``eval/skipped``), so evaluations never pile up. Results are logged as ``eval/...`` at the step
the evaluation started.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from typing import Any, Callable

from rollart.config import ConfigError
from rollart.loader import load
from rollart.rollout.env_manager import EnvManager, TaskSpec

log = logging.getLogger(__name__)

_ids = itertools.count()


def env_instances(task: TaskSpec) -> frozenset | None:
    """The task instances ``task`` can produce, if its env class declares them (``task_instances``)."""
    try:
        import gymnasium as gym
        entry = gym.spec(task.env_id).entry_point
    except Exception:  # noqa: BLE001 - not registered in this process (e.g. only on env hosts): undeclared
        return None
    if isinstance(entry, str):
        entry = load(entry, f"env {task.env_id} entry point")
    declare = getattr(entry, "task_instances", None)
    if declare is None:
        return None
    kwargs = {**getattr(gym.spec(task.env_id), "kwargs", {}), **task.env_kwargs}
    return declare(**kwargs)


def check_disjoint(train: list[TaskSpec], heldout: list[TaskSpec]) -> None:
    """ConfigError (one line) when a held-out task is a training task or shares a declared instance with one."""
    for h in heldout:
        mine = env_instances(h)
        for t in train:
            if h.env_id == t.env_id and h.env_kwargs == t.env_kwargs:
                raise ConfigError(f"held-out task {h.name!r} plays the training task {t.name!r} ({t.env_id} with the "
                                  "same env_kwargs): give it other maps, start cells or seeds than training samples")
            theirs = env_instances(t) if h.env_id == t.env_id else None
            shared = mine & theirs if mine is not None and theirs is not None else frozenset()
            if shared:
                raise ConfigError(f"held-out task {h.name!r} shares {len(shared)} of its {len(mine)} instances with "
                                  f"training task {t.name!r} (e.g. {sorted(shared, key=repr)[0]!r}): held-out "
                                  "instances must be ones training never samples")


class HeldOutEval:
    """Held-out episodes in the background of a run (see the module docstring)."""

    def __init__(self, manager: EnvManager, tasks: list[TaskSpec], episodes: int, every: int,
                 version: Callable[[], int], log_metrics: Callable[[dict, int], None], seed: int = 20_000) -> None:
        """``manager``: an EnvManager without gate over the run's proxy; ``version()``: the policy version the
        inference workers hold now; ``log_metrics(metrics, step)``: where ``eval/...`` scalars go."""
        self.manager, self.tasks, self.episodes, self.every = manager, tasks, episodes, every
        self.version, self.log_metrics, self.seed = version, log_metrics, seed
        self.running: asyncio.Task | None = None
        self.started = self.finished = self.skipped = 0
        self.results: list[tuple[int, dict]] = []
        """(step, metrics) of every finished evaluation."""

    def maybe_start(self, step: int) -> bool:
        """Start an evaluation at ``step`` if one is due; never waits. True when one started."""
        if not (self.tasks and self.episodes and self.every and step and step % self.every == 0):
            return False
        if self.running is not None and not self.running.done():
            self.skipped += 1
            return False
        self.started += 1
        self.running = asyncio.get_running_loop().create_task(self._run(step), name=f"heldout-eval-{step}")
        return True

    async def drain(self) -> None:
        """Wait for the evaluation in flight (end of run); its result is logged like the others."""
        if self.running is not None:
            await asyncio.gather(self.running, return_exceptions=True)

    async def cancel(self) -> None:
        if self.running is not None and not self.running.done():
            self.running.cancel()
            await asyncio.gather(self.running, return_exceptions=True)

    async def _run(self, step: int) -> dict:
        version = self.version()
        greedy = [dataclasses.replace(t, temperature=0.0, top_p=1.0) for t in self.tasks]
        runs = [(t.name, self.manager.run(t, f"heldout{next(_ids)}-{t.name}-{i}", group_id=f"heldout-{step}",
                                          seed=seed))
                for t in greedy for i, seed in enumerate(t.episode_seeds(self.episodes, self.seed))]
        try:
            trajs = await asyncio.gather(*(coro for _, coro in runs))
        except Exception as e:  # noqa: BLE001 - a failed evaluation is reported, never stops training
            log.warning("held-out evaluation at step %d failed: %s", step, e)
            return {}
        metrics = evaluation_metrics([(name, traj) for (name, _), traj in zip(runs, trajs)], version)
        metrics["eval/skipped"] = float(self.skipped)
        self.finished += 1
        self.results.append((step, metrics))
        self.log_metrics(metrics, step)
        return metrics


def _return(traj: Any) -> float:
    """The env's return (held-out episodes are not scored by the run's reward pipeline)."""
    return float(traj.info.get("env_return", traj.reward))


def evaluation_metrics(played: list[tuple[str, Any]], version: int) -> dict[str, float]:
    """``eval/`` scalars of finished held-out trajectories: success and mean env return per task and overall,
    episodes, the policy version at the start and the oldest / newest token version played."""
    out: dict[str, float] = {}
    by_task: dict[str, list] = {}
    for name, traj in played:
        by_task.setdefault(name, []).append(traj)
    for name, trajs in by_task.items():
        out[f"eval/success/{name}"] = sum(bool(t.success and t.status == "done") for t in trajs) / len(trajs)
        out[f"eval/reward_mean/{name}"] = sum(_return(t) for t in trajs) / len(trajs)
    trajs = [t for _, t in played]
    out["eval/success"] = sum(bool(t.success and t.status == "done") for t in trajs) / len(trajs)
    out["eval/reward_mean"] = sum(_return(t) for t in trajs) / len(trajs)
    out["eval/episodes"] = float(len(trajs))
    out["eval/policy_version"] = float(version)
    versions = [v for t in trajs for v in t.versions]
    if versions:
        out["eval/token_version_min"], out["eval/token_version_max"] = float(min(versions)), float(max(versions))
    return out
