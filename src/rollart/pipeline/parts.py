"""The parts a run opens on top of its actors: scoring and actions, the sample buffer, the env managers (behind
the agent gateway for agent tasks), held-out evaluation, the rollout scheduler, weight sync and recovery.

``open_parts`` registers each part's closing with the run's exit stack as it opens it, so a failure half-way
closes exactly what was opened before it.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

from rollart.actions.run import RunActions
from rollart.gateway.agent_task import AgentRunner, TaskRunner, start_gateway
from rollart.monitor import MetricsLogger
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.heldout import HeldOutEval
from rollart.pipeline.recovery import Recovery
from rollart.pipeline.run_actors import RunActors
from rollart.pipeline.run_state import RunTasks
from rollart.rewards.dispatch import RewardFn
from rollart.rewards.scoring import Scoring
from rollart.weightplane.sync import WeightSync
from rollart.rollout.buffer import SampleBuffer
from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_manager import EnvManager
from rollart.rollout.group_scheduler import RolloutScheduler


@dataclass
class RunParts:
    actors: RunActors
    scoring: Scoring
    buffer: SampleBuffer
    scheduler: RolloutScheduler
    eval_manager: EnvManager | TaskRunner
    """Plays evaluation episodes through the same proxy, outside the buffer."""
    heldout: HeldOutEval
    weights: WeightSync
    recovery: Recovery
    actions: Optional[RunActions] = None
    """ARL-Tangram action scheduling (``actions.enabled``), else None."""
    gateway: Any = None
    """The agent gateway when the run has agent tasks, else None."""


def run_actions(cfg: PipelineConfig) -> Optional[RunActions]:
    """The run's action scheduler (actions.enabled), with the judges of reward.judges as model services."""
    if not cfg.actions.enabled:
        return None
    services = None
    if cfg.reward.judges:
        from rollart.actions.services import ServiceManager
        from rollart.rewards.judges import judge_factories
        services = ServiceManager(judge_factories(cfg.reward.judges), cfg.actions.service_memory_mb * 2**20)
    return RunActions(cfg.actions, cfg.reward.max_concurrency, services)


async def open_parts(cfg: PipelineConfig, actors: RunActors, tokenizer: Any, tasks: RunTasks,
                     reward_fn: Optional[RewardFn], env_pool: Optional[EnvPool], logger: MetricsLogger,
                     stack: contextlib.AsyncExitStack, interaction: Optional[Callable[[EnvManager], Any]] = None
                     ) -> RunParts:
    """``interaction``: wraps the training env manager (a baseline's way of interacting, e.g.
    ``rollart.sim.batched.BatchedInteraction``); None: trajectory-level interaction."""
    actions = run_actions(cfg)
    if actions is not None:
        stack.push_async_callback(actions.close)
    scoring = await Scoring.start(cfg.reward, tokenizer, reward_fn, actions, seed=cfg.seed,
                                  ray_cpus=cfg.cluster.cpus_per_actor if cfg.cluster.backend == "ray" else None)
    stack.push_async_callback(scoring.close)
    buffer = SampleBuffer(cfg.buffer)
    pool = env_pool or actors.env_pool or EnvPool.inprocess()
    manager = EnvManager(actors.proxy, tokenizer, pool, gate=buffer, actions=actions)
    if interaction is not None:
        manager = interaction(manager)
    eval_manager = EnvManager(actors.proxy, tokenizer, pool, gate=None, actions=actions)
    gateway = await start_gateway(actors.proxy, tokenizer, [*tasks.train, *tasks.eval])
    if gateway is not None:  # agent tasks: run through the OpenAI-compatible gateway
        stack.push_async_callback(gateway.close)
        manager = TaskRunner(manager, AgentRunner(gateway, gate=buffer))
        eval_manager = TaskRunner(eval_manager, AgentRunner(gateway))

    def log_heldout(metrics: dict, step: int) -> None:
        logger.log(metrics, step)
        logger.flush()

    heldout = HeldOutEval(eval_manager, tasks.heldout, cfg.heldout_episodes, cfg.eval_every,
                          lambda: actors.proxy.version, log_heldout)
    stack.push_async_callback(heldout.cancel)
    scheduler = RolloutScheduler(tasks.train, manager, cfg.rollout, buffer=buffer, rewards=scoring.dispatcher)
    weights = WeightSync(actors.trainer, actors.store, actors.proxy, cfg.bucket_bytes, cfg.weights,
                         cfg.weight_push_bytes_per_s)
    weights.store_moved.append(actors.repoint_store)
    recovery = Recovery(actors.trainer, actors.store, weights, buffer, actors.proxy, cfg.run_dir / "checkpoints",
                        cfg.alpha)
    return RunParts(actors, scoring, buffer, scheduler, eval_manager, heldout, weights, recovery, actions, gateway)
