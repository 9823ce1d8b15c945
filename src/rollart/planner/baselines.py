"""Baseline planners in the same code, evaluated with the same heterogeneity-aware cost model.

* ``homogeneous_plan`` (verl-like): plans as if every GPU were the same (mean TFLOPS and HBM
  bandwidth, the smallest memory so its plans still fit) and every link the same (one datacenter).
  Sync: all tasks colocated on all GPUs (verl's hybrid engine); async: a rollout pool and a training
  pool, sized under the same assumption, filled with GPUs in id order. No load balancing. Its plan is
  then costed on the real topology, as HetRL does for verl.
* ``two_group_plan`` (StreamRL-like): generation on one pool and every other task on another, each
  pool one GPU type in one region (StreamRL's restriction); the best pool pair under the real model.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from rollart.hardware import HardwareSpec

from .plan import Plan, PlanningError, evaluate_groups
from .taskcost import PlanContext
from .topology import LinkDefaults, Topology, build, replace_spec

_DC = LinkDefaults()


def homogenised(topo: Topology) -> Topology:
    """The topology as a homogeneous planner sees it: one GPU spec, one datacenter network."""
    specs = [d.spec for d in topo.devices]
    uniform = HardwareSpec("uniform", tflops=float(np.mean([s.tflops for s in specs])),
                           memory_gb=min(s.memory_gb for s in specs),
                           hbm_gb_s=float(np.mean([s.hbm_gb_s for s in specs])),
                           intra_gb_s=float(np.mean([s.intra_gb_s for s in specs])))
    devices = replace_spec(topo, {s.name: uniform for s in specs})
    devices = [d.__class__(d.id, d.index, d.spec, d.node, "dc", "dc") for d in devices]
    return build(devices, defaults=_DC, name=topo.name + "/homogeneous")


def _pool_sizes(n: int, step: int) -> list[int]:
    return [k for k in range(step, n, step)]


def homogeneous_plan(ctx: PlanContext, gpus_per_node: int = 8) -> Plan:
    t0 = time.monotonic()
    topo, wf = ctx.topo, ctx.wf
    names = [t.name for t in wf.tasks]
    n = len(topo.devices)
    ids = list(range(n))
    homo = PlanContext(homogenised(topo), wf, load_balance=False)
    real = PlanContext(topo, wf, load_balance=False)
    if wf.cfg.mode == "sync":
        layouts = [([tuple(names)], [ids])]
    else:
        rest = tuple(x for x in names if x != "actor_gen")
        layouts = [([("actor_gen",), rest], [ids[:k], ids[k:]]) for k in _pool_sizes(n, gpus_per_node)]
    chosen = None
    for tgs, devs in layouts:  # chosen under the homogeneous assumption ...
        p = evaluate_groups(tgs, devs, homo)
        if p is not None and (chosen is None or p.step_time < chosen[0].step_time):
            chosen = (p, tgs, devs)
    if chosen is None:
        raise PlanningError("homogeneous planner: no layout fits the smallest GPU's memory")
    p, tgs, devs = chosen
    fixed = {name: e.cfg for g in p.groups for name, e in g.tasks.items()}
    plan = evaluate_groups(tgs, devs, real, fixed=fixed, planner="homogeneous")  # ... costed for real
    if plan is None:
        raise PlanningError("homogeneous planner's plan does not fit the real GPUs")
    plan.search_s = time.monotonic() - t0
    return plan


def pools(topo: Topology, strict: bool = True) -> dict[tuple[str, str], list[int]]:
    """GPUs grouped by (type, region) — what StreamRL can use as one homogeneous group — or, with
    ``strict=False``, by type alone (one homogeneous group may then span regions)."""
    out: dict[tuple[str, str], list[int]] = {}
    for d in topo.devices:
        out.setdefault((d.spec.name, d.region if strict else "*"), []).append(d.index)
    return out


def two_group_plan(ctx: PlanContext, strict: bool = True) -> Plan:
    """Best (generation pool, everything-else pool) pair; ``strict`` keeps each pool in one region."""
    t0 = time.monotonic()
    names = [t.name for t in ctx.wf.tasks]
    rest = tuple(x for x in names if x != "actor_gen")
    best = None
    by_pool = pools(ctx.topo, strict)
    for gen_pool, gen_devs in by_pool.items():
        for train_pool, train_devs in by_pool.items():
            if gen_pool == train_pool:
                continue
            p = evaluate_groups([("actor_gen",), rest], [_ordered(ctx, gen_devs), _ordered(ctx, train_devs)],
                                ctx, planner="two-group" if strict else "two-group-relaxed")
            if p is not None and (best is None or p.step_time < best.step_time):
                best = p
    if best is None:
        where = "single-region " if strict else ""
        raise PlanningError(f"two-group planner: no pair of homogeneous {where}GPU pools fits the workflow "
                            "(the pools are too small for its models)")
    best.search_s = time.monotonic() - t0
    return best


def _ordered(ctx: PlanContext, devs: Sequence[int]) -> list[int]:
    from .plan import locality_order
    return locality_order(ctx.topo, devs)
