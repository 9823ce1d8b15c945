"""EnvHost: hosts many gymnasium envs on one CPU process; every env call is contained.

``reset``/``step`` run on daemon threads under timeouts. An env that raises, exceeds its timeout
(hangs) or returns garbage is dropped from the host and the call returns ``{"ok": False, "error": ...}``
— errors travel as values, so they cross an actor boundary intact and never take the host down. A
hung call strands only its own daemon thread (the pool, ``thread_pool``, replaces it), never the event loop.

The class is plain logic: drive it in-process (cheap envs, tests), or run hosts as actors in their own
processes (``EnvPool.spawn``: a Cluster of EnvHosts) so env crashes cannot touch the trainer.
"""
from __future__ import annotations

import asyncio
import gc
import importlib
import itertools
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from rollart.cpus import on_cores
from rollart.actors import handles
from rollart.config import ConfigError
from rollart.messages import CloseEnv, CloseIdleEnvs, CreateEnv, GetStats, PrewarmEnvs, ResetEnv, StepEnv
from rollart.rollout.env_protocol import env_defaults
from rollart.rollout.thread_pool import DaemonThreadPool, _Expired, _Watchdog


@dataclass
class EnvHostConfig:
    """Timeouts and capacity of one env host."""
    create_timeout_s: float = 60.0
    """Longest gymnasium.make may take."""
    reset_timeout_s: float = 60.0
    """Longest env.reset may take before the env is declared hung and dropped."""
    step_timeout_s: float = 30.0
    """Longest env.step may take before the env is declared hung and dropped."""
    max_threads: int = 512
    """Daemon threads running env calls concurrently (sleeping/IO-bound envs need one each)."""
    min_threads: int = 4
    """Threads started up front (starting one later briefly blocks the event loop)."""
    gil_switch_interval_s: float = 0.0
    """If > 0, sys.setswitchinterval(value) when the host starts. Process-wide: meant for env-host
    processes, where many env threads wake often and the default 5 ms GIL hand-off delays the loop."""
    gc_freeze: bool = False
    """If True, gc.freeze() when the host starts: every object alive then (imported modules — torch
    alone is ~200k objects) moves out of the cyclic collector's sight, so its full collections stop
    walking them (~100 ms per collection with torch imported, stalling every env call in flight).
    Process-wide and never undone: for env-host and rollout processes, after their imports."""
    max_envs: int = 4096
    """Envs one host holds at once; create() beyond this is refused."""
    reuse_envs: bool = False
    """Keep released healthy envs and hand them out again for the same (env_id, kwargs, faults): like
    the paper's long-lived envs, each trajectory starts with reset(). An env that raised or hung is
    never reused. Off by default: an env whose reset() does not clean up its last episode must not be."""
    max_idle_envs: int = 1024
    """Most released envs kept for reuse; beyond that a released env is closed."""
    cpu_affinity: tuple[int, ...] = ()
    """If set, every thread of the process (the event loop's, the env threads, and threads started
    later, which inherit it) is pinned to these CPUs when the host starts (Linux). Envs that run Python
    hold the GIL, so a second core buys them nothing, while each env call handed between threads on
    different cores costs a cross-core GIL hand-off: on the 2-vCPU VM of BENCHMARKS.md (rollout) that
    cost 2-3x the CPU per turn whenever the other core was idle. Process-wide and never undone: for
    env-host and rollout processes, not for one that also runs a model or GIL-releasing heavy envs."""

    def __post_init__(self) -> None:
        self.cpu_affinity = tuple(self.cpu_affinity)  # msgpack/CLI give lists
        if not all(isinstance(c, int) and c >= 0 for c in self.cpu_affinity):
            raise ConfigError(f"cpu_affinity must be CPU numbers >= 0, got {self.cpu_affinity!r}")
        for name in ("create_timeout_s", "reset_timeout_s", "step_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.gil_switch_interval_s < 0:
            raise ConfigError(f"gil_switch_interval_s must be >= 0, got {self.gil_switch_interval_s}")
        if self.max_threads < 1 or self.max_envs < 1 or not 0 <= self.min_threads <= self.max_threads:
            raise ConfigError("need max_threads >= 1, max_envs >= 1 and 0 <= min_threads <= max_threads")


def to_plain(value: Any) -> Any:
    """Make an env's info/observation msgpack-safe: numpy → Python, tuples → lists, others → str."""
    kind = type(value)  # exact-type fast paths first: this runs on every env call
    if kind in _PLAIN_SCALARS:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): to_plain(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [to_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return str(value)


_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})


def pin_process(cpus: tuple[int, ...] | set[int]) -> None:
    """Pin every thread of this process to ``cpus`` (rollart.cpus.pin_process), as
    ``EnvHostConfig.cpu_affinity`` asks; a CPU this process may not use is an error naming that setting."""
    from rollart.cpus import pin_process as pin_all_threads
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("EnvHostConfig.cpu_affinity needs os.sched_setaffinity (Linux); leave it empty here")
    try:
        pin_all_threads(set(cpus))
    except ValueError as e:
        raise ValueError(f"EnvHostConfig.cpu_affinity={sorted(cpus)}: {e}") from None


def _describe(e: BaseException) -> str:
    where = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    loc = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
    return f"{type(e).__name__}: {e}{loc}"


class EnvHost:
    """Hosts envs by key; see module docstring. All methods are coroutines returning plain data."""

    role = "env"
    """For rollart.distributed.Cluster: places a host on the env role's default class (CPU)."""

    def __init__(self, config: EnvHostConfig | dict | None = None, imports: list[str] | tuple = ()):
        """``imports``: modules imported first, where the env ids this host makes are registered (e.g.
        ``["envs"]`` for the shipped rollart/* envs); an in-process host shares its process's registry."""
        self.config = config if isinstance(config, EnvHostConfig) else EnvHostConfig(**(config or {}))
        for module in imports:
            importlib.import_module(module)
        if self.config.gil_switch_interval_s > 0:
            sys.setswitchinterval(self.config.gil_switch_interval_s)
        if self.config.gc_freeze:
            gc.freeze()
        if self.config.cpu_affinity:
            pin_process(self.config.cpu_affinity)
        self.pool = DaemonThreadPool(self.config.max_threads)
        self.pool.prestart(self.config.min_threads)
        self._watchdog = _Watchdog()
        self.envs: dict[str, Any] = {}
        self.idle: dict[str, list[Any]] = {}
        """Released healthy envs by kind (reuse_envs)."""
        self._kind: dict[str, str] = {}
        self._keys = itertools.count()
        self._fault_seq = itertools.count()
        self.counters = {"created": 0, "reused": 0, "released": 0, "closed": 0, "failed": 0,
                         "timeouts": 0, "steps": 0}

    @handles(CreateEnv)
    async def create(self, msg: CreateEnv) -> dict:
        """gymnasium.make(env_id, **kwargs) [wrapped in InjectFaults(**faults)] → key and defaults."""
        env_id, kwargs, faults = msg.env_id, msg.kwargs, msg.faults
        if len(self.envs) >= self.config.max_envs:
            return {"ok": False, "error": f"env host full ({self.config.max_envs} envs); raise max_envs "
                                          "or add hosts"}
        kind = _kind(env_id, kwargs, faults)
        if self.idle.get(kind):
            env = self.idle[kind].pop()
            self.counters["reused"] += 1
        else:
            if faults and faults.get("fault_seed") is not None:  # one seed per env, reproducible per host
                faults = {**faults, "fault_seed": int(faults["fault_seed"]) * 100_003 + next(self._fault_seq)}
            result = await self._run(None, "make", self._make, env_id, dict(kwargs or {}), faults,
                                     timeout=self.config.create_timeout_s)
            if not result["ok"]:
                return result
            env = result.pop("value")
            self.counters["created"] += 1
        try:
            system_prompt, max_new_tokens = env_defaults(env)
        except TypeError as e:
            self.counters["failed"] += 1
            self.counters["closed"] += 1
            self.pool.fire(_quiet_close, env)
            return {"ok": False, "error": f"make: {e}"}
        key = f"env{next(self._keys)}"
        self.envs[key] = env
        self._kind[key] = kind
        return {"ok": True, "key": key, "system_prompt": system_prompt, "max_new_tokens": max_new_tokens}

    @handles(ResetEnv)
    async def reset(self, msg: ResetEnv) -> dict:
        result = await self._run(msg.key, "reset", _env_reset, msg.seed, msg.options,
                                 timeout=self.config.reset_timeout_s)
        if result["ok"]:
            obs, info = result.pop("value")
            result.update(observation=to_plain(obs), info=to_plain(info))
        return result

    @handles(StepEnv)
    async def step(self, msg: StepEnv) -> dict:
        """``msg.cores``: granted by the action scheduler; processes the step starts are pinned to them."""
        self.counters["steps"] += 1
        result = await self._run(msg.key, "step", _env_step, msg.action, msg.cores,
                                 timeout=self.config.step_timeout_s)
        if result["ok"]:
            obs, reward, terminated, truncated, info = result.pop("value")
            result.update(observation=to_plain(obs), reward=float(reward), terminated=bool(terminated),
                          truncated=bool(truncated), info=to_plain(info))
        return result

    @handles(CloseEnv)
    async def close(self, msg: CloseEnv) -> bool:
        """Release an env (idempotent): kept for reuse (reuse_envs) or closed in the background."""
        key = msg.key
        env = self.envs.pop(key, None)
        if env is None:
            return False
        kind = self._kind.pop(key)
        self.counters["released"] += 1
        if self.config.reuse_envs and sum(map(len, self.idle.values())) < self.config.max_idle_envs:
            self.idle.setdefault(kind, []).append(env)
        else:
            self.counters["closed"] += 1
            self.pool.fire(_quiet_close, env)
        return True

    @handles(PrewarmEnvs)
    async def prewarm(self, msg: PrewarmEnvs) -> int:
        """Create ``msg.count`` envs ahead of time into the reuse pool (needs reuse_envs), and top the thread
        pool up to max(min_threads, count) threads; returns how many envs were made."""
        if not self.config.reuse_envs:
            raise ValueError("prewarm needs EnvHostConfig(reuse_envs=True)")
        # threads written off for hung or cancelled calls are replaced now, not by the step's first
        # calls (starting a thread blocks the loop until the thread runs)
        self.pool.prestart(max(self.config.min_threads, min(msg.count, self.config.max_threads)))
        made = [await self.create(CreateEnv(msg.env_id, msg.kwargs, msg.faults)) for _ in range(msg.count)]
        for r in made:
            if r["ok"]:
                await self.close(CloseEnv(r["key"]))
        return sum(r["ok"] for r in made)

    @handles(CloseIdleEnvs)
    async def close_idle(self, msg: CloseIdleEnvs) -> int:
        """Close every env kept for reuse; returns how many."""
        idle = [env for envs in self.idle.values() for env in envs]
        self.idle.clear()
        for env in idle:
            self.counters["closed"] += 1
            self.pool.fire(_quiet_close, env)
        return len(idle)

    async def on_stop(self) -> None:
        """Actor hook: close the idle envs when the host stops."""
        await self.close_idle(CloseIdleEnvs())

    @handles(GetStats)
    def stats(self, msg: GetStats) -> dict:
        return {**self.counters, "live_envs": len(self.envs), "idle_envs": sum(map(len, self.idle.values())),
                "threads": self.pool.live_threads}

    # ------------------------------------------------------------------ internals
    def _make(self, env_id: str, kwargs: dict, faults: dict | None):
        import gymnasium as gym

        env = gym.make(env_id, **kwargs)
        if faults:
            from rollart.rollout.env_faults import InjectFaults
            env = InjectFaults(env, **faults)
        return env

    async def _run(self, key: str | None, what: str, fn: Callable, *args: Any, timeout: float) -> dict:
        if key is not None:
            env = self.envs.get(key)
            if env is None:
                return {"ok": False, "error": f"{what}: no env {key!r} on this host (closed or failed earlier)"}
            args = (env, *args)
        job = self.pool.run(fn, *args)
        started = time.perf_counter()
        loop = job.mailbox.loop
        job.deadline = loop.time() + timeout
        self._watchdog.watch(job, loop)  # one timer per host, not one per call
        try:
            value = await job.future
        except _Expired:
            self.pool.abandon(job)
            self.counters["timeouts"] += 1
            return self._drop(key, f"{what} timed out after {timeout:g}s (env hung; dropped)")
        except asyncio.CancelledError:
            self.pool.abandon(job)  # the caller went away; the env state is unknown now
            self._drop(key, f"{what} cancelled")
            raise
        except Exception as e:  # noqa: BLE001 - an env's error is data, not a host crash
            return self._drop(key, f"{what} raised {_describe(e)}")
        finally:
            self._watchdog.forget(job)
        return {"ok": True, "value": value, "seconds": time.perf_counter() - started}

    def _drop(self, key: str | None, error: str) -> dict:
        self.counters["failed"] += 1
        env = self.envs.pop(key, None) if key is not None else None
        self._kind.pop(key, None)
        if env is not None:
            self.counters["closed"] += 1
            self.pool.fire(_quiet_close, env)
        return {"ok": False, "error": error}


def _kind(env_id: str, kwargs: dict | None, faults: dict | None) -> str:
    """Envs made from equal arguments are interchangeable after reset()."""
    return json.dumps([env_id, kwargs or {}, faults or {}], sort_keys=True, default=str)


def _env_reset(env: Any, seed: int | None, options: dict | None) -> Any:
    return env.reset(seed=seed, options=options)


def _env_step(env: Any, action: str, cores: list[int] | None = None) -> Any:
    with on_cores(cores):
        return env.step(action)


def _quiet_close(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a broken env is best effort
        pass
