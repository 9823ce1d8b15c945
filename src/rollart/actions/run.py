"""RunActions: the action scheduler of one training run (``actions.enabled=true``).

Env steps are actions on the ``cpu`` pool (:class:`rollart.actions.cpu.CorePool` of ``actions.cores``): an
env step waits until the scheduler grants it ``actions.step_cores`` concrete cores, and the env host pins
every process the step starts (sandbox commands, test runs) to them (:mod:`rollart.cpus`).
A step that runs a test suite splittable over several cores (``TaskSpec.step_action`` says so: kind
``test_run``, the suite's core cap) is elastic: it may take 1..cap cores, and Algorithm 1 chooses how many
from the profiled speed-up curve ``actions.test_speedup`` and the run's measured single-core duration.
Granted cores are also capped by a cgroup CPU quota where one is writable (:mod:`rollart.cpus`).
Model-based reward calls (``reward.judges``) are actions on the ``gpu`` pool of a
:class:`rollart.actions.services.ServiceManager`: the judge is restored from its disk copy if it is not
resident, evicting others to stay within ``actions.service_memory_mb``.
Reward-endpoint calls are actions on the ``api:reward`` pool: a sliding-window quota
(:class:`rollart.actions.basic.QuotaPool`) when ``actions.reward_calls_per_period`` is set, else a
concurrency cap. :meth:`RunActions.metrics` reports the scheduler's decisions for tensorboard.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Awaitable, Callable, Optional, TypeVar

import asyncio
import logging
import time

from rollart.actions.action import Action, table
from rollart.actions.basic import CountPool, QuotaPool
from rollart.actions.config import ActionsConfig
from rollart.actions.cpu import CorePool
from rollart.cpus import cpu_limit, cpu_limit_line
from rollart.actions.runtime import ActionScheduler
from rollart.actions.elastic import Record

T = TypeVar("T")
log = logging.getLogger(__name__)


class RunActions:
    """One ActionScheduler over the run's CPU cores and the reward endpoint's quota."""

    def __init__(self, cfg: ActionsConfig, reward_concurrency: int = 64, services: Any = None):
        """``services``: a :class:`rollart.actions.services.ServiceManager` of the run's model services."""
        self.cfg = cfg
        quota = (QuotaPool("api:reward", cfg.reward_calls_per_period, cfg.reward_period_s)
                 if cfg.reward_calls_per_period else CountPool("api:reward", reward_concurrency))
        self.pools = {"cpu": CorePool("cpu", cfg.usable_cores()), "api:reward": quota}
        self.services = services
        if services is not None:
            self.pools["gpu"] = services.pool
        self.scheduler = ActionScheduler(self.pools)
        self._reported = 0
        self.single_core_s: dict[str, tuple[float, int]] = {}  # kind -> (mean single-core-equivalent s, n)
        print(cpu_limit_line(cpu_limit()), flush=True)

    def _shape(self, kind: str, max_units: Optional[int]) -> dict:
        """Key resource, units, elasticity and t_ori of a step of ``kind`` that may use up to ``max_units``
        cores (None: actions.step_cores; 0: it starts no process, so it holds no core)."""
        if max_units is None:
            return {"key": "cpu", "units": (self.cfg.step_cores,)}
        if max_units == 0:
            return {}
        cap = min(max_units, len(self.cfg.test_speedup), self.pools["cpu"].capacity)
        if kind != "test_run" or cap <= 1:
            return {"key": "cpu", "units": (1,)}
        speedup = {m: self.cfg.test_speedup[m - 1] for m in range(1, cap + 1)}
        t_ori = self.single_core_s.get(kind, (self.cfg.test_t_ori_s, 0))[0]
        return {"key": "cpu", "units": tuple(speedup), "elasticity": table(speedup), "t_ori": t_ori}

    def _measured(self, kind: str, units: int, seconds: float) -> None:
        """Fold one step's duration, as single-core time through the profiled curve, into the kind's mean."""
        speed = self.cfg.test_speedup[units - 1] if units <= len(self.cfg.test_speedup) else float(units)
        mean, n = self.single_core_s.get(kind, (0.0, 0))
        self.single_core_s[kind] = ((mean * n + seconds * speed) / (n + 1), n + 1)

    async def env_step(self, step: Callable[[tuple[int, ...]], Awaitable[T]], trajectory: Any = None,
                       kind: str = "env_step", max_units: Optional[int] = None) -> T:
        """Run ``await step(cores)`` once the scheduler grants this env step its cores. ``kind`` labels the
        step (``env_step``, ``sandbox_command``, ``test_run``, ``file_op``); ``max_units`` > 0: it may use up
        to that many cores (elastic for a test run); 0: it starts no process and holds none (``cores`` is
        empty); None: ``actions.step_cores``."""
        async def payload(grant: dict) -> T:
            t0 = time.monotonic()
            cores = grant.get("cpu", ())
            result = await step(cores)
            if cores:
                self._measured(kind, len(cores), time.monotonic() - t0)
            return result

        shape = self._shape(kind, max_units)
        if not shape:  # an empty cost vector contends for nothing: admitted at once, not queued behind others
            t0 = time.monotonic()
            try:
                return await step(())
            finally:
                self.scheduler.records.append(Record(kind, t0, t0, time.monotonic(), 0))
        return await self.scheduler.submit(Action({}, kind=kind, trajectory=trajectory, payload=payload, **shape))

    async def reward_call(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await call(*args)`` (a reward-endpoint call) once the endpoint's quota admits it."""
        async def payload(grant: dict) -> T:
            return await call(*args)

        return await self.scheduler.submit(Action({"api:reward": 1}, kind="reward", payload=payload))

    async def service_call(self, service: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(module, *args)`` on model service ``service`` (restored if evicted), run off the event loop."""
        if self.services is None:
            raise RuntimeError("service_call needs RunActions(..., services=ServiceManager(...))")

        async def payload(grant: dict) -> T:
            return await asyncio.to_thread(self.services.run, service, grant["gpu"], fn, *args)

        return await self.scheduler.submit(Action({}, key="gpu", units=(1,), service=service,
                                                  kind="reward_model", payload=payload))

    def metrics(self) -> dict[str, float]:
        """The decisions since the last call, per action kind: count, mean queueing time, mean execution time,
        mean units granted; and the totals: evictions, queued now, decision time."""
        records = self.scheduler.records[self._reported:]
        self._reported += len(records)
        by_kind: dict[str, list] = defaultdict(list)
        for r in records:
            by_kind[r.kind].append(r)
        out: dict[str, float] = {}
        for kind, rs in by_kind.items():
            out[f"system/actions/{kind}/count"] = float(len(rs))
            out[f"system/actions/{kind}/queue_s_mean"] = sum(r.start - r.submit for r in rs) / len(rs)
            out[f"system/actions/{kind}/run_s_mean"] = sum(r.end - r.start for r in rs) / len(rs)
            out[f"system/actions/{kind}/units_mean"] = sum(r.units for r in rs) / len(rs)
        core = self.scheduler.core
        out["system/actions/evictions"] = float(core.evictions)
        out["system/actions/queued"] = float(len(core.queue))
        out["system/actions/decide_s_total"] = float(sum(core.decision_latency))
        if self.services is not None:
            cache, sv = self.services.cache, self.services
            out["system/actions/service/restores"] = float(cache.restores)
            out["system/actions/service/evictions"] = float(cache.evictions)
            out["system/actions/service/hits"] = float(cache.hits)
            out["system/actions/service/resident_mb"] = sv.resident_bytes() / 2**20
            if sv.restore_seconds:
                out["system/actions/service/restore_s_mean"] = sum(sv.restore_seconds) / len(sv.restore_seconds)
        return out

    async def close(self) -> None:
        await self.scheduler.close()
        cpu_limit().close()
