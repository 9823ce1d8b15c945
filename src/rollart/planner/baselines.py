"""Baseline planners in the same code, evaluated with the same heterogeneity-aware cost model.

* ``homogeneous_plan`` (verl-like): plans as if every GPU were the same (mean TFLOPS and HBM
  bandwidth, the smallest memory so its plans still fit) and every link the same (one datacenter).
  Sync: all tasks colocated on all GPUs (verl's hybrid engine); async: a rollout pool and a training
  pool, sized under the same assumption, filled with GPUs in id order. No load balancing. Its plan is
  then costed on the real topology, as HetRL does for verl.
* ``region_aware_homogeneous_plan``: the same verl-like placement, but free to leave GPUs out: it tries
  every set of zones grown nearest-first from each zone, each also cut to its fastest GPU types, and keeps
  the subset whose plan is fastest on the real topology (the choice an operator who knows the network
  makes, instead of spreading one job across slow inter-region links).
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


def homogenised(topo: Topology, devices: Sequence[int] | None = None) -> Topology:
    """The topology as a homogeneous planner sees it: one GPU spec (that of ``devices``, default all),
    one datacenter network."""
    specs = [topo.devices[i].spec for i in (range(len(topo.devices)) if devices is None else devices)]
    uniform = HardwareSpec("uniform", tflops=float(np.mean([s.tflops for s in specs])),
                           memory_gb=min(s.memory_gb for s in specs),
                           hbm_gb_s=float(np.mean([s.hbm_gb_s for s in specs])),
                           intra_gb_s=float(np.mean([s.intra_gb_s for s in specs])))
    devices = replace_spec(topo, {d.spec.name: uniform for d in topo.devices})  # only `devices` are used
    devices = [d.__class__(d.id, d.index, d.spec, d.node, "dc", "dc") for d in devices]
    return build(devices, defaults=_DC, name=topo.name + "/homogeneous")


def _pool_sizes(n: int, step: int) -> list[int]:
    return [k for k in range(step, n, step)]


def homogeneous_plan(ctx: PlanContext, gpus_per_node: int = 8, devices: Sequence[int] | None = None) -> Plan:
    """verl-like plan on ``devices`` (default: every GPU, in id order)."""
    t0 = time.monotonic()
    topo, wf = ctx.topo, ctx.wf
    names = [t.name for t in wf.tasks]
    ids = list(range(len(topo.devices))) if devices is None else list(devices)
    n = len(ids)
    homo = PlanContext(homogenised(topo, ids), wf, load_balance=False)
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


def zone_subsets(topo: Topology) -> list[list[int]]:
    """Candidate GPU subsets of a region-aware operator: from each zone, the zones added one at a time in
    order of their latency to it (each prefix a candidate), and each such set cut to its 1, 2, ... fastest
    GPU types. Sorted and without repeats; the full set is always among them."""
    zones: dict[str, list[int]] = {}
    for d in topo.devices:
        zones.setdefault(d.zone, []).append(d.index)
    names = sorted(zones)
    out: set[tuple[int, ...]] = set()
    for seed in names:
        ref = zones[seed][0]
        order = sorted(names, key=lambda z: (z != seed, topo.latency[ref, zones[z][0]], z))
        chosen: list[int] = []
        for z in order:
            chosen += zones[z]
            by_speed = sorted({topo.devices[i].spec.tflops for i in chosen}, reverse=True)
            for k in range(1, len(by_speed) + 1):
                out.add(tuple(sorted(i for i in chosen if topo.devices[i].spec.tflops >= by_speed[k - 1])))
    return [list(s) for s in sorted(out, key=lambda s: (len(s), s))]


def region_aware_homogeneous_plan(ctx: PlanContext, gpus_per_node: int = 8) -> Plan:
    """The best verl-like plan over :func:`zone_subsets`, judged on the real topology."""
    t0 = time.monotonic()
    best = None
    for devs in zone_subsets(ctx.topo):
        try:
            p = homogeneous_plan(ctx, gpus_per_node, devices=devs)
        except PlanningError:  # too few GPUs (or too small ones) for the workflow's models
            continue
        if best is None or p.step_time < best.step_time:
            best = p
    if best is None:
        raise PlanningError("region-aware homogeneous planner: no GPU subset fits the workflow")
    best.planner, best.search_s = "homogeneous-region-aware", time.monotonic() - t0
    return best


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
