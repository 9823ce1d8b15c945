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
import collections
import gc
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

    def __post_init__(self) -> None:
        for name in ("create_timeout_s", "reset_timeout_s", "step_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.gil_switch_interval_s < 0:
            raise ValueError(f"gil_switch_interval_s must be >= 0, got {self.gil_switch_interval_s}")
        if self.max_threads < 1 or self.max_envs < 1 or not 0 <= self.min_threads <= self.max_threads:
            raise ValueError("need max_threads >= 1, max_envs >= 1 and 0 <= min_threads <= max_threads")


class _Mailbox:
    """Finished pool calls on their way back to one event loop, handed over in batches.

    The first completion after a drain schedules one drain (one self-pipe write wakes the loop);
    completions arriving before that drain runs only queue. When many envs finish together (a
    lockstep turn) that is one wake-up and one loop callback for the burst instead of one each.
    """
    __slots__ = ("loop", "items", "scheduled", "on_done")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_done: Callable[["_Job"], None]):
        self.loop = loop
        self.items: collections.deque = collections.deque()
        self.scheduled = threading.Lock()
        """Held while a drain is scheduled: taken without blocking, so no thread ever waits on it."""
        self.on_done = on_done

    def post(self, job: "_Job", ok: bool, value: Any) -> None:
        """From a pool thread: ``job`` finished (or was skipped); resolve its future on the loop."""
        self.items.append((job, ok, value))  # before testing `scheduled`: see drain()
        if not self.scheduled.acquire(blocking=False):
            return  # a drain is pending; it releases `scheduled` before popping, so it takes this
        try:
            self.loop.call_soon_threadsafe(self.drain)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def drain(self) -> None:
        """On the loop: settle every queued job. ``scheduled`` is released before popping, so an item
        appended after this drain found the queue empty schedules a drain of its own."""
        self.scheduled.release()
        items, on_done = self.items, self.on_done
        while items:
            job, ok, value = items.popleft()
            on_done(job)
            future = job.future
            if future is not None and not future.done():
                future.set_result(value) if ok else future.set_exception(value)


class _Job:
    """One call queued on the pool; its outcome comes back through ``mailbox`` (None: nobody waits)."""
    __slots__ = ("fn", "args", "mailbox", "future", "started", "abandoned", "counted", "deadline")

    def __init__(self, fn: Callable, args: tuple, mailbox: _Mailbox | None, wait: bool):
        self.fn, self.args, self.mailbox = fn, args, mailbox
        self.future = mailbox.loop.create_future() if wait and mailbox is not None else None
        self.started = self.abandoned = False
        self.counted = mailbox is not None
        """Counts as outstanding in the pool until its completion is drained (or it is abandoned)."""
        self.deadline = 0.0


class _Expired(Exception):
    """A call outlived its timeout (raised into the awaiting coroutine by the watchdog)."""


class _Watchdog:
    """Call timeouts of one host with a single loop timer instead of one timer per call.

    ``watch(job)`` records the job (its ``deadline`` in loop time); ``forget(job)`` when it finished.
    One timer sits at the earliest deadline known when it was set; when it fires it fails every
    overdue call with :class:`_Expired` and re-arms at the earliest remaining deadline. A call times
    out at its deadline exactly as with its own timer; the per-call cost is a dict insert and delete.
    """

    def __init__(self) -> None:
        self.jobs: dict[_Job, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._at = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, job: _Job, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:  # a host used again under a new event loop (another asyncio.run)
            self.jobs = {j: None for j in self.jobs if j.mailbox.loop is loop}
            self._timer, self._at, self._loop = None, float("inf"), loop
        self.jobs[job] = None
        if job.deadline < self._at:
            self._arm(loop, job.deadline)

    def forget(self, job: _Job) -> None:
        self.jobs.pop(job, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._at = when
        self._timer = loop.call_at(when, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer, self._at = None, float("inf")
        now = loop.time() + 1e-6  # the loop may run a timer up to its clock resolution early
        nearest = float("inf")
        for job in list(self.jobs):
            if job.deadline <= now:
                del self.jobs[job]
                if not job.future.done():
                    job.future.set_exception(_Expired())
            elif job.deadline < nearest:
                nearest = job.deadline
        if nearest < float("inf"):
            self._arm(loop, nearest)


class DaemonThreadPool:
    """A growing pool of daemon threads running blocking env calls for an event loop.

    Jobs go through one shared queue; results come back in batches through a per-loop
    :class:`_Mailbox`. The pool's counters are only touched on the loop's thread (no lock shared
    with the workers on the hot path: a contended lock costs two context switches per call when
    many env threads wake together). ``abandon(job)`` writes off a thread stuck in a call: it stops
    counting against ``max_workers`` (a replacement can start) and exits if its call ever returns.
    Daemon threads never block exit.
    """

    def __init__(self, max_workers: int, name: str = "env"):
        self.max_workers = max_workers
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._live = 0
        """Threads counted against max_workers (loop thread only)."""
        self._outstanding = 0
        """Submitted jobs whose completion has not been drained yet, abandoned ones excluded. Over
        all loops, and a closed loop's calls never drain: counting too many only starts a spare thread,
        counting too few would queue a call behind a thread that is still busy."""
        self._ids = itertools.count()
        self._mailboxes: dict[asyncio.AbstractEventLoop, _Mailbox] = {}

    def prestart(self, n: int) -> None:
        """Start idle threads until ``n`` are live."""
        while self._live < min(n, self.max_workers):
            self._live += 1
            self._spawn()

    def run(self, fn: Callable, *args: Any) -> _Job:
        """Queue ``fn(*args)``; await ``job.future`` (an asyncio future of the running loop)."""
        return self._submit(_Job(fn, args, self._mailbox(asyncio.get_running_loop()), wait=True))

    def fire(self, fn: Callable, *args: Any) -> None:
        """Queue ``fn(*args)`` and forget it (best-effort cleanup such as env.close)."""
        try:
            mailbox = self._mailbox(asyncio.get_running_loop())
        except RuntimeError:  # no loop: nothing will drain a completion, so it is not counted
            mailbox = None
        self._submit(_Job(fn, args, mailbox, wait=False))

    def abandon(self, job: _Job) -> None:
        """Write off the thread running ``job`` (a hung call), if it started; from the loop thread."""
        if job.started and not job.abandoned:
            job.abandoned = True
            self._live -= 1
            self._settle(job)

    @property
    def live_threads(self) -> int:
        return self._live

    # ------------------------------------------------------------------ internals
    def _mailbox(self, loop: asyncio.AbstractEventLoop) -> _Mailbox:
        mailbox = self._mailboxes.get(loop)
        if mailbox is None:
            for old in [lp for lp in self._mailboxes if lp.is_closed()]:
                del self._mailboxes[old]  # loops of earlier asyncio.run()s
            mailbox = self._mailboxes[loop] = _Mailbox(loop, self._settle)
        return mailbox

    def _settle(self, job: _Job) -> None:
        if job.counted:
            job.counted = False
            self._outstanding -= 1

    def _submit(self, job: _Job) -> _Job:
        if job.counted:
            self._outstanding += 1
        self._queue.put(job)
        if self._outstanding > self._live and self._live < self.max_workers:
            self._live += 1  # every live thread may be busy: start one more
            self._spawn()
        return job

    def _spawn(self) -> None:
        threading.Thread(target=self._work, name=f"{self.name}-{next(self._ids)}", daemon=True).start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            job = get()
            # `started` is set before the cancellation check: abandon() (after the future is done)
            # then either sees started and writes this thread off, or this thread sees the future done
            job.started = True
            if job.future is not None and job.future.done():  # cancelled or timed out while queued
                job.started, ok, value = False, False, None
            else:
                try:
                    ok, value = True, job.fn(*job.args)
                except BaseException as e:  # noqa: BLE001 - delivered to the awaiting coroutine
                    ok, value = False, e
            if job.mailbox is not None:
                job.mailbox.post(job, ok, value)
            if job.abandoned:
                return  # written off while stuck; the pool already replaced this thread


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
        if self.config.gc_freeze:
            gc.freeze()
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
        result = await self._run(key, "reset", _env_reset, seed, options, timeout=self.config.reset_timeout_s)
        if result["ok"]:
            obs, info = result.pop("value")
            result.update(observation=to_plain(obs), info=to_plain(info))
        return result

    async def step(self, key: str, action: str) -> dict:
        self.counters["steps"] += 1
        result = await self._run(key, "step", _env_step, action, timeout=self.config.step_timeout_s)
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
        """Create ``count`` envs ahead of time into the reuse pool (needs reuse_envs), and top the thread
        pool up to max(min_threads, count) threads; returns how many envs were made."""
        if not self.config.reuse_envs:
            raise ValueError("prewarm needs EnvHostConfig(reuse_envs=True)")
        # threads written off for hung or cancelled calls are replaced now, not by the step's first
        # calls (starting a thread blocks the loop until the thread runs)
        self.pool.prestart(max(self.config.min_threads, min(count, self.config.max_threads)))
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


def _env_step(env: Any, action: str) -> Any:
    return env.step(action)


def _quiet_close(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a broken env is best effort
        pass
