"""Build the actors of one run: inference workers behind an LLMProxy, the trainer, the weight store.

``actor_mode="process"`` puts every inference worker, the trainer and the weight store in its own process
(connected to this coordinator over ZeroMQ); ``"inprocess"`` runs the same classes through the same
runtime inside this process (debugging, tests).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from rollart.actors import ActorSystem, RestartPolicy
from rollart.actors.cpus import ENV_VAR, format_cpus
from rollart.pipeline.config import PipelineConfig
from rollart.rollout.proxy import LLMProxy, ProxyConfig

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


def engine_config(cfg: PipelineConfig, model: str) -> dict:
    e = cfg.engine
    return dict(model=model, dtype=e.dtype, block_size=e.block_size, kv_cache_memory_gb=e.kv_cache_memory_gb,
                max_num_seqs=e.max_num_seqs, max_num_batched_tokens=e.max_num_batched_tokens,
                enable_prefix_caching=e.enable_prefix_caching, seed=cfg.seed)


def speed_config(hw_class: str, time_scale: float) -> dict | None:
    """The simulated speed model of a hardware class; None for classes without one (CPU, serverless)."""
    from rollart.hardware import HARDWARE, SpeedModelConfig
    if hw_class not in HARDWARE or HARDWARE[hw_class].kind != "gpu":
        return None
    return dataclasses.asdict(SpeedModelConfig(hardware=hw_class, time_scale=time_scale))


async def build(cfg: PipelineConfig, model: str, trainer: Any = None) -> Components:
    """Start the run's actors. ``trainer``: an existing trainer handle (anything with
    ``await trainer.call(method, ...)`` serving TrainerActor's methods, e.g. a shared training service
    client) to use instead of spawning a private trainer."""
    system = ActorSystem(heartbeat_interval=cfg.heartbeat_timeout_s / 10, heartbeat_timeout=cfg.heartbeat_timeout_s,
                         spawn_timeout=cfg.spawn_timeout_s)
    await system.start()
    mode = cfg.actor_mode
    trainer_env = {ENV_VAR: format_cpus(cfg.trainer_cpus)} if cfg.trainer_cpus else {}
    rollout_env = {ENV_VAR: format_cpus(cfg.rollout_cpus)} if cfg.rollout_cpus else {}
    try:
        trainer_cfg = dataclasses.replace(cfg.trainer, model_path=model, seed=cfg.seed)
        private = system.spawn("rollart.pipeline.trainer_actor:TrainerActor", dataclasses.asdict(trainer_cfg),
                               name="trainer", mode=cfg.trainer_actor_mode or mode,
                               env=trainer_env) if trainer is None else _ready(trainer)
        spawns = [private,
                  system.spawn("rollart.trainer.weight_store:WeightStore", name="weight-store", mode=mode,
                               env=rollout_env)]
        names = []
        for i, hw in enumerate(cfg.worker_class_list()):
            name = f"gen{i}-{hw}"
            speed = speed_config(hw, cfg.sim_time_scale) if cfg.simulate_hardware else None
            names.append((name, hw))
            spawns.append(system.spawn("rollart.inference.worker:InferenceWorker", engine_config(cfg, model),
                                       backend=cfg.engine.backend, name=name, hw_class=hw, speed=speed,
                                       mode=mode, env=rollout_env, restart=RestartPolicy(max_restarts=2)))
        trainer_handle, store, *handles = await asyncio.gather(*spawns)  # processes start in parallel
        workers = [(name, hw, h) for (name, hw), h in zip(names, handles)]
        proxy = LLMProxy(workers, ProxyConfig(hw_affinity=dict(cfg.hw_affinity), spill_ratio=cfg.hw_spill_ratio))
    except BaseException:
        await system.shutdown()
        raise
    return Components(system, proxy, workers, trainer_handle, store, owns_trainer=trainer is None)
