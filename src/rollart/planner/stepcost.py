"""End-to-end step time of a plan (HetRL App. B.4): sync/async PPO/GRPO over the plan's GPU groups.

Above :mod:`rollart.planner.groupplan` (it reads group plans) and below :mod:`rollart.planner.plan`;
the per-term formulas it combines are in :mod:`rollart.planner.costmodel`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .costmodel import phi
from .groupplan import GroupPlan
from .workflow import Workflow


@dataclass
class StepEstimate:
    """Estimated seconds per RL step and its parts."""

    total: float
    parts: dict[str, float] = field(default_factory=dict)
    task_costs: dict[str, float] = field(default_factory=dict)


def weight_update_cost(groups: Sequence[GroupPlan]) -> tuple[str, float]:
    """Resharding if actor training and generation share GPUs, else the weight-sync transfer."""
    gen = next(g for g in groups if "actor_gen" in g.tasks)
    train = next(g for g in groups if "actor_train" in g.tasks)
    if gen is train:
        return "reshard", gen.tasks["actor_train"].reshard
    return "weight_sync", sync_cost(train, gen)


def sync_cost(train: GroupPlan, gen: GroupPlan) -> float:
    """C_sync = min_i all-gather(train replica i) + max_i' broadcast(gen replica i') + C_p2p."""
    t, g = train.tasks["actor_train"], gen.tasks["actor_gen"]
    return t.allgather_min + g.broadcast_max + train.p2p_to(gen)


def end_to_end(groups: Sequence[GroupPlan], wf: Workflow) -> StepEstimate:
    """C_SyncPPO / C_AsyncPPO / C_SyncGRPO / C_AsyncGRPO for a full plan (HetRL B.4)."""
    eta = wf.cfg.eta
    task_cost = {name: g.tasks[name].time for g in groups for name in g.tasks}

    def phi_of(names: Sequence[str]) -> float:
        per_group = [sum(task_cost[n] for n in names if n in g.tasks) for g in groups]
        return phi(per_group, eta)

    gen = task_cost["actor_gen"]
    inf = phi_of(wf.inference_tasks)
    train = phi_of(wf.training_tasks)
    kind, update = weight_update_cost(groups)
    parts = {"actor_gen": gen, "inference": inf, "training": train, kind: update}
    if wf.cfg.mode == "sync":
        total = gen + inf + train + update
    else:
        gen_group = next(g for g in groups if "actor_gen" in g.tasks)
        gen_side = sum(task_cost[n] for n in gen_group.tasks)  # everything that shares generation's GPUs
        parts["gen_group_busy"] = gen_side
        total = max(gen_side, inf + train) + update
    return StepEstimate(total=total, parts=parts, task_costs=task_cost)
