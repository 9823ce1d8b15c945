"""Build the actors of one run through the programming model (rollart.distributed, RollArt §5).

A ResourceManager holds the run's hardware: one device per inference worker of each class
(``hw_classes``), and the CPU processes of the trainer and the weight store. One Cluster per role
places and starts them: the inference workers by hardware class (their proxy routes tasks to classes,
``hw_affinity``, the ``@hw_mapping`` way), the weight store, and the trainer unless one is shared
(``trainer.world_size`` > 1: that many data-parallel ranks, driven as one trainer by a TrainerGroup).

``actor_mode="process"`` puts every inference worker, the trainer, the weight store and each env host
(``env_hosts``) in its own process (connected to this coordinator over ZeroMQ); ``"inprocess"`` runs the
same classes through the same runtime inside this process (debugging, tests). Each role restarts in place per
its setting (``trainer_restarts``, ``weight_store_restarts``, ``env_host_restarts``,
``worker_restarts``).
``cluster.backend=ray`` starts those processes on Ray nodes of their class (rollart.distributed.ray_backend);
``placement=plan.json`` takes the workers' classes and devices from a HetRL plan (rollart.pipeline.run_plan).
"""
from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rollart.actors import ActorHandle, ActorSystem, RestartPolicy
from rollart.cpus import ENV_VAR, format_cpus
from rollart.config import ConfigError
from rollart.distributed import Cluster, ResourceManager
from rollart.inference.worker import InferenceWorker
from rollart.messages import DeviceStats, GetStats, WeightAddress
from rollart.pipeline.config import PipelineConfig
from rollart.pipeline.run_plan import RunPlacement
from rollart.trainer.actor import TrainerActor
from rollart.trainer.group import TrainerGroup
from rollart.rollout.env_client import EnvPool
from rollart.rollout.env_host import EnvHost
from rollart.rollout.proxy import LLMProxy
from rollart.weightplane.store import WeightStore
from rollart.weightplane.server import fixed_address

log = logging.getLogger("rollart.pipeline")

SERVICE_CLASS = "cpu"
"""Hardware class of the trainer and weight-store processes."""


class WorkerRef(NamedTuple):
    name: str
    hw_class: str
    handle: Any
    """The worker's actor handle (or a view of a shared worker, rollart.multiplex.client.JobWorker)."""


@dataclass
class RunActors:
    """The actors of one run and what started them; ``close`` stops what this run started."""
    system: ActorSystem
    proxy: LLMProxy
    workers: list[WorkerRef]
    trainer: Any
    store: Any
    clusters: list[Any] = field(default_factory=list)
    """What this run started: Clusters, and a TrainerGroup for data-parallel trainer ranks (a trainer passed in is not among them: its owner stops it)."""
    resources: ResourceManager | None = None
    env_pool: EnvPool | None = None
    """The env-host actors (``env_hosts`` > 0), else None: envs then run inside this process."""
    backend: Any = None
    """The Ray backend when cluster.backend=ray (its ``placements`` say where each actor ran)."""

    def repoint_store(self, address: str) -> None:
        """The weight store restarted on another address (another node): inference workers that restart from
        now on pull its newest version there (a live worker is told the address with every weight message)."""
        for worker in self.workers:
            if isinstance(worker.handle, ActorHandle):  # a shared worker's owner handles its restarts
                worker.handle.restart_with(weight_store=address)

    async def worker_stats(self, simulate_hardware: bool = False) -> dict:
        """Each inference worker's counters; with simulated hardware, warn if the real compute was not well
        below the simulated time (then the CPU, not the simulated class, set the worker's speed)."""
        stats = {}
        for w in self.workers:
            try:
                stats[w.name] = {"hw_class": w.hw_class, **await w.handle.send(GetStats())}
            except Exception as e:  # noqa: BLE001 - stats are diagnostics; a dead worker must not fail the run
                log.warning("stats of worker %s: %s", w.name, e)
        for name, st in stats.items():
            simulated = st.get("simulated_scaled_seconds", 0.0)
            if simulate_hardware and simulated and st["engine_seconds"] > 0.5 * simulated:
                log.warning("worker %s: real engine compute %.1f s is %.0f%% of its simulated %s time %.1f s, "
                            "so this CPU, not the simulated hardware, set much of its speed; raise "
                            "sim_time_scale or give rollout more cores", name, st["engine_seconds"],
                            100 * st["engine_seconds"] / simulated, st["hw_class"], simulated)
        return stats

    async def device_stats(self, worker_stats: dict) -> dict:
        """Device and peak GPU memory of the trainer and of each worker that reports them (diagnostics)."""
        out = {name: {k: st[k] for k in ("device", "peak_memory_gb") if k in st}
               for name, st in worker_stats.items() if "peak_memory_gb" in st}
        try:
            out["trainer"] = await self.trainer.send(DeviceStats())
        except Exception as e:  # noqa: BLE001 - e.g. a shared training service that does not answer it
            log.info("trainer device stats: %s", e)
        return out

    async def close(self) -> None:
        try:
            for cluster in self.clusters:
                await cluster.shutdown()
            await self.system.shutdown()
        finally:
            if self.backend is not None:
                await self.backend.close()


async def start_actors(cfg: PipelineConfig, plan: RunPlacement | None = None, trainer: Any = None,
                       inference: list | None = None) -> RunActors:
    """Start the run's actors from the resolved config (``rollart.pipeline.resolve``) and the placement plan
    preflight read, if any. ``trainer``: an existing trainer (an ``ActorRef`` answering the trainer's messages,
    e.g. a shared training service client) to use instead of starting a private trainer. ``inference``: existing
    inference workers as (name, hardware class, handle) to route to instead of starting private ones (e.g. a
    job's views of shared workers, ``rollart.multiplex.client.JobWorker``); their owner stops them."""
    classes = [] if inference else cfg.worker_hw_classes()
    if plan is not None:
        log.info("%s", plan.describe())
    rm = run_resources(classes, private_trainer=trainer is None, env_hosts=cfg.env_hosts, plan=plan,
                       trainer_ranks=cfg.trainer.world_size)
    backend = None
    if cfg.cluster.backend == "ray":
        from rollart.distributed.ray_backend import RayBackend
        backend = await RayBackend(cfg.cluster, rm, worker_slots(rm, plan), cfg.run_dir).start()
    system = ActorSystem(heartbeat_interval=cfg.heartbeat_timeout_s / 10, heartbeat_timeout=cfg.heartbeat_timeout_s,
                         spawn_timeout=cfg.spawn_timeout_s, **(dict(bind=backend.bind, curve_dir=backend.curve_dir,
                                                                    launcher=backend.launch) if backend else {}))
    try:
        await system.start()
    except BaseException:
        if backend is not None:
            await backend.close()
        raise
    mode = cfg.actor_mode
    rollout_env = {ENV_VAR: format_cpus(cfg.rollout_cpus)} if cfg.rollout_cpus else {}
    common = dict(system=system, verbose=False)
    speed = (lambda hw: {"speed": cfg.speed_models.get(hw)}) if cfg.speed_models else None
    # weight plane: on one machine the store's address is fixed up front, so a restarted store binds it again
    # and a worker (restarted or not) pulls the store's newest version itself at start; beyond loopback the
    # store binds its node's IP (with the run's CURVE keys), known once it runs: it starts first
    beyond = backend is not None and backend.curve_dir is not None
    store_address = "" if beyond else fixed_address()
    gen = None if inference else Cluster(
        InferenceWorker, rm, len(classes), name="gen", placement=classes, mode=mode, env=rollout_env,
        devices_per_worker=plan.devices_per_worker if plan else 1,
        restart=RestartPolicy(max_restarts=cfg.worker_restarts),
        worker_args=(cfg.engine,), worker_kwargs=dict(backend=cfg.engine.backend, weight_store=store_address,
                                                      link_bytes_per_s=cfg.weight_link_bytes_per_s,
                                                      weight_timeout_s=cfg.weights.timeout_s,
                                                      weight_retries=cfg.weights.retries),
        worker_kwargs_for=speed, **common)
    store = Cluster(WeightStore, rm, name="weight-store", placement=[SERVICE_CLASS], mode=mode, env=rollout_env,
                    restart=RestartPolicy(max_restarts=cfg.weight_store_restarts),
                    worker_kwargs=dict(timeout_s=cfg.weights.timeout_s, retries=cfg.weights.retries,
                                       **(dict(bind=store_address) if store_address else {})), **common)
    clusters = [store] if gen is None else [gen, store]
    envs = None
    if cfg.env_hosts:
        envs = Cluster(EnvHost, rm, cfg.env_hosts, name="envhost", placement=[SERVICE_CLASS] * cfg.env_hosts,
                       mode=mode, env=rollout_env, restart=RestartPolicy(max_restarts=cfg.env_host_restarts),
                       worker_args=({}, list(cfg.env_imports)), **common)
        clusters.append(envs)
    own_trainer = None
    if trainer is None:
        world = cfg.trainer.world_size

        def trainer_cluster() -> Cluster:
            return Cluster(
                TrainerActor, rm, world, name="trainer", placement=[plan.train[0] if plan else SERVICE_CLASS] * world,
                devices_per_worker=plan.devices_per_rank if plan else 1, mode=cfg.trainer_actor_mode or mode,
                env={ENV_VAR: format_cpus(cfg.trainer_cpus)} if cfg.trainer_cpus else {},
                restart=RestartPolicy(max_restarts=cfg.trainer_restarts if world == 1 else 0),
                worker_args=(cfg.trainer,), **common)
        if world == 1:
            own_trainer = trainer_cluster()
        else:  # data-parallel ranks, restarted together (rollart.trainer.group)
            toward = backend.bind.removeprefix("tcp://").rsplit(":", 1)[0] if backend else "127.0.0.1"
            own_trainer = TrainerGroup(trainer_cluster, world, cfg.trainer_restarts, toward=toward)
        clusters.append(own_trainer)
    try:
        if beyond:
            await store.start()
            if gen is not None:
                gen.worker_kwargs["weight_store"] = await store.handle().send(WeightAddress())
        await asyncio.gather(*(c.start() for c in clusters if not (beyond and c is store)))  # in parallel
        proxy = LLMProxy(inference, cfg.proxy) if inference else LLMProxy.from_cluster(gen, cfg.proxy)
    except BaseException:
        await system.shutdown()
        if backend is not None:
            await backend.close()
        raise
    log.info("bindings\n%s", rm.binding_table())
    workers = [WorkerRef(*w) for w in inference] if inference else [WorkerRef(m.name, m.hw_class, m.handle)
                                                                      for m in gen.members]
    if own_trainer is not None:
        trainer = own_trainer if isinstance(own_trainer, TrainerGroup) else own_trainer.handle()
    env_pool = EnvPool.from_cluster(envs, grace_s=cfg.env_host_timeout_s) if envs is not None else None
    return RunActors(system, proxy, workers, trainer, store.handle(), clusters, rm, env_pool, backend)


def run_resources(hw_classes: list[str], private_trainer: bool = True, env_hosts: int = 0,
                  plan: Any = None, trainer_ranks: int = 1) -> ResourceManager:
    """The run's devices: one per inference worker of each class, and one CPU process each for the weight
    store, each env host and (unless shared) each of the ``trainer_ranks`` trainer ranks; with a ``plan`` (RunPlacement), its device ids for
    the inference workers and the trainer."""
    if plan is not None:
        pools: dict = {}
        for hw, ids in [*plan.generate, *([plan.train] if private_trainer else [])]:  # binding order
            pools.setdefault(hw, []).extend(ids)
        pools[SERVICE_CLASS] = 1 + env_hosts
    else:
        pools = Counter(hw_classes)
        pools[SERVICE_CLASS] += 1 + (trainer_ranks if private_trainer else 0) + env_hosts
    try:
        return ResourceManager(dict(pools))
    except KeyError as e:  # a class the hardware catalogue does not know
        raise ConfigError(f"hw_classes={tuple(dict.fromkeys(hw_classes))}: {e.args[0]}") from None


def worker_slots(rm: ResourceManager, plan: Any = None) -> dict[str, list[list]]:
    """Per class, the devices of each worker slot (one Ray placement-group bundle each), in binding order: one
    device per slot, or a plan's devices per inference worker and per trainer rank."""
    if plan is None:
        return {hw: [[d] for d in ids] for hw, ids in rm.free.items()}
    slots: dict[str, list[list]] = {}
    for hw, ids in [*plan.generate, *plan.train_ranks]:  # a bundle per worker and per trainer rank
        if set(ids) <= set(rm.free.get(hw, ())):  # the trainer's devices are absent when the trainer is shared
            slots.setdefault(hw, []).append(list(ids))
    slots[SERVICE_CLASS] = [[d] for d in rm.free[SERVICE_CLASS]]
    return slots
