"""Covers rollart.distributed.plan_placements: a plan's JSON becomes one placement per DP replica of every task."""
import json

import pytest

from rollart.distributed.plan_placements import PlacementError, resource_pools, worker_placements
from rollart.planner.scenarios import scenario
from rollart.planner.search import SHAEA, SearchConfig
from rollart.planner.taskcost import PlanContext

from planner_fixtures import tiny_workflow


@pytest.fixture(scope="module")
def plan_json():
    topo = scenario("multi-region-hybrid", [("A100", 4), ("L40S", 4), ("L4", 4)], gpus_per_node=4)
    plan = SHAEA(PlanContext(topo, tiny_workflow()), SearchConfig(budget=200, seed=3)).run()
    return json.loads(json.dumps(plan.to_json()))  # exactly what a consumer reads back


def test_every_task_covers_its_group_gpus_once(plan_json):
    workers = worker_placements(plan_json)
    for group in plan_json["groups"]:
        ids = sorted(d["id"] for d in group["devices"])
        for task in group["tasks"]:
            mine = [w for w in workers if w.task == task]
            assert sorted(i for w in mine for i in w.device_ids) == ids
            p = group["parallel"][task]
            assert len(mine) == p["dp"] and all(len(w.devices) == p["tp"] * p["pp"] for w in mine)
            assert sum(w.samples for w in mine) == 16
    roles = {w.role for w in workers}
    assert {"rollout", "actor_train", "critic_train", "reward", "reference", "critic"} == roles


def test_pools_list_each_gpu_once_by_type(plan_json):
    pools = resource_pools(plan_json)
    assert set(pools) == {"A100", "L40S", "L4"}
    assert sum(len(v) for v in pools.values()) == 12


def test_malformed_plans_are_rejected_with_the_field_named(plan_json):
    bad = json.loads(json.dumps(plan_json))
    task = bad["groups"][0]["tasks"][0]
    bad["groups"][0]["parallel"][task]["dp"] += 1
    with pytest.raises(PlacementError, match="tp\\*pp\\*dp"):
        worker_placements(bad)
    with pytest.raises(PlacementError, match="needs 'devices'"):
        worker_placements({"groups": [{"tasks": ["actor_gen"]}]})


def test_resource_manager_binds_exactly_the_planned_gpus(plan_json):
    pytest.importorskip("rollart.distributed.resources", reason="needs the foundation's ResourceManager")
    from rollart.distributed.plan_placements import place_on_resource_manager
    rm, bound, workers = place_on_resource_manager(plan_json)
    for group, bindings in zip(plan_json["groups"], bound):
        assert sorted(i for b in bindings for i in b.devices) == sorted(d["id"] for d in group["devices"])
        assert all(b.role == group["role"] and not b.fell_back for b in bindings)
    assert sum(rm.free_summary().values()) == 0  # every planned GPU is bound once
    table = rm.binding_table()
    assert "group0:" in table and "generate" in table


def test_resource_manager_conflict_is_reported_not_rebound(plan_json):
    resources = pytest.importorskip("rollart.distributed.resources",
                                    reason="needs the foundation's ResourceManager")
    from rollart.distributed.plan_placements import place_on_resource_manager, resource_pools
    rm = resources.ResourceManager(resource_pools(plan_json))
    first = plan_json["groups"][0]["devices"][0]
    rm.allocate("train", hw=first["type"], count=1, owner="someone-else")  # takes a planned GPU
    with pytest.raises(PlacementError, match="instead of the planned"):
        place_on_resource_manager(plan_json, rm)
