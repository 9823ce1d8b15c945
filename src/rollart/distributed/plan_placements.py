"""Turn a placement plan (``Plan.to_json()``, written by ``python -m rollart.planner``) into per-worker placements a
resource manager can bind: how a plan reaches a run (``placement=plan.json``) without the planner's search.

One worker per data-parallel replica of each task: it owns the tp·pp GPUs of that replica, listed in
stage order then shard order (the planner's tasklet mapping), and carries its share of the batch and
its layer split so the trainer/engine can be configured to match the estimate.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WORKER_ROLE = {"actor_gen": "rollout", "reward_inf": "reward", "ref_inf": "reference",
               "critic_inf": "critic", "actor_train": "actor_train", "critic_train": "critic_train"}
"""Planner task → rollart worker role."""


class PlacementError(ValueError):
    """The plan JSON is malformed; the message names the group/task and the field."""


@dataclass
class WorkerPlacement:
    task: str
    role: str
    replica: int
    devices: list[dict[str, Any]]
    """GPUs of this replica (id, type, node, zone, region), stage-major then shard."""
    tp: int
    pp: int
    samples: int
    """Sequences per step this replica handles (data-level load balancing)."""
    layers_per_stage: list[int] = field(default_factory=list)

    @property
    def device_ids(self) -> list[str]:
        return [d["id"] for d in self.devices]

    @property
    def gpu_type(self) -> str:
        types = sorted({d["type"] for d in self.devices})
        return types[0] if len(types) == 1 else "+".join(types)


def _position(layout: str, tp: int, pp: int, dp: int, i: int, j: int, k: int) -> int:
    return (i * pp + j) * tp + k if layout == "replica" else (j * dp + i) * tp + k


def worker_placements(plan: dict) -> list[WorkerPlacement]:
    """Every worker of the plan with the GPUs it gets; raises PlacementError on a malformed plan."""
    out = []
    seen: dict[str, str] = {}
    for gi, group in enumerate(plan.get("groups", [])):
        devices = group.get("devices")
        parallel = group.get("parallel")
        if not devices or not isinstance(parallel, dict):
            raise PlacementError(f"group {gi}: needs 'devices' and 'parallel' (from Plan.to_json())")
        for task in group.get("tasks", []):
            p = parallel.get(task)
            if p is None:
                raise PlacementError(f"group {gi}: task {task!r} has no entry under 'parallel'")
            tp, pp, dp = int(p["tp"]), int(p["pp"]), int(p["dp"])
            if tp * pp * dp != len(devices):
                raise PlacementError(f"group {gi} task {task}: tp*pp*dp={tp * pp * dp} but "
                                     f"{len(devices)} devices")
            layout = p.get("layout", "replica")
            samples = p.get("samples_per_replica") or [0] * dp
            for i in range(dp):
                devs = [devices[_position(layout, tp, pp, dp, i, j, k)] for j in range(pp) for k in range(tp)]
                out.append(WorkerPlacement(task, WORKER_ROLE.get(task, task), i, devs, tp, pp,
                                           int(samples[i]), list(p.get("layers_per_stage", []))))
        for d in devices:
            if d["id"] in seen and seen[d["id"]] != str(gi):
                raise PlacementError(f"device {d['id']!r} appears in groups {seen[d['id']]} and {gi}")
            seen[d["id"]] = str(gi)
    return out


def resource_pools(plan: dict) -> dict[str, list[str]]:
    """GPU ids per type across the plan — the shape a resource manager's pool spec takes."""
    pools: dict[str, list[str]] = {}
    for group in plan.get("groups", []):
        for d in group["devices"]:
            pools.setdefault(d["type"], [])
            if d["id"] not in pools[d["type"]]:
                pools[d["type"]].append(d["id"])
    return pools


def place_on_resource_manager(plan: dict, rm=None):
    """Bind every GPU group of ``plan`` through a ``rollart.distributed.ResourceManager``.

    Without ``rm``, one is built with ``ResourceManager.from_plan`` (pools = the plan's own device ids per
    GPU type, role defaults from the groups' roles). Groups are
    allocated in plan order, one ``allocate(role, hw=type, count=k)`` per GPU type in the group, so the
    manager hands out exactly the planned GPUs; a different binding (another owner took them, or the
    manager fell back to another type) is an error rather than a silently different placement. Tasks of
    one group share its bindings (they are colocated). Returns ``(rm, bindings_per_group, workers)``.
    """
    from rollart.distributed.resources import ResourceManager

    workers = worker_placements(plan)
    if rm is None:
        rm = ResourceManager.from_plan(plan)
    bound: list[list] = []
    for gi, group in enumerate(plan["groups"]):
        by_type: dict[str, list[str]] = {}
        for d in group["devices"]:
            by_type.setdefault(d["type"], []).append(d["id"])
        owner = f"group{gi}:" + "+".join(group["tasks"])
        role = group.get("role", "train")
        mine = []
        for hw, ids in by_type.items():
            b = rm.allocate(role, hw=hw, count=len(ids), owner=owner)
            if b.hw_class != hw or list(b.devices) != ids:
                raise PlacementError(f"{owner}: the resource manager bound {b.hw_class} {list(b.devices)} "
                                     f"instead of the planned {hw} {ids} ({b.note or 'devices already taken'})")
            mine.append(b)
        bound.append(mine)
    return rm, bound, workers
