"""RunActions: the action scheduler of one training run (``actions.enabled=true``).

Env steps are actions on the ``cpu`` pool (:class:`rollart.actions.cpu.CorePool` of ``actions.cores``): an
env step waits until the scheduler grants it ``actions.step_cores`` concrete cores, and the env host pins
every process the step starts (sandbox commands, test runs) to them (:mod:`rollart.actions.placement`).
Reward-endpoint calls are actions on the ``api:reward`` pool: a sliding-window quota
(:class:`rollart.actions.basic.QuotaPool`) when ``actions.reward_calls_per_period`` is set, else a
concurrency cap. :meth:`RunActions.metrics` reports the scheduler's decisions for tensorboard.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Awaitable, Callable, TypeVar

from rollart.actions.action import Action
from rollart.actions.basic import CountPool, QuotaPool
from rollart.actions.config import ActionsConfig
from rollart.actions.cpu import CorePool
from rollart.actions.runtime import ActionScheduler

T = TypeVar("T")


class RunActions:
    """One ActionScheduler over the run's CPU cores and the reward endpoint's quota."""

    def __init__(self, cfg: ActionsConfig, reward_concurrency: int = 64):
        self.cfg = cfg
        quota = (QuotaPool("api:reward", cfg.reward_calls_per_period, cfg.reward_period_s)
                 if cfg.reward_calls_per_period else CountPool("api:reward", reward_concurrency))
        self.pools = {"cpu": CorePool("cpu", cfg.usable_cores()), "api:reward": quota}
        self.scheduler = ActionScheduler(self.pools)
        self._reported = 0

    async def env_step(self, step: Callable[[tuple[int, ...]], Awaitable[T]], trajectory: Any = None) -> T:
        """Run ``await step(cores)`` once the scheduler grants this env step its cores."""
        async def payload(grant: dict) -> T:
            return await step(grant["cpu"])

        return await self.scheduler.submit(Action({}, key="cpu", units=(self.cfg.step_cores,), kind="env_step",
                                                  trajectory=trajectory, payload=payload))

    async def reward_call(self, call: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await call(*args)`` (a reward-endpoint call) once the endpoint's quota admits it."""
        async def payload(grant: dict) -> T:
            return await call(*args)

        return await self.scheduler.submit(Action({"api:reward": 1}, kind="reward", payload=payload))

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
        return out

    async def close(self) -> None:
        await self.scheduler.close()
