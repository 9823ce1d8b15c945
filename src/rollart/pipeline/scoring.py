"""Scoring: what a run's trajectories are scored by, started and stopped with the run.

From ``cfg.reward`` (:class:`rollart.rewards.config.RewardConfig`): the env's return (default), a reward
endpoint at ``reward.endpoint``, or one started for the run (``reward.serverless=true``: a real
``python -m rollart.rewards.serve`` process, stopped at the end; with ``cluster.backend=ray`` Ray places it
on a node of ``reward.hw_class`` or any CPU node and restarts it elsewhere when that node is lost:
:class:`rollart.rewards.ray_endpoint.RayEndpoint`). The endpoint is called through
:class:`rollart.rewards.client.RewardClient` (retries with back-off); a reward that still fails drops its
trajectory (:class:`rollart.rollout.reward_dispatch.RewardDispatcher` logs and counts the reason).
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Awaitable, Callable, Optional

from rollart.actions.run import RunActions
from rollart.config import ConfigError
from rollart.pipeline.config import PipelineConfig
from rollart.rewards.client import ClientConfig, RewardCallError, RewardClient
from rollart.rewards.local import LocalEndpoint
from rollart.rewards.ray_endpoint import RayEndpoint
from rollart.rollout.reward_dispatch import RewardDispatcher, endpoint_reward
from rollart.types import Trajectory

log = logging.getLogger("rollart.pipeline")

RewardFn = Callable[[Trajectory], Awaitable[float]]


def check_scoring(cfg: PipelineConfig, reward_fn: Optional[RewardFn], tasks: list[Any]) -> None:
    """Before any process starts: a reward function passed in code and a reward endpoint both set, or
    reward.tasks naming no task of the run, is a config error."""
    r = cfg.reward
    if reward_fn is not None and r.uses_endpoint:
        raise ConfigError("a reward_fn was passed and reward.endpoint / reward.serverless is set: choose one")
    unknown = [t for t in r.tasks if t not in {task.name for task in tasks}]
    if unknown:
        raise ConfigError(f"reward.tasks names {unknown}, not tasks of this run ({[t.name for t in tasks]})")


def run_actions(cfg: PipelineConfig) -> Optional[RunActions]:
    """The run's action scheduler (actions.enabled), with the judges of reward.judges as model services."""
    if not cfg.actions.enabled:
        return None
    services = None
    if cfg.reward.judges:
        from rollart.actions.services import ServiceManager
        from rollart.rewards.judge_model import judge_models
        services = ServiceManager(judge_models(cfg.reward.judges), cfg.actions.service_memory_mb * 2**20)
    return RunActions(cfg.actions, cfg.reward.max_concurrency, services)


def with_judges(cfg: PipelineConfig, fn: Optional[RewardFn], tokenizer: Any,
                actions: Optional[RunActions]) -> Optional[RewardFn]:
    """``fn`` (default: the env's return) plus reward.judge_weight x the judges' mean score of the last answer
    (reward.judges); through the GPU-service manager when the run has actions, else on resident judges."""
    r = cfg.reward
    if not r.judges:
        return fn
    import asyncio

    from rollart.rewards.judge_model import judge_models, score
    from rollart.rollout.reward_dispatch import env_return_reward, last_answer, reference

    base = fn or env_return_reward
    names = [f"judge{i}" for i in range(r.judges)]
    resident = {} if actions is not None else {k: make() for k, make in judge_models(r.judges).items()}

    async def judged(traj: Trajectory) -> float:
        text, ref = last_answer(traj, tokenizer), reference(traj, r.reference_key)
        if actions is not None:
            scores = [await actions.service_call(name, score, text, ref) for name in names]
        else:
            scores = [await asyncio.to_thread(score, resident[name], text, ref) for name in names]
        return await base(traj) + r.judge_weight * sum(scores) / len(scores)

    return judged


class Scoring:
    """The run's RewardDispatcher and what it owns (an endpoint client, a local endpoint process)."""

    def __init__(self, dispatcher: RewardDispatcher, client: Optional[RewardClient] = None,
                 local: Optional[LocalEndpoint] = None):
        self.dispatcher, self.client, self.local = dispatcher, client, local

    @classmethod
    async def start(cls, cfg: PipelineConfig, tokenizer: Any, reward_fn: Optional[RewardFn] = None,
                    actions: Optional[RunActions] = None) -> "Scoring":
        """``actions``: the run's action scheduler; endpoint calls then wait for its API quota."""
        r = cfg.reward
        if not r.uses_endpoint:
            return cls(RewardDispatcher(with_judges(cfg, reward_fn, tokenizer, actions)))
        local = (RayEndpoint(r, cfg.cluster.cpus_per_actor) if cfg.cluster.backend == "ray" else LocalEndpoint(r)
                 ) if r.serverless else None
        url = await local.start() if local is not None else r.endpoint
        client = RewardClient(url, token=r.token or None, seed=cfg.seed, config=ClientConfig(
            retries=r.retries, backoff=r.backoff_s, max_backoff=max(5.0, r.backoff_s), timeout=r.attempt_timeout_s))
        call = local.following(client) if isinstance(local, RayEndpoint) else client.call
        call = call if actions is None else functools.partial(actions.reward_call, call)
        fn = with_judges(cfg, endpoint_reward(call, r.function, tokenizer, r.reference_key, r.tasks), tokenizer,
                         actions)
        log.info("rewards: %s on %s%s", r.function, url, " (started for this run)" if local else "")
        return cls(RewardDispatcher(fn, timeout_s=r.timeout_s, max_concurrency=r.max_concurrency), client, local)

    async def metrics(self) -> dict[str, float]:
        """Cumulative scoring counters, the client's HTTP attempts (retries show as attempts above calls) and
        the endpoint's own autoscaling figures (workers alive, spawned, utilisation)."""
        out = self.dispatcher.metrics()
        if self.client is None:
            return out
        out["system/reward_endpoint/attempts"] = float(self.client.attempts)
        try:
            stats = await self.client.stats()
        except RewardCallError as e:  # diagnostics only: an endpoint without /stats must not fail the run
            log.debug("reward endpoint stats: %s", e)
            return out
        for key in ("workers", "spawned", "utilisation", "failed"):
            if isinstance(stats.get(key), (int, float)):
                out[f"system/reward_endpoint/{key}"] = float(stats[key])
        return out

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self.local is not None:
            await self.local.stop()
