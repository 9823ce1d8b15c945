"""The action formulation (ARL-Tangram §4.1): one external invocation as a vector cost.

An *action* is an atomic use of external resources — a tool command, an env step, a reward test run,
a reward-model or judge call, an API call — during which no LLM generation of its trajectory runs.
Its cost is a vector over the managed resource types (``cpu``, ``memory``, ``gpu``, ``gpu_memory``,
``api:<site>``...): a fixed amount for every resource, except on at most one *key* resource, where
the action accepts any unit count from a sorted set (a min..max range or a discrete set such as
1/2/4/8 GPUs). An optional elasticity curve E(m) on the key resource and a profiled single-unit
duration ``t_ori`` give the duration model of Eq. (1): ``duration(m) = t_ori / (E(m) * m)``.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Mapping, Optional, Sequence

_ids = itertools.count()


def amdahl(parallel_fraction: float) -> Callable[[int], float]:
    """E(m) of a job whose ``parallel_fraction`` of single-unit work parallelises perfectly."""
    if not 0.0 <= parallel_fraction <= 1.0:
        raise ValueError(f"parallel_fraction={parallel_fraction}: must be within [0, 1]")

    def efficiency(m: int) -> float:
        speedup = 1.0 / ((1.0 - parallel_fraction) + parallel_fraction / m)
        return speedup / m

    return efficiency


def table(speedups: Mapping[int, float]) -> Callable[[int], float]:
    """E(m) from profiled speedups {units: speedup over one unit}; 0 < speedup <= units."""
    for m, s in speedups.items():
        if not 0 < s <= m + 1e-9:
            raise ValueError(f"profiled speedup {s} at {m} units: must be in (0, {m}]")

    def efficiency(m: int) -> float:
        if m not in speedups:
            raise KeyError(f"no profiled speedup for {m} units; profiled: {sorted(speedups)}")
        return speedups[m] / m

    return efficiency


@dataclasses.dataclass(eq=False)
class Action:
    """One external invocation submitted to the action scheduler."""

    cost: dict[str, float]
    """Fixed demand per resource type, e.g. {"cpu": 1, "memory": 2.0}. For the key resource this
    entry is ignored; its demand is one of ``units``."""
    key: Optional[str] = None
    """The key elasticity resource (at most one, §4.1); None for a fixed-size action."""
    units: tuple[int, ...] = ()
    """Allowed unit counts on ``key``, e.g. range(1, 33) for a test run or (1, 2, 4, 8) GPUs."""
    elasticity: Optional[Callable[[int], float]] = None
    """E(m) in (0, 1] on ``key``; None means elasticity unknown (scheduled at minimum units)."""
    t_ori: Optional[float] = None
    """Profiled execution duration with one unit of ``key`` (seconds); None when not profiled."""
    kind: str = "action"
    """Label used for historical-average durations (e.g. "tool", "reward_test", "judge")."""
    trajectory: Any = None
    """The trajectory this action belongs to (CPU manager keeps its node between actions)."""
    service: Optional[str] = None
    """GPU service (reward model, judge, teacher) the action calls; the GPU manager caches it."""
    payload: Any = None
    """What to execute; interpreted by the resource manager (command, service call, ...)."""
    id: int = dataclasses.field(default_factory=lambda: next(_ids))
    submit_time: float = 0.0
    """Set by the scheduler when the action enters the queue."""

    def __post_init__(self) -> None:
        for name, amount in self.cost.items():
            if amount < 0:
                raise ValueError(f"action {self.kind}: negative cost {amount} for resource {name!r}")
        if self.key is not None:
            if not self.units:
                raise ValueError(f"action {self.kind}: key resource {self.key!r} needs units "
                                 "(e.g. units=(1, 2, 4, 8))")
            self.units = tuple(sorted(set(int(u) for u in self.units)))
            if self.units[0] < 1:
                raise ValueError(f"action {self.kind}: units must be >= 1, got {self.units}")
        elif self.units:
            raise ValueError(f"action {self.kind}: units={self.units} given without a key resource")
        if self.t_ori is not None and self.t_ori < 0:
            raise ValueError(f"action {self.kind}: t_ori must be >= 0, got {self.t_ori}")

    # -- demand ---------------------------------------------------------------------------------
    @property
    def min_units(self) -> int:
        return self.units[0] if self.key is not None else 0

    def demand(self, key_units: Optional[int] = None) -> dict[str, float]:
        """The full cost vector with ``key_units`` (default: the minimum) on the key resource."""
        vec = dict(self.cost)
        if self.key is not None:
            vec[self.key] = float(self.min_units if key_units is None else key_units)
        return vec

    @property
    def scalable(self) -> bool:
        """True when the scheduler may scale this action (elasticity and duration known, >1 choice)."""
        return (self.key is not None and self.elasticity is not None and self.t_ori is not None
                and len(self.units) > 1)

    # -- duration model (Eq. 1) -----------------------------------------------------------------
    def duration(self, m: Optional[int] = None, default: float = 0.0) -> float:
        """Predicted execution time with ``m`` key units (minimum if None)."""
        if self.t_ori is None:
            return default
        if self.key is None:
            return self.t_ori
        m = self.min_units if m is None else m
        e = self.elasticity(m) if self.elasticity is not None else 1.0 / m
        if not 0.0 < e <= 1.0 + 1e-9:
            raise ValueError(f"action {self.kind}: elasticity E({m})={e} outside (0, 1]")
        return self.t_ori / (e * m)


def check_resources(actions: Sequence[Action], known: Sequence[str]) -> None:
    """Raise a clear error if an action names a resource the scheduler does not manage."""
    known_set = set(known)
    for a in actions:
        unknown = set(a.demand()) - known_set
        if unknown:
            raise ValueError(f"action {a.kind}#{a.id} asks for unmanaged resource(s) {sorted(unknown)}; "
                             f"managed: {sorted(known_set)}")
