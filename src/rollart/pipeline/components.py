"""Build the actors of one run: inference workers behind an LLMProxy, the trainer, the weight store.

``actor_mode="process"`` puts every inference worker, the trainer and the weight store in its own process
(connected to this coordinator over ZeroMQ); ``"inprocess"`` runs the same classes through the same
runtime inside this process (debugging, tests).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from rollart.actors import ActorSystem, RestartPolicy
from rollart.actors.cpus import ENV_VAR, format_cpus
from rollart.pipeline.config import PipelineConfig
from rollart.rollout.proxy import LLMProxy

log = logging.getLogger("rollart.pipeline")


@dataclass
class Components:
    system: ActorSystem
    proxy: LLMProxy
    workers: list[tuple[str, str, Any]]
    """(name, hardware class, actor handle) per inference worker."""
    trainer: Any
    store: Any
    owns_trainer: bool = True

    async def close(self) -> None:
        for _, _, handle in self.workers:
            await _quiet_stop(handle)
        if self.owns_trainer:
            await _quiet_stop(self.trainer)
        await _quiet_stop(self.store)
        await self.system.shutdown()


async def _quiet_stop(handle: Any) -> None:
    try:
        await handle.stop()
    except Exception as e:  # noqa: BLE001 - shutting down: report, keep closing the rest
        log.warning("stopping %s: %s", getattr(handle, "name", handle), e)


async def _ready(value: Any) -> Any:
    return value


async def build(cfg: PipelineConfig, trainer: Any = None) -> Components:
    """Start the run's actors from the resolved config (``PipelineConfig.resolve``). ``trainer``: an existing
    trainer handle (anything with ``await trainer.call(method, ...)`` serving TrainerActor's methods, e.g. a
    shared training service client) to use instead of spawning a private trainer."""
    system = ActorSystem(heartbeat_interval=cfg.heartbeat_timeout_s / 10, heartbeat_timeout=cfg.heartbeat_timeout_s,
                         spawn_timeout=cfg.spawn_timeout_s)
    await system.start()
    mode = cfg.actor_mode
    trainer_env = {ENV_VAR: format_cpus(cfg.trainer_cpus)} if cfg.trainer_cpus else {}
    rollout_env = {ENV_VAR: format_cpus(cfg.rollout_cpus)} if cfg.rollout_cpus else {}
    try:
        private = system.spawn("rollart.pipeline.trainer_actor:TrainerActor", cfg.trainer,
                               name="trainer", mode=cfg.trainer_actor_mode or mode,
                               env=trainer_env) if trainer is None else _ready(trainer)
        spawns = [private,
                  system.spawn("rollart.trainer.weight_store:WeightStore", name="weight-store", mode=mode,
                               env=rollout_env)]
        names = []
        for i, hw in enumerate(cfg.worker_hw_classes()):
            name = f"gen{i}-{hw}"
            names.append((name, hw))
            spawns.append(system.spawn("rollart.inference.worker:InferenceWorker", cfg.engine,
                                       backend=cfg.engine.backend, name=name, hw_class=hw,
                                       speed=cfg.speed_models.get(hw),
                                       mode=mode, env=rollout_env, restart=RestartPolicy(max_restarts=2)))
        trainer_handle, store, *handles = await asyncio.gather(*spawns)  # processes start in parallel
        workers = [(name, hw, h) for (name, hw), h in zip(names, handles)]
        proxy = LLMProxy(workers, cfg.proxy)
    except BaseException:
        await system.shutdown()
        raise
    return Components(system, proxy, workers, trainer_handle, store, owns_trainer=trainer is None)
