"""A complete execution plan: task groups → GPUs, parallel degrees, estimated step time and memory.

``Plan.to_json()`` is the planner's output contract (consumed by :mod:`rollart.distributed.plan_placements`)::

    {"groups": [{"tasks": [...], "role": "generate"|"train"|"inference", "devices": [{"id", "type",
                 "node", "zone", "region"}], "tp", "pp", "dp", "parallel": {task: {...}}}],
     "est_step_time_s": float, "per_device_memory_gb": {device_id: float}, ...}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .costmodel import INF
from .groupplan import GroupPlan, plan_group
from .stepcost import StepEstimate, end_to_end
from .taskcost import ParallelConfig, PlanContext
from .topology import Topology

def group_role(kinds: Sequence[str]) -> str:
    """The ResourceManager role of a GPU group: ``generate`` if it hosts generation, else ``train`` if it
    trains, else ``inference`` (rollart.distributed.hardware.ROLE_NEEDS vocabulary)."""
    return "generate" if "gen" in kinds else "train" if "train" in kinds else "inference"


class PlanningError(RuntimeError):
    """No plan satisfies the constraints; the message says which and what to change."""


@dataclass
class Plan:
    groups: list[GroupPlan]
    step: StepEstimate
    ctx: PlanContext
    planner: str = "sha-ea"
    search_s: float = 0.0
    evaluated: int = 0
    best_found_s: float = 0.0
    """Seconds into the search at which the returned plan's cost was first reached (SHA-EA)."""
    cap_hit: bool = False
    """True when the search's wall-clock cap cut it short (its budget was not spent)."""

    @property
    def step_time(self) -> float:
        return self.step.total

    @property
    def tokens_per_s(self) -> float:
        c = self.ctx.wf.cfg
        return self.ctx.wf.samples * (c.seq_in + c.seq_out) / self.step.total

    def to_json(self) -> dict:
        topo, wf = self.ctx.topo, self.ctx.wf
        groups = []
        for g in self.groups:
            first = next(iter(g.tasks.values()))
            groups.append({
                "tasks": list(g.tasks), "role": group_role([wf.by_name[n].kind for n in g.tasks]),
                "devices": [_device_json(topo, d) for d in g.devices],
                "tp": first.cfg.tp, "pp": first.cfg.pp, "dp": first.cfg.dp,
                "parallel": {n: {"tp": e.cfg.tp, "pp": e.cfg.pp, "dp": e.cfg.dp, "layout": e.cfg.layout,
                                 "layers_per_stage": e.layers, "samples_per_replica": e.samples,
                                 **({"decode_batch": e.dbs} if e.dbs else {}),
                                 "est_time_s": round(e.time, 4)}
                             for n, e in g.tasks.items()},
            })
        return {
            "planner": self.planner, "topology": topo.name, "workflow": wf.describe(),
            "groups": groups,
            "est_step_time_s": round(self.step.total, 4),
            "est_tokens_per_s": round(self.tokens_per_s, 1),
            "breakdown_s": {k: round(v, 4) for k, v in self.step.parts.items()},
            "per_device_memory_gb": {topo.devices[d].id: round(b / 1e9, 2)
                                     for g in self.groups for d, b in sorted(g.memory.items())},
            "search_s": round(self.search_s, 3), "plans_evaluated": self.evaluated,
            "best_found_s": round(self.best_found_s, 3), "search_cap_hit": self.cap_hit,
        }

    def table(self) -> str:
        topo = self.ctx.topo
        lines = [f"{self.planner} plan for {self.ctx.wf.describe()}", f"on {topo.summary()}",
                 f"{'group':<6}{'task':<14}{'GPUs':<28}{'tp':>3}{'pp':>3}{'dp':>4}{'layers/stage':>16}"
                 f"{'time s':>10}{'max mem GB':>12}"]
        for gi, g in enumerate(self.groups):
            where = _gpu_summary(topo, g.devices)
            mem = max(g.memory.values()) / 1e9
            for n, e in g.tasks.items():
                layers = ",".join(map(str, e.layers)) if len(e.layers) <= 4 else f"{min(e.layers)}..{max(e.layers)}"
                lines.append(f"{gi:<6}{n:<14}{where:<28}{e.cfg.tp:>3}{e.cfg.pp:>3}{e.cfg.dp:>4}"
                             f"{layers:>16}{e.time:>10.2f}{mem:>12.1f}")
                where = ""
        parts = ", ".join(f"{k} {v:.2f}s" for k, v in self.step.parts.items())
        lines.append(f"estimated step time {self.step.total:.2f} s ({parts}); "
                     f"{self.tokens_per_s:,.0f} tokens/s; searched {self.search_s:.1f} s, "
                     f"{self.evaluated} plans")
        return "\n".join(lines)


def _device_json(topo: Topology, d: int) -> dict:
    dev = topo.devices[d]
    return {"id": dev.id, "type": dev.spec.name, "node": dev.node, "zone": dev.zone, "region": dev.region}


def _gpu_summary(topo: Topology, devices: Sequence[int]) -> str:
    counts: dict[str, int] = {}
    regions = set()
    for d in devices:
        dev = topo.devices[d]
        counts[dev.spec.name] = counts.get(dev.spec.name, 0) + 1
        regions.add(dev.region)
    s = "+".join(f"{v}x{k}" for k, v in counts.items())
    return s + (f" ({len(regions)} regions)" if len(regions) > 1 else f" ({next(iter(regions))})")


def locality_order(topo: Topology, devices: Sequence[int]) -> list[int]:
    """Level-5 canonical order: by region, zone, node, GPU type, index."""
    def key(d: int):
        dev = topo.devices[d]
        return (dev.region, dev.zone, dev.node, dev.spec.name, d)
    return sorted(devices, key=key)


def devices_from_counts(topo: Topology, counts: np.ndarray) -> list[list[int]]:
    """Expand a (groups × classes) count matrix into concrete, locality-ordered device lists."""
    taken = [0] * len(topo.classes)
    out = []
    for row in counts:
        devs = []
        for c, k in enumerate(row):
            k = int(k)
            devs.extend(topo.classes[c][taken[c]:taken[c] + k])
            taken[c] += k
        out.append(locality_order(topo, devs))
    return out


def evaluate_groups(task_groups: Sequence[Sequence[str]], device_groups: Sequence[Sequence[int]],
                    ctx: PlanContext, fixed: dict[str, ParallelConfig] | None = None,
                    planner: str = "sha-ea") -> Plan | None:
    """Plan every group and the end-to-end step; None if any group violates memory (C3)."""
    groups = []
    for names, devs in zip(task_groups, device_groups):
        if not devs:
            return None
        sub = {n: fixed[n] for n in names if fixed and n in fixed} if fixed else None
        g = plan_group(names, devs, ctx, sub)
        if not g.feasible:
            return None
        groups.append(g)
    step = end_to_end(groups, ctx.wf)
    if step.total == INF:
        return None
    return Plan(groups, step, ctx, planner=planner)
