"""Cluster: one role's workers (inference, trainer ranks, weight store, env hosts) placed on the run's hardware
and run as actors (RollArt §5).

    rm = ResourceManager({"H800": 2, "H20": 6, "cpu": 8})
    async with ActorSystem() as system:
        gen = await Cluster(InferenceWorker, rm, n=4, placement=["H800", "H800", "H20", "H20"], system=system,
                            worker_args=(engine_config,))
        handle = gen.handle(0)                   # an ActorHandle: send it typed messages (rollart.messages)

Each worker binds one device pool entry through ``ResourceManager.allocate`` (which falls back to a compatible
class when a pool is exhausted and says so in the binding table). A worker bound to GPU devices sees them, and
only them, through ``CUDA_VISIBLE_DEVICES`` (``Binding.cuda_env``); every worker finds its class in
``ROLLART_HW_CLASS``, and a class with a ``rollart_bind(info)`` method is told its rank, name, class and devices
once started and again on every restart. ``worker_kwargs_for(hw_class)`` adds constructor keywords that depend
on where a worker landed (e.g. a speed model per class).

A Cluster only places, starts and supervises: who talks to its workers routes their requests (the LLMProxy
routes generation by task to hardware classes: ``rollart.rollout.routing``). A worker whose restarts are spent
releases its devices.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable

from rollart.actors import ActorHandle, ActorSystem, RestartPolicy
from rollart.distributed.resources import Binding, ResourceManager

log = logging.getLogger("rollart.distributed")


class ClusterError(RuntimeError):
    """The cluster was declared wrongly, or has no such worker."""


@dataclass(eq=False)
class _Member:
    rank: int
    name: str
    binding: Binding
    handle: ActorHandle | None = None
    alive: bool = True

    @property
    def hw_class(self) -> str:
        return self.binding.hw_class


class Cluster:
    def __init__(self, worker_cls: type, resource_manager: ResourceManager, n: int = 1, *,
                 name: str | None = None, system: ActorSystem | None = None, mode: str = "process",
                 restart: RestartPolicy | None = None, placement: dict | list | None = None,
                 devices_per_worker: int = 1, worker_args: tuple = (), worker_kwargs: dict | None = None,
                 worker_kwargs_for: Callable[[str], dict] | None = None, env: dict | None = None,
                 verbose: bool = True):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"a Cluster needs n >= 1 workers, got {n!r}")
        self.worker_cls = worker_cls
        self.rm = resource_manager
        self.n = n
        self.name = name or worker_cls.__name__
        self.role = getattr(worker_cls, "role", "train")
        self.system = system
        self._owns_system = system is None
        self.mode = mode
        self.restart = restart or RestartPolicy(max_restarts=1)
        self.placement = placement
        self.devices_per_worker = devices_per_worker
        self.worker_args = tuple(worker_args)
        self.worker_kwargs = dict(worker_kwargs or {})
        self.worker_kwargs_for = worker_kwargs_for
        self.env = dict(env or {})
        self.verbose = verbose
        self.members: list[_Member] = []

    # -- lifecycle -------------------------------------------------------------------------------
    def __await__(self) -> Any:
        return self.start().__await__()

    async def __aenter__(self) -> "Cluster":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    def _hw_class_plan(self) -> list[str | None]:
        if isinstance(self.placement, dict):
            plan = [hw for hw, count in self.placement.items() for _ in range(count)]
        elif isinstance(self.placement, list):
            plan = list(self.placement)
        else:  # the role's default class (ResourceManager.allocate)
            plan = [None] * self.n
        if len(plan) != self.n:
            raise ClusterError(f"placement names {len(plan)} workers but n={self.n}")
        return plan

    async def start(self) -> "Cluster":
        if self.system is None:
            self.system = await ActorSystem().start()
        plan = self._hw_class_plan()
        try:
            for rank, hw in enumerate(plan):
                name = f"{self.name}-{rank}"
                binding = self.rm.allocate(self.role, hw, self.devices_per_worker, owner=name)
                self.members.append(_Member(rank, name, binding))
            handles = await asyncio.gather(*(self._spawn(m) for m in self.members))  # processes start in parallel
            for m, h in zip(self.members, handles):
                m.handle = h
        except BaseException:
            await self.shutdown()
            raise
        table = self.describe()
        log.info("%s", table)
        if self.verbose:
            print(table, flush=True)
        return self

    def _spawn(self, m: _Member) -> Any:
        kwargs = {**self.worker_kwargs, **(self.worker_kwargs_for(m.hw_class) if self.worker_kwargs_for else {})}
        setup = []
        if callable(getattr(self.worker_cls, "rollart_bind", None)):  # made again on every restart of the worker
            setup.append(("rollart_bind", ({
                "rank": m.rank, "world_size": self.n, "name": m.name, "hw_class": m.hw_class,
                "devices": m.binding.devices},), {}))
        return self.system.spawn(self.worker_cls, *self.worker_args, name=m.name, mode=self.mode,
                                 restart=self.restart,
                                 env={**self.env, **m.binding.cuda_env(), "ROLLART_HW_CLASS": m.hw_class},
                                 on_dead=self._on_worker_dead, setup_calls=setup, **kwargs)

    async def shutdown(self) -> None:
        for m in self.members:
            if m.handle is not None and m.handle.alive:
                try:
                    await m.handle.stop()
                except Exception as e:  # noqa: BLE001 - shutting down: report, keep stopping the rest
                    log.warning("cluster %s: stopping %s: %s", self.name, m.name, e)
            if m.alive:
                m.alive = False
                self.rm.release(m.binding)
        if self._owns_system and self.system is not None:
            await self.system.shutdown()

    def _on_worker_dead(self, name: str, reason: str) -> None:
        for m in self.members:
            if m.name == name and m.alive:
                m.alive = False
                m.binding.note = f"dead: {reason}"[:80]
                self.rm.release(m.binding)
                log.error("cluster %s: worker %s (%s) is dead, its devices released: %s", self.name, name, m.hw_class,
                          reason)

    # -- members -------------------------------------------------------------------------------
    def handle(self, rank: int = 0) -> ActorHandle:
        """The actor handle of one worker (e.g. of a one-worker cluster), for callers that speak to it directly."""
        for m in self.members:
            if m.rank == rank and m.handle is not None:
                return m.handle
        raise ClusterError(f"cluster {self.name} has no started rank {rank} (ranks 0..{len(self.members) - 1})")

    def describe(self) -> str:
        """The binding table of this cluster's workers."""
        rows = [f"cluster {self.name} ({self.worker_cls.__name__}, role={self.role}, n={self.n})"]
        for m in self.members:
            b = m.binding
            devs = ",".join(map(str, b.devices)) or "-"
            state = m.handle.state if m.handle else "unspawned"
            note = f"  [{b.note}]" if b.note else ""
            rows.append(f"  {m.name:<24} {b.hw_class:<10} devices {devs:<8} {state}{note}")
        return "\n".join(rows)
