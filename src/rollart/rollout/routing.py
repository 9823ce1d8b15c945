"""Which worker serves a request: hardware affinity, fallback classes, sticky turns, least-loaded choice.

Plain logic over the proxy's ``WorkerSlot`` table (no I/O), in the order ``LLMProxy`` applies it:

1) ``resolve_task``: the task -> a hardware class through ``hw_affinity`` ('default' catches others), or
   through the online profiler's mapping in force with ``hw_affinity='auto'``;
2) ``group``: the live workers of that class, else of the first compatible class that has any;
3) ``pick``: the trajectory's sticky worker if it is in that group (its prefix cache holds the history),
   else the healthy one with the fewest outstanding tokens -- or, with ``spill_ratio``, the least-loaded
   worker of a fallback class when the group's best is more than ``spill_ratio`` times as loaded;
4) ``remember`` after a success makes that worker the trajectory's sticky one.
"""
from __future__ import annotations

import logging

from rollart.config import ConfigError
from rollart.rollout.profiler import HardwareProfiler
from rollart.rollout.proxy_config import AUTO, NoWorkerError, ProxyConfig, UnknownTaskError
from rollart.rollout.worker_slot import WorkerSlot

log = logging.getLogger(__name__)


def check_hw_affinity(affinity: dict | str, worker_classes: list[str], tasks: list[str]) -> None:
    """The one check of ``proxy.hw_affinity`` against a run (before anything starts): every class it names has a
    worker, and every task is routed (by name or by a 'default' entry); an entry naming no task is reported.
    (Its form, a mapping or 'auto', is ProxyConfig's own check.)"""
    if affinity == AUTO or not affinity:
        return
    present = sorted(set(worker_classes))
    for task, hw in affinity.items():
        if hw not in present:
            raise ConfigError(f"proxy.hw_affinity[{task!r}]={hw!r}: no inference worker has that class (workers: "
                              f"{worker_classes}); map {task!r} to one of {present}, or add {hw!r} to hw_classes "
                              "(with enough num_inference_workers)")
    names = list(dict.fromkeys(tasks))
    missing = [n for n in names if n not in affinity]
    if missing and "default" not in affinity:
        raise ConfigError(f"proxy.hw_affinity={affinity} routes no worker for task(s) {missing}: add them, or a "
                          "'default' entry, to proxy.hw_affinity")
    unused = [k for k in affinity if k != "default" and k not in names]
    if unused:
        log.warning("proxy.hw_affinity entries %s name no task of this run (tasks: %s); they are unused", unused, names)


class Router:
    """Routing decisions for one proxy; ``workers`` and ``counters`` are the proxy's own (shared) dicts."""

    def __init__(self, workers: dict[str, WorkerSlot], cfg: ProxyConfig, counters: dict,
                 profiler: HardwareProfiler | None = None) -> None:
        self.workers = workers
        self.cfg = cfg
        self.counters = counters
        self.profiler = profiler
        """Set with hw_affinity='auto': its mapping in force replaces cfg.hw_affinity."""
        self.sticky: dict[tuple[str, str], str] = {}
        """(trajectory id, PD phase) -> worker name, least recently served first."""

    def resolve_task(self, task: str) -> str | None:
        """The hardware class a task maps to (None: any class). Unknown task -> UnknownTaskError."""
        if self.profiler is not None:
            return self.profiler.mapping.get(task)  # not mapped yet: any worker (that is how it gets measured)
        aff = self.cfg.hw_affinity
        if not aff:
            return None
        if task in aff:
            return aff[task]
        if "default" in aff:
            return aff["default"]
        raise UnknownTaskError(f"unknown task {task!r}: hw_affinity maps {sorted(aff)}; add it there "
                               "or a 'default' entry")

    def group(self, hw_class: str | None) -> list[WorkerSlot]:
        """Live workers that may serve ``hw_class``: its own, else the first fallback class that has any."""
        live = [w for w in self.workers.values() if not w.dead]
        if hw_class is None:
            return live
        own = [w for w in live if w.hw_class == hw_class]
        if own:
            return own
        for alt in self.fallback_order(hw_class, sorted({w.hw_class for w in live} - {hw_class})):
            alts = [w for w in live if w.hw_class == alt]
            if alts:
                self.counters["fallbacks"] += 1
                return alts
        return []

    def fallback_order(self, hw_class: str, present: list[str]) -> list[str]:
        """Classes that may stand in for ``hw_class``, best first: cfg.fallback's list, else the compatible ones."""
        if hw_class in self.cfg.fallback:
            return list(self.cfg.fallback[hw_class])
        return compatible_classes(hw_class, present)

    def spill_group(self, hw_class: str | None, group: list[WorkerSlot]) -> list[WorkerSlot]:
        """Live workers of the fallback classes of ``hw_class`` that ``group`` may overflow to (spill_ratio)."""
        if not self.cfg.spill_ratio or hw_class is None:
            return []
        classes = {w.hw_class for w in group}
        live = [w for w in self.workers.values() if not w.dead and w.hw_class not in classes]
        allowed = set(self.fallback_order(hw_class, sorted({w.hw_class for w in live})))
        return [w for w in live if w.hw_class in allowed]

    def pick(self, trajectory_id: str, hw_class: str | None, phase: str = "") -> WorkerSlot:
        """The worker for this trajectory's next request of ``phase`` ('' colocated, 'p'/'d' for PD)."""
        candidates = self.group(hw_class)
        if not candidates:
            raise NoWorkerError(f"no live inference worker for hardware class {hw_class!r} or its fallbacks "
                                f"{self.cfg.fallback.get(hw_class, 'any')}; workers: "
                                f"{ {w.name: _state(w) for w in self.workers.values()} }")
        overflow = self.spill_group(hw_class, candidates)
        if self.cfg.sticky:
            name = self.sticky.get((trajectory_id, phase))
            slot = self.workers.get(name) if name else None
            if slot is not None and (slot in candidates or slot in overflow):
                return slot
        best = _least_loaded(candidates)
        if overflow:
            alt = _least_loaded(overflow)
            if best.outstanding > self.cfg.spill_ratio * alt.outstanding:
                self.counters["spills"] += 1
                return alt
        return best

    def remember(self, trajectory_id: str, phase: str, slot: WorkerSlot) -> None:
        """``slot`` served this trajectory's last request of ``phase``: send its next one there too."""
        if not self.cfg.sticky:
            return
        self.sticky.pop((trajectory_id, phase), None)
        self.sticky[(trajectory_id, phase)] = slot.name  # most recent last
        while len(self.sticky) > self.cfg.max_sticky:
            del self.sticky[next(iter(self.sticky))]  # forget the least recently served

    def forget(self, trajectory_id: str) -> None:
        """Drop a finished trajectory's sticky workers (every phase)."""
        for key in [k for k in self.sticky if k[0] == trajectory_id]:
            del self.sticky[key]


def _least_loaded(slots: list[WorkerSlot]) -> WorkerSlot:
    """The healthy worker (any, if none is healthy) with the fewest outstanding tokens, then fewest routed."""
    healthy = [w for w in slots if w.healthy] or slots
    return min(healthy, key=lambda w: (w.outstanding, w.routed))


def compatible_classes(hw_class: str, present: list[str]) -> list[str]:
    """Stand-ins for a class: the ResourceManager's compatibility order for known hardware classes
    (GPUs of the same strength first), otherwise any other class present."""
    try:
        from rollart.distributed.hardware import fallbacks
        return fallbacks(hw_class, present)
    except (ImportError, KeyError):
        return present


def _state(slot: WorkerSlot) -> str:
    """A worker as a NoWorkerError names it: its class, or dead and why (the runtime's reason, when it has one)."""
    if not slot.dead:
        return slot.hw_class
    return f"dead: {slot.handle.dead_reason}" if slot.handle.dead_reason else "dead"
