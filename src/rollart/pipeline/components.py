"""Build the actors of one run through the programming model (rollart.distributed, RollArt §5).

A ResourceManager holds the run's hardware: one device per inference worker of each class
(``worker_classes``), and the CPU processes of the trainer and the weight store. One Cluster per role
places and starts them: the inference workers by hardware class (their proxy routes tags to classes,
``hw_affinity``, the ``@hw_mapping`` way), the weight store, and the trainer unless one is shared.

``actor_mode="process"`` puts every inference worker, the trainer and the weight store in its own process
(connected to this coordinator over ZeroMQ); ``"inprocess"`` runs the same classes through the same
runtime inside this process (debugging, tests).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rollart.actors import ActorSystem, RestartPolicy
from rollart.actors.cpus import ENV_VAR, format_cpus
from rollart.config import ConfigError
from rollart.distributed import Cluster, ResourceManager
from rollart.inference.worker import InferenceWorker
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.trainer_actor import TrainerActor
from rollart.rollout.proxy import LLMProxy, ProxyConfig
from rollart.trainer.weight_store import WeightStore

log = logging.getLogger("rollart.pipeline")

SERVICE_CLASS = "cpu"
"""Hardware class of the trainer and weight-store processes."""


@dataclass
class Components:
    system: ActorSystem
    proxy: LLMProxy
    workers: list[tuple[str, str, Any]]
    """(name, hardware class, actor handle) per inference worker."""
    trainer: Any
    store: Any
    clusters: list[Cluster] = field(default_factory=list)
    """What this run started (a trainer passed in is not among them: its owner stops it)."""
    resources: ResourceManager | None = None

    async def close(self) -> None:
        for cluster in self.clusters:
            await cluster.shutdown()
        await self.system.shutdown()


def engine_config(cfg: PipelineConfig, model: str) -> dict:
    e = cfg.engine
    return dict(model=model, dtype=e.dtype, block_size=e.block_size, kv_cache_memory_gb=e.kv_cache_memory_gb,
                max_num_seqs=e.max_num_seqs, max_num_batched_tokens=e.max_num_batched_tokens,
                enable_prefix_caching=e.enable_prefix_caching, seed=cfg.seed)


def speed_config(hw_class: str, time_scale: float) -> dict | None:
    """The simulated speed model of a hardware class; None for classes without one (plain CPU)."""
    from rollart.inference.speed import HARDWARE, SpeedModelConfig
    if hw_class not in HARDWARE:
        return None
    return dataclasses.asdict(SpeedModelConfig(hardware=hw_class, time_scale=time_scale))


async def build(cfg: PipelineConfig, model: str, trainer: Any = None) -> Components:
    """Start the run's actors. ``trainer``: an existing trainer handle (anything with
    ``await trainer.call(method, ...)`` serving TrainerActor's methods, e.g. a shared training service
    client) to use instead of starting a private trainer."""
    classes = cfg.worker_class_list()
    rm = run_resources(classes, private_trainer=trainer is None)
    system = ActorSystem(heartbeat_interval=cfg.heartbeat_timeout_s / 10, heartbeat_timeout=cfg.heartbeat_timeout_s,
                         spawn_timeout=cfg.spawn_timeout_s)
    await system.start()
    mode = cfg.actor_mode
    rollout_env = {ENV_VAR: format_cpus(cfg.rollout_cpus)} if cfg.rollout_cpus else {}
    common = dict(system=system, verbose=False)
    speed = (lambda hw: {"speed": speed_config(hw, cfg.sim_time_scale)}) if cfg.simulate_hardware else None
    gen = Cluster(InferenceWorker, rm, len(classes), name="gen", placement=classes, mode=mode, env=rollout_env,
                  restart=RestartPolicy(max_restarts=2), worker_args=(engine_config(cfg, model),),
                  worker_kwargs=dict(backend=cfg.engine.backend), worker_kwargs_for=speed, **common)
    store = Cluster(WeightStore, rm, name="weight-store", placement=[SERVICE_CLASS], mode=mode, env=rollout_env,
                    restart=RestartPolicy(), **common)
    clusters = [gen, store]
    if trainer is None:
        trainer_cfg = dataclasses.replace(cfg.trainer, model_path=model, seed=cfg.seed)
        clusters.append(Cluster(
            TrainerActor, rm, name="trainer", placement=[SERVICE_CLASS], mode=cfg.trainer_actor_mode or mode,
            env={ENV_VAR: format_cpus(cfg.trainer_cpus)} if cfg.trainer_cpus else {}, restart=RestartPolicy(),
            worker_args=(dataclasses.asdict(trainer_cfg),), **common))
    try:
        await asyncio.gather(*(c.start() for c in clusters))  # processes start in parallel
        proxy = LLMProxy.from_cluster(gen, ProxyConfig(hw_affinity=dict(cfg.hw_affinity),
                                                       spill_ratio=cfg.hw_spill_ratio))
    except BaseException:
        await system.shutdown()
        raise
    log.info("bindings\n%s", rm.binding_table())
    workers = [(m.name, m.hardware, m.handle) for m in gen.members]
    trainer = trainer if trainer is not None else clusters[-1].handle()
    return Components(system, proxy, workers, trainer, store.handle(), clusters, rm)


def run_resources(worker_classes: list[str], private_trainer: bool = True) -> ResourceManager:
    """The run's devices: one per inference worker of each class, and one CPU process each for the weight
    store and (unless shared) the trainer."""
    pools = Counter(worker_classes)
    pools[SERVICE_CLASS] += 2 if private_trainer else 1
    try:
        return ResourceManager(dict(pools))
    except KeyError as e:  # a class the hardware catalogue does not know
        raise ConfigError(f"worker_classes={tuple(dict.fromkeys(worker_classes))}: {e.args[0]}") from None
