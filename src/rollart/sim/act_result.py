"""SIMULATED: what an action-level simulation measures: each action's completion time (ACT: queueing plus
execution), the execution and GPU-restore seconds behind it, and the real decision latency of the scheduler.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional


@dataclasses.dataclass
class SimResult:
    traj_act: list[float]  # per trajectory: summed ACT of its actions
    acts: dict[str, list[float]]  # per action kind: ACTs
    exec_seconds: float = 0.0  # summed execution time of all actions
    restore_seconds: float = 0.0  # part of exec_seconds spent restoring GPU services (EOE)
    aborted: bool = False  # stopped early: the mean ACT was already known to exceed ``act_limit``
    decision_seconds: float = 0.0  # summed real decision latency
    decisions: int = 0
    makespan: float = 0.0
    units: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    exec_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)  # summed execution per kind

    def queued(self, kind: str) -> float:
        """Summed queueing time (ACT minus execution) of the actions of ``kind``."""
        return sum(self.acts.get(kind, [])) - self.exec_by_kind.get(kind, 0.0)

    def mean(self, kind: Optional[str] = None) -> float:
        xs = self.traj_act if kind is None else self.acts.get(kind, [])
        return sum(xs) / len(xs) if xs else math.nan

    @property
    def overhead_pct(self) -> float:
        return 100.0 * self.decision_seconds / self.exec_seconds if self.exec_seconds else 0.0


def record_action(res: SimResult, kind: str, act: float, exec_s: float, units: int) -> None:
    res.acts.setdefault(kind, []).append(act)
    res.units.setdefault(kind, []).append(units)
    res.exec_seconds += exec_s
    res.exec_by_kind[kind] = res.exec_by_kind.get(kind, 0.0) + exec_s
