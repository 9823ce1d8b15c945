"""EnvHost: hosts many gymnasium envs on one CPU process; every env call is contained.

``reset``/``step`` run on daemon threads under timeouts. An env that raises, exceeds its timeout
(hangs) or returns garbage is dropped from the host and the call returns ``{"ok": False, "error": ...}``
— errors travel as values, so they cross an actor boundary intact and never take the host down. A
hung call strands only its own daemon thread (the pool replaces it), never the event loop.

The class is plain logic: drive it in-process (cheap envs, tests), or serve it as an actor with
``ActorSystem.spawn(EnvHost, ..., mode="process")`` so env crashes cannot touch the trainer.
"""
from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


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
    max_envs: int = 4096
    """Envs one host holds at once; create() beyond this is refused."""
    reuse_envs: bool = False
    """Keep released healthy envs and hand them out again for the same (env_id, kwargs, faults): like
    the paper's long-lived envs, each trajectory starts with reset(). An env that raised or hung is
    never reused. Off by default: an env whose reset() does not clean up its last episode must not be."""
    max_idle_envs: int = 1024
    """Most released envs kept for reuse; beyond that a released env is closed."""

    def __post_init__(self) -> None:
        for name in ("create_timeout_s", "reset_timeout_s", "step_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.gil_switch_interval_s < 0:
            raise ValueError(f"gil_switch_interval_s must be >= 0, got {self.gil_switch_interval_s}")
        if self.max_threads < 1 or self.max_envs < 1 or not 0 <= self.min_threads <= self.max_threads:
            raise ValueError("need max_threads >= 1, max_envs >= 1 and 0 <= min_threads <= max_threads")


class _Job:
    """One call queued on the pool; delivers its outcome to an asyncio future on ``loop``."""
    __slots__ = ("fn", "args", "loop", "future", "started", "abandoned")

    def __init__(self, fn: Callable, args: tuple, loop: asyncio.AbstractEventLoop | None):
        self.fn, self.args, self.loop = fn, args, loop
        self.future = loop.create_future() if loop is not None else None
        self.started = self.abandoned = False


class _Expired(Exception):
    """A call outlived its timeout (raised into the awaiting coroutine by the timer)."""


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(_Expired())


def _deliver(future: asyncio.Future, ok: bool, value: Any) -> None:
    if not future.done():
        future.set_result(value) if ok else future.set_exception(value)


class DaemonThreadPool:
    """A growing pool of daemon threads running blocking env calls for an event loop.

    ``abandon(job)`` writes off a thread stuck in a call: it stops counting against ``max_workers``
    (a replacement can start) and exits if its call ever returns. Daemon threads never block exit.
    """

    def __init__(self, max_workers: int, name: str = "env"):
        self.max_workers = max_workers
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = self._idle = self._pending = 0
        self._ids = itertools.count()

    def prestart(self, n: int) -> None:
        """Start idle threads until ``n`` are live."""
        while True:
            with self._lock:
                if self._live >= min(n, self.max_workers):
                    return
                self._live += 1
            self._spawn()

    def run(self, fn: Callable, *args: Any) -> _Job:
        """Queue ``fn(*args)``; await ``job.future`` (an asyncio future of the running loop)."""
        return self._submit(_Job(fn, args, asyncio.get_running_loop()))

    def fire(self, fn: Callable, *args: Any) -> None:
        """Queue ``fn(*args)`` and forget it (best-effort cleanup such as env.close)."""
        self._submit(_Job(fn, args, None))

    def abandon(self, job: _Job) -> None:
        with self._lock:
            if job.started and not job.abandoned:
                job.abandoned = True
                self._live -= 1

    def _submit(self, job: _Job) -> _Job:
        with self._lock:
            self._pending += 1
            spawn = self._pending > self._idle and self._live < self.max_workers
            if spawn:
                self._live += 1
        self._queue.put(job)
        if spawn:
            self._spawn()
        return job

    def _spawn(self) -> None:
        threading.Thread(target=self._work, name=f"{self.name}-{next(self._ids)}", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
                job.started = not (job.future is not None and job.future.done())  # cancelled while queued
            if job.started:
                try:
                    ok, value = True, job.fn(*job.args)
                except BaseException as e:  # noqa: BLE001 - delivered to the awaiting coroutine
                    ok, value = False, e
                if job.loop is not None:
                    try:
                        job.loop.call_soon_threadsafe(_deliver, job.future, ok, value)
                    except RuntimeError:
                        pass  # the loop is closed: nobody is waiting any more
            with self._lock:
                if job.abandoned:
                    return  # written off while stuck; the pool already replaced this thread

    @property
    def live_threads(self) -> int:
        return self._live


def to_plain(value: Any) -> Any:
    """Make an env's info/observation msgpack-safe: numpy → Python, tuples → lists, others → str."""
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


def _describe(e: BaseException) -> str:
    where = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    loc = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
    return f"{type(e).__name__}: {e}{loc}"


class EnvHost:
    """Hosts envs by key; see module docstring. All methods are coroutines returning plain data."""

    def __init__(self, config: EnvHostConfig | dict | None = None, imports: list[str] | tuple = ()):
        self.config = config if isinstance(config, EnvHostConfig) else EnvHostConfig(**(config or {}))
        import envs  # noqa: F401  registers the rollart/* ids in this process
        for module in imports:  # where users register their own envs
            importlib.import_module(module)
        if self.config.gil_switch_interval_s > 0:
            sys.setswitchinterval(self.config.gil_switch_interval_s)
        self.pool = DaemonThreadPool(self.config.max_threads)
        self.pool.prestart(self.config.min_threads)
        self.envs: dict[str, Any] = {}
        self.idle: dict[str, list[Any]] = {}
        """Released healthy envs by kind (reuse_envs)."""
        self._kind: dict[str, str] = {}
        self._keys = itertools.count()
        self._fault_seq = itertools.count()
        self.counters = {"created": 0, "reused": 0, "released": 0, "closed": 0, "failed": 0,
                         "timeouts": 0, "steps": 0}

    async def create(self, env_id: str, kwargs: dict | None = None, faults: dict | None = None) -> dict:
        """gymnasium.make(env_id, **kwargs) [wrapped in InjectFaults(**faults)] → key and defaults."""
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
        key = f"env{next(self._keys)}"
        self.envs[key] = env
        self._kind[key] = kind
        base = env.unwrapped
        return {"ok": True, "key": key, "system_prompt": str(getattr(base, "system_prompt", "") or ""),
                "max_new_tokens": int(getattr(base, "max_new_tokens", 0) or 0)}

    async def reset(self, key: str, seed: int | None = None, options: dict | None = None) -> dict:
        result = await self._run(key, "reset", lambda env: env.reset(seed=seed, options=options),
                                 timeout=self.config.reset_timeout_s)
        if result["ok"]:
            obs, info = result.pop("value")
            result.update(observation=to_plain(obs), info=to_plain(info))
        return result

    async def step(self, key: str, action: str) -> dict:
        self.counters["steps"] += 1
        result = await self._run(key, "step", lambda env: env.step(action),
                                 timeout=self.config.step_timeout_s)
        if result["ok"]:
            obs, reward, terminated, truncated, info = result.pop("value")
            result.update(observation=to_plain(obs), reward=float(reward), terminated=bool(terminated),
                          truncated=bool(truncated), info=to_plain(info))
        return result

    async def close(self, key: str) -> bool:
        """Release an env (idempotent): kept for reuse (reuse_envs) or closed in the background."""
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

    async def prewarm(self, env_id: str, kwargs: dict | None = None, faults: dict | None = None,
                      count: int = 1) -> int:
        """Create ``count`` envs ahead of time into the reuse pool (needs reuse_envs); returns how many."""
        if not self.config.reuse_envs:
            raise ValueError("prewarm needs EnvHostConfig(reuse_envs=True)")
        made = [await self.create(env_id, kwargs, faults) for _ in range(count)]
        for r in made:
            if r["ok"]:
                await self.close(r["key"])
        return sum(r["ok"] for r in made)

    async def close_idle(self) -> int:
        """Close every env kept for reuse; returns how many."""
        idle = [env for envs in self.idle.values() for env in envs]
        self.idle.clear()
        for env in idle:
            self.counters["closed"] += 1
            self.pool.fire(_quiet_close, env)
        return len(idle)

    async def on_stop(self) -> None:
        """Actor hook: close the idle envs when the host stops."""
        await self.close_idle()

    def stats(self) -> dict:
        return {**self.counters, "live_envs": len(self.envs), "idle_envs": sum(map(len, self.idle.values())),
                "threads": self.pool.live_threads}

    # ------------------------------------------------------------------ internals
    def _make(self, env_id: str, kwargs: dict, faults: dict | None):
        import gymnasium as gym

        env = gym.make(env_id, **kwargs)
        if faults:
            from envs.faults import InjectFaults
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
        timer = job.loop.call_later(timeout, _expire, job.future)  # cheaper than asyncio.timeout
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
            timer.cancel()
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


def _quiet_close(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a broken env is best effort
        pass
