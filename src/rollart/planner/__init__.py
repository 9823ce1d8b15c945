"""SIMULATED placement search: heterogeneity-aware plans of RL workflows over an analytical cost model
(HetRL §3–5, App. B), run offline by ``python -m rollart.planner`` and the benchmarks; a training run
never executes it (a plan reaches a run only as placements, ``rollart.distributed.plan_placements``).

Inputs: a device topology (:mod:`.topology`, GPU specs from rollart.hardware, presets in
:mod:`.scenarios`) and a workflow (:mod:`.workflow`). The cost model (:mod:`.costmodel` terms,
:mod:`.memory`, :mod:`.taskcost` per task, :mod:`.stepcost` end to end) estimates a step;
:mod:`.search` (SHA-EA) and :mod:`.ilp` (exact) find plans (:mod:`.plan`: Plan, of :mod:`.groupplan` GPU
groups); :mod:`.baselines` holds the homogeneous (verl-like) and two-group (StreamRL-like) planners.
``rollart.distributed.plan_placements`` (the product's side) turns a plan into worker placements for the
ResourceManager.

    from rollart.planner import make_plan
    plan = make_plan("multi-country", "ppo")
    print(plan.table()); plan.to_json()
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .plan import Plan, PlanningError
from .scenarios import SCENARIOS, DEFAULT_MIX, parse_mix, scenario
from .search import SHAEA, SearchConfig
from .taskcost import PlanContext
from .topology import Topology, TopologyError, load
from .workflow import Workflow, WorkflowConfig, load_workflow


def load_topology(source: str | Topology, gpus: str | None = None) -> Topology:
    """A :class:`Topology`, a scenario preset name (with an optional ``A100:24,...`` mix) or a file."""
    if isinstance(source, Topology):
        return source
    if source in SCENARIOS:
        return scenario(source, parse_mix(gpus) if gpus else DEFAULT_MIX)
    if not Path(source).exists():
        raise TopologyError(f"topology {source!r}: neither a preset ({list(SCENARIOS)}) nor a file")
    return load(source)


def make_plan(topology: str | Topology, workflow: str | Workflow = "ppo", overrides: Sequence[str] = (),
              planner: str = "sha-ea", gpus: str | None = None, budget: int = 4000,
              time_limit_s: float = 55.0, seed: int = 0, workers: int = 0) -> Plan:
    """Plan ``workflow`` on ``topology`` with one of: sha-ea, ilp, homogeneous, two-group."""
    topo = load_topology(topology, gpus)
    wf = workflow if isinstance(workflow, Workflow) else load_workflow(workflow, list(overrides))
    ctx = PlanContext(topo, wf)
    if planner == "sha-ea":
        return SHAEA(ctx, SearchConfig(budget=budget, time_limit_s=time_limit_s, seed=seed,
                                          workers=workers)).run()
    if planner == "ilp":
        from .ilp import ILPScheduler
        return ILPScheduler(ctx, time_limit_s=max(time_limit_s, 180.0)).solve().plan
    if planner == "homogeneous":
        from .baselines import homogeneous_plan
        return homogeneous_plan(ctx)
    if planner == "two-group":
        from .baselines import two_group_plan
        return two_group_plan(ctx)
    raise ValueError(f"unknown planner {planner!r}; choose sha-ea, ilp, homogeneous or two-group")


__all__ = ["make_plan", "load_topology", "Plan", "PlanningError", "PlanContext", "SHAEA", "SearchConfig",
           "Topology", "TopologyError", "Workflow", "WorkflowConfig", "SCENARIOS"]
