"""Scoring: what a run's trajectories are scored by, started and stopped with the run.

From the run's :class:`rollart.rewards.config.RewardConfig`: the env's return (default), a reward
endpoint at ``reward.endpoint``, or one started for the run (``reward.serverless=true``: a real
``python -m rollart.rewards.serve`` process, stopped at the end; with ``cluster.backend=ray`` Ray places it
on a node of ``reward.hw_class`` or any CPU node and restarts it elsewhere when that node is lost:
:class:`rollart.rewards.ray_endpoint.RayEndpoint`). The endpoint is called through
:class:`rollart.rewards.client.RewardClient` (retries with back-off); a reward that still fails drops its
trajectory (:class:`rollart.rewards.dispatch.RewardDispatcher` logs and counts the reason). Judges
(``reward.judges``) add a model-based score, through the action scheduler's GPU services when the run has one.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Optional

from rollart.actions.run import RunActions
from rollart.config import ConfigError
from rollart.rewards.client import ClientConfig, RewardCallError, RewardClient
from rollart.rewards.config import RewardConfig
from rollart.rewards.dispatch import RewardDispatcher, RewardFn, endpoint_reward
from rollart.rewards.local import LocalEndpoint
from rollart.rewards.ray_endpoint import RayEndpoint
from rollart.types import Trajectory

log = logging.getLogger("rollart.rewards")


def check_scoring(r: RewardConfig, reward_fn: Optional[RewardFn], tasks: list[Any]) -> None:
    """Before any process starts: a reward function passed in code and a reward endpoint both set, or
    reward.tasks naming no task of the run, is a config error."""
    if reward_fn is not None and r.uses_endpoint:
        raise ConfigError("a reward_fn was passed and reward.endpoint / reward.serverless is set: choose one")
    unknown = [t for t in r.tasks if t not in {task.name for task in tasks}]
    if unknown:
        raise ConfigError(f"reward.tasks names {unknown}, not tasks of this run ({[t.name for t in tasks]})")


def with_judges(r: RewardConfig, fn: Optional[RewardFn], tokenizer: Any,
                actions: Optional[RunActions]) -> Optional[RewardFn]:
    """``fn`` (default: the env's return) plus reward.judge_weight x the judges' mean score of the last answer
    (reward.judges, ``rollart.rewards.judges``); through the GPU-service manager when the run has actions, else
    on judges loaded here."""
    if not r.judges:
        return fn
    import asyncio
    import functools

    from rollart.rewards.dispatch import env_return_reward, last_answer, reference
    from rollart.rewards.judges import judge_factories, judge_tokenizers, score

    base = fn or env_return_reward
    tokenizers = judge_tokenizers(r.judges)
    resident = {} if actions is not None else {k: make() for k, make in judge_factories(r.judges).items()}

    async def judged(traj: Trajectory) -> float:
        text, ref = last_answer(traj, tokenizer), reference(traj, r.reference_key)
        scores = []
        for name, judge_tokenizer in tokenizers.items():
            judge = functools.partial(_judge_score, judge_tokenizer)
            if actions is not None:
                scores.append(await actions.service_call(name, judge, text, ref))
            else:
                scores.append(await asyncio.to_thread(judge, resident[name], text, ref))
        return await base(traj) + r.judge_weight * sum(scores) / len(scores)

    def _judge_score(judge_tokenizer: Any, model: Any, text: str, ref: str) -> float:
        return score(model, judge_tokenizer, text, ref)

    return judged


class Scoring:
    """The run's RewardDispatcher and what it owns (an endpoint client, a local endpoint process)."""

    def __init__(self, dispatcher: RewardDispatcher, client: Optional[RewardClient] = None,
                 local: Optional[LocalEndpoint] = None):
        self.dispatcher, self.client, self.local = dispatcher, client, local

    @classmethod
    async def start(cls, r: RewardConfig, tokenizer: Any, reward_fn: Optional[RewardFn] = None,
                    actions: Optional[RunActions] = None, seed: int = 0, ray_cpus: Optional[float] = None
                    ) -> "Scoring":
        """``actions``: the run's action scheduler; endpoint calls then wait for its API quota. ``ray_cpus``: the
        run places its processes with Ray (cluster.backend=ray), a started endpoint too, with this many CPUs."""
        if not r.uses_endpoint:
            return cls(RewardDispatcher(with_judges(r, reward_fn, tokenizer, actions), timeout_s=r.timeout_s))
        local = (RayEndpoint(r, ray_cpus) if ray_cpus is not None else LocalEndpoint(r)) if r.serverless else None
        url = await local.start() if local is not None else r.endpoint
        client = RewardClient(url, token=r.token or None, seed=seed, config=ClientConfig(
            retries=r.retries, backoff=r.backoff_s, max_backoff=max(5.0, r.backoff_s), timeout=r.attempt_timeout_s))
        call = local.following(client) if isinstance(local, RayEndpoint) else client.call
        call = call if actions is None else functools.partial(actions.reward_call, call)
        fn = with_judges(r, endpoint_reward(call, r.function, tokenizer, r.reference_key, r.tasks), tokenizer, actions)
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
