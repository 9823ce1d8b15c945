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
import concurrent.futures
import importlib
import itertools
import queue
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
    max_envs: int = 4096
    """Envs one host holds at once; create() beyond this is refused."""

    def __post_init__(self) -> None:
        for name in ("create_timeout_s", "reset_timeout_s", "step_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_threads < 1 or self.max_envs < 1:
            raise ValueError("max_threads and max_envs must be >= 1")


class DaemonThreadPool(concurrent.futures.Executor):
    """A growing pool of daemon threads. ``abandon(future)`` writes off a thread stuck in a call:
    it stops counting against ``max_workers`` and exits if its call ever returns."""

    def __init__(self, max_workers: int, name: str = "env"):
        self.max_workers = max_workers
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = self._idle = self._pending = 0
        self._ids = itertools.count()

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._pending += 1
            spawn = self._pending > self._idle and self._live < self.max_workers
            if spawn:
                self._live += 1
        self._queue.put((fut, fn, args, kwargs))
        if spawn:
            threading.Thread(target=self._work, name=f"{self.name}-{next(self._ids)}", daemon=True).start()
        return fut

    def abandon(self, fut: concurrent.futures.Future) -> None:
        with self._lock:
            if not getattr(fut, "abandoned", False) and fut.running():
                fut.abandoned = True
                self._live -= 1

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fut, fn, args, kwargs = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 - delivered to the awaiting coroutine
                    fut.set_exception(e)
            with self._lock:
                if getattr(fut, "abandoned", False):
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
        self.pool = DaemonThreadPool(self.config.max_threads)
        self.envs: dict[str, Any] = {}
        self._keys = itertools.count()
        self._fault_seq = itertools.count()
        self.counters = {"created": 0, "closed": 0, "failed": 0, "timeouts": 0, "steps": 0}

    async def create(self, env_id: str, kwargs: dict | None = None, faults: dict | None = None) -> dict:
        """gymnasium.make(env_id, **kwargs) [wrapped in InjectFaults(**faults)] → key and defaults."""
        if len(self.envs) >= self.config.max_envs:
            return {"ok": False, "error": f"env host full ({self.config.max_envs} envs); raise max_envs "
                                          "or add hosts"}
        if faults and faults.get("fault_seed") is not None:  # one seed per env, reproducible per host
            faults = {**faults, "fault_seed": int(faults["fault_seed"]) * 100_003 + next(self._fault_seq)}
        result = await self._run(None, "make", self._make, env_id, dict(kwargs or {}), faults,
                                 timeout=self.config.create_timeout_s)
        if not result["ok"]:
            return result
        env = result.pop("value")
        key = f"env{next(self._keys)}"
        self.envs[key] = env
        self.counters["created"] += 1
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
        """Release an env (idempotent). Its close() runs in the background and is not awaited."""
        env = self.envs.pop(key, None)
        if env is None:
            return False
        self.counters["closed"] += 1
        self.pool.submit(_quiet_close, env)
        return True

    def stats(self) -> dict:
        return {**self.counters, "live_envs": len(self.envs), "threads": self.pool.live_threads}

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
        fut = self.pool.submit(fn, *args)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                value = await asyncio.wrap_future(fut)
        except TimeoutError:
            self.pool.abandon(fut)
            self.counters["timeouts"] += 1
            return self._drop(key, f"{what} timed out after {timeout:g}s (env hung; dropped)")
        except asyncio.CancelledError:
            self.pool.abandon(fut)  # the caller went away; the env state is unknown now
            self._drop(key, f"{what} cancelled")
            raise
        except Exception as e:  # noqa: BLE001 - an env's error is data, not a host crash
            return self._drop(key, f"{what} raised {_describe(e)}")
        return {"ok": True, "value": value, "seconds": time.perf_counter() - started}

    def _drop(self, key: str | None, error: str) -> dict:
        self.counters["failed"] += 1
        env = self.envs.pop(key, None) if key is not None else None
        if env is not None:
            self.counters["closed"] += 1
            self.pool.submit(_quiet_close, env)
        return {"ok": False, "error": error}


def _quiet_close(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a broken env is best effort
        pass
