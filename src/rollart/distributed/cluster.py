"""Cluster: a role's group of Workers run as actors, with their decorated methods bound on it.

    rm = ResourceManager({"H800": 2, "H20": 6, "cpu": 8})
    async with ActorSystem() as system:
        gen = await Cluster(HeteroActorGen, rm, n=4, system=system)
        text = await gen.generate(prompt, task="FrozenLake")       # routed to an H800 worker
        grads = await trainers.compute_gradients(batch)            # execute_all: one result per worker

A worker bound to GPU devices sees them, and only them, through ``CUDA_VISIBLE_DEVICES``
(``Binding.cuda_env``); CPU classes start with the environment unchanged.

Any class can be a worker: a ``Worker`` subclass gets ``rollart_bind`` (rank, hw_class, devices) once
started and again on every restart; a plain class (one without ``rollart_bind``) is placed and served the
same and finds its hardware class in ``ROLLART_HW_CLASS``. ``worker_kwargs_for(hw_class)`` adds
constructor keywords that depend on where a worker landed (e.g. a speed model per class).

Placement: ``placement={"H800": 1, "H20": 3}`` or a list with one class per worker; by default a class
with ``hw_mapping`` methods spreads its workers over the classes its affinities name, and any other
class goes to its role's default (``ResourceManager.default_hw_class``). Each worker binds one
device pool entry via ``ResourceManager.allocate`` (which falls back when a pool is exhausted).

A worker whose restart policy is exhausted is removed from routing and its devices are released;
calls then go to the others (a call in flight on it fails with ActorDeadError — not retried, since
methods need not be idempotent). ``max_inflight_per_worker`` makes a busy hardware class "exhausted"
for hw_mapping so that calls spill over to a compatible class.
"""
from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from rollart.actors import ActorHandle, ActorSystem, RestartPolicy
from rollart.distributed.decorators import Dispatch, dispatch_table
from rollart.distributed.hardware import fallbacks
from rollart.distributed.resources import Binding, ResourceManager
from rollart.distributed.serverless import ServerlessClient

log = logging.getLogger("rollart.distributed")


class ClusterError(RuntimeError):
    """The cluster cannot serve a call (no live worker) or was declared wrongly."""


@dataclass(eq=False)
class _Member:
    rank: int
    name: str
    binding: Binding
    handle: ActorHandle | None = None
    inflight: int = 0
    alive: bool = True

    @property
    def hw_class(self) -> str:
        return self.binding.hw_class


def _aggregate(how: Any, results: list) -> Any:
    if callable(how):
        return how(results)
    if how == "sum":
        return sum(results[1:], results[0]) if results else 0
    if how == "mean":
        return sum(results[1:], results[0]) / len(results) if results else None
    if how == "concat":
        return [x for r in results for x in r]
    return results


class Cluster:
    def __init__(self, worker_cls: type, resource_manager: ResourceManager, n: int = 1, *,
                 name: str | None = None, system: ActorSystem | None = None, mode: str = "process",
                 restart: RestartPolicy | None = None, placement: dict | list | None = None,
                 devices_per_worker: int = 1, worker_args: tuple = (), worker_kwargs: dict | None = None,
                 worker_kwargs_for: Callable[[str], dict] | None = None, env: dict | None = None, call_timeout: float | None = None,
                 max_inflight_per_worker: int | None = None, verbose: bool = True):
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
        self.call_timeout = call_timeout
        self.max_inflight = max_inflight_per_worker
        self.verbose = verbose
        self.members: list[_Member] = []
        self.routed: Counter = Counter()
        """(method, task, hw_class) -> calls routed there by hw_mapping."""
        self.dispatch = dispatch_table(worker_cls)
        self._rr = itertools.count()
        self._serverless: dict[str, ServerlessClient] = {}
        self._signatures = {m: inspect.signature(getattr(worker_cls, m)) for m in self.dispatch}
        for method, d in self.dispatch.items():
            if hasattr(type(self), method) or method in self.__dict__:
                raise ClusterError(f"{worker_cls.__name__}.{method} clashes with a Cluster attribute; rename it")
            setattr(self, method, self._dispatcher(method, d))

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
        else:
            affinities = list(dict.fromkeys(hw for d in self.dispatch.values() if d.kind == "hw_mapping"
                                            for hw in d.hw_affinity.values()))
            fixed = getattr(self.worker_cls, "hw_class", None)
            plan = [affinities[i % len(affinities)] for i in range(self.n)] if affinities else [fixed] * self.n
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
                "devices": m.binding.devices, "serverless": self._serverless_info()},), {}))
        return self.system.spawn(self.worker_cls, *self.worker_args, name=m.name, mode=self.mode,
                                 restart=self.restart,
                                 env={**self.env, **m.binding.cuda_env(), "ROLLART_HW_CLASS": m.hw_class},
                                 on_dead=self._on_worker_dead, setup_calls=setup, **kwargs)

    def _serverless_info(self) -> dict:
        info = {}
        for method, d in self.dispatch.items():
            if d.kind != "serverless":
                continue
            url = d.url or self.rm.serverless_url
            token = d.token or (self.rm.serverless_token if not d.url else None)
            if url and d.attribute:
                info[d.attribute] = (url, method, token)
        return info

    async def shutdown(self) -> None:
        for client in self._serverless.values():
            await client.close()
        self._serverless.clear()
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
                log.error("cluster %s: worker %s (%s) removed from routing: %s", self.name, name, m.hw_class, reason)

    # -- members -------------------------------------------------------------------------------
    def handle(self, rank: int = 0) -> ActorHandle:
        """The actor handle of one worker (e.g. of a one-worker cluster), for callers that speak to it directly."""
        for m in self.members:
            if m.rank == rank and m.handle is not None:
                return m.handle
        raise ClusterError(f"cluster {self.name} has no started rank {rank} (ranks 0..{len(self.members) - 1})")

    # -- routing ---------------------------------------------------------------------------------
    @property
    def live_workers(self) -> list[_Member]:
        return [m for m in self.members if m.alive and m.handle is not None and m.handle.alive]

    def _candidates(self) -> list[_Member]:
        live = self.live_workers
        if not live:
            dead = {m.name: m.binding.note for m in self.members}
            raise ClusterError(f"cluster {self.name} has no live worker ({dead})")
        ready = [m for m in live if m.handle.state == "ready"]
        return ready or live

    def _pick(self, members: list[_Member]) -> _Member:
        start = next(self._rr) % len(members)
        rotated = members[start:] + members[:start]
        return min(rotated, key=lambda m: m.inflight)

    def _task(self, method: str, args: tuple, kwargs: dict) -> Any:
        try:
            bound = self._signatures[method].bind(None, *args, **kwargs)
        except TypeError:
            return kwargs.get("task")
        bound.apply_defaults()
        return bound.arguments.get("task")

    def _route_hw(self, method: str, d: Dispatch, args: tuple, kwargs: dict) -> _Member:
        task = self._task(method, args, kwargs)
        preferred = d.preferred_hw_class(task)
        live = self._candidates()
        present = list(dict.fromkeys(m.hw_class for m in live))
        chosen: list[_Member] = []
        for hw in [preferred, *fallbacks(preferred, present)] if preferred else []:
            on_hw = [m for m in live if m.hw_class == hw]
            if not on_hw:
                continue
            free = [m for m in on_hw if self.max_inflight is None or m.inflight < self.max_inflight]
            if free:
                chosen = free
                break
            chosen = chosen or on_hw  # all busy: remember the preferred class in case nothing is free
        member = self._pick(chosen or live)
        self.routed[(method, task, member.hw_class)] += 1
        return member

    async def _call_member(self, m: _Member, method: str, args: tuple, kwargs: dict) -> Any:
        m.inflight += 1
        try:
            return await m.handle.call_with(method, args, kwargs, self.call_timeout)
        finally:
            m.inflight -= 1

    def _dispatcher(self, method: str, d: Dispatch) -> Callable[..., Any]:
        async def execute_all(*args: Any, **kwargs: Any) -> Any:
            members = self._candidates()
            results = await asyncio.gather(*(self._call_member(m, method, args, kwargs) for m in members))
            return _aggregate(d.aggregate, list(results))

        async def one(*args: Any, **kwargs: Any) -> Any:
            members = self._candidates()
            if d.mode == "round_robin":
                m = members[next(self._rr) % len(members)]
            else:
                m = self._pick(members)
            return await self._call_member(m, method, args, kwargs)

        async def hw_routed(*args: Any, **kwargs: Any) -> Any:
            return await self._call_member(self._route_hw(method, d, args, kwargs), method, args, kwargs)

        async def serverless(*args: Any, **kwargs: Any) -> Any:
            url = d.url or self.rm.serverless_url
            if not url:  # no endpoint declared: run it locally on a worker
                return await self._call_member(self._pick(self._candidates()), method, args, kwargs)
            client = self._serverless.get(url)
            if client is None:
                token = d.token or (self.rm.serverless_token if not d.url else None)
                client = self._serverless[url] = ServerlessClient(url, token)
            return await client.call(method, args, kwargs)

        if d.kind == "hw_mapping":
            fn = hw_routed
        elif d.kind == "serverless":
            fn = serverless
        else:
            fn = execute_all if d.mode == "execute_all" else one
        fn.__name__ = method
        fn.__doc__ = getattr(self.worker_cls, method).__doc__
        return fn

    # -- generic calls ---------------------------------------------------------------------------
    async def execute_all(self, method: str, *args: Any, **kwargs: Any) -> list:
        """Call any worker method on every live worker; results in rank order."""
        return list(await asyncio.gather(*(self._call_member(m, method, args, kwargs) for m in self._candidates())))

    async def execute_rank(self, rank: int, method: str, *args: Any, **kwargs: Any) -> Any:
        for m in self.members:
            if m.rank == rank:
                if not m.alive:
                    raise ClusterError(f"worker {m.name} is dead: {m.binding.note}")
                return await self._call_member(m, method, args, kwargs)
        raise ClusterError(f"cluster {self.name} has no rank {rank} (ranks 0..{len(self.members) - 1})")

    def describe(self) -> str:
        """The binding table of this cluster's workers and how each bound method dispatches."""
        rows = [f"cluster {self.name} ({self.worker_cls.__name__}, role={self.role}, n={self.n})"]
        for m in self.members:
            b = m.binding
            devs = ",".join(map(str, b.devices)) or "-"
            state = m.handle.state if m.handle else "unspawned"
            note = f"  [{b.note}]" if b.note else ""
            rows.append(f"  {m.name:<24} {b.hw_class:<10} devices {devs:<8} {state}{note}")
        for method, d in sorted(self.dispatch.items()):
            if d.kind == "hw_mapping":
                how = "hw_mapping " + ", ".join(f"{t}->{hw}" for t, hw in d.hw_affinity.items())
            elif d.kind == "serverless":
                url = d.url or self.rm.serverless_url
                how = f"serverless {url}/call/{method}" if url else "serverless (no endpoint: local worker)"
            else:
                how = d.mode + (f" aggregate={d.aggregate}" if d.mode == "execute_all" else "")
            rows.append(f"  .{method}() -> {how}")
        return "\n".join(rows)
