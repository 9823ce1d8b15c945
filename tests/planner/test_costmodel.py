"""Covers the App. B cost-model terms against hand calculations on one- and two-node toy clusters."""
import math

import pytest

from rollart.planner import costmodel as cm
from rollart.planner.groupplan import plan_group
from rollart.planner.memory import model_memory
from rollart.planner.plan import evaluate_groups
from rollart.planner.taskcost import ParallelConfig, PlanContext, estimate_task
from rollart.planner.topology import load

from planner_fixtures import tiny_workflow, two_node_topology

H, H2, NL = 256, 512, 4
P_LAYER = 4 * H * H + 3 * H * H2  # 655360
A100, L4 = 312e12, 121e12
NVLINK = (5e-6, 600e9)
NET = (1e-4, 80e9 / 8)


def flops(seq):  # one layer, one sample, forward
    return 2 * 4 * seq * H * H + 2 * 2 * seq * seq * H + 2 * 3 * seq * H * H2


def link(lat_bw, volume):
    return lat_bw[0] + volume / lat_bw[1]


@pytest.fixture
def setup():
    topo = two_node_topology()  # devices 0,1: A100 on node a; 2,3: L4 on node b; 80 Gbit/s between
    wf = tiny_workflow()  # 16 sequences of 64 + 32 tokens, micro-batch 2
    return topo, wf, PlanContext(topo, wf, load_balance=False)


def test_layer_flops_matches_formula():
    assert cm.layer_flops(96, H, H2) == flops(96) == 135_266_304


def test_inference_on_one_gpu_is_pure_computation(setup):
    topo, wf, ctx = setup
    est = estimate_task(wf.by_name["ref_inf"], [0], ParallelConfig(1, 1, 1), ctx)
    assert est.time == pytest.approx(16 * NL * flops(96) / A100, rel=1e-12)


def test_tensor_parallel_inference_adds_ring_allreduce(setup):
    topo, wf, ctx = setup
    est = estimate_task(wf.by_name["ref_inf"], [0, 1], ParallelConfig(2, 1, 1), ctx)
    comp = 16 * NL * flops(96) / (A100 * 2)
    cv = 2 * 2 * 96 * H * 2 * (2 - 1) / 2  # bf16 · mbs · seq · h · 2(tp-1)/tp
    tp = 2 * 8 * NL * link(NVLINK, cv)  # 2 all-reduces per layer forward, 8 micro-batches
    assert est.terms["tp"] == pytest.approx(tp, rel=1e-12)
    assert est.time == pytest.approx(comp + tp, rel=1e-12)


def test_pipeline_training_has_hop_and_bubble(setup):
    topo, wf, ctx = setup
    est = estimate_task(wf.by_name["actor_train"], [0, 2], ParallelConfig(1, 2, 1), ctx)
    comp0, comp1 = 3 * 16 * 2 * flops(96) / A100, 3 * 16 * 2 * flops(96) / L4
    pp0 = 2 * 8 * link(NET, 2 * 2 * 96 * H)  # forward + backward hop per micro-batch
    stage0, stage1 = comp0 + pp0, comp1
    assert est.layers == [2, 2]
    assert est.terms["bubble"] == pytest.approx(stage1 / 8, rel=1e-12)
    assert est.time == pytest.approx(max(stage0, stage1) + stage1 / 8, rel=1e-12)


def test_data_parallel_training_allreduces_gradients(setup):
    topo, wf, ctx = setup
    est = estimate_task(wf.by_name["actor_train"], [0, 2], ParallelConfig(1, 1, 2), ctx)
    slowest = 3 * 8 * NL * flops(96) / L4  # 8 samples per replica, the L4 replica is the slow one
    dp = link(NET, 2 * NL * P_LAYER * 2 * (2 - 1) / (2 * 1))
    assert est.terms["dp"] == pytest.approx(dp, rel=1e-12)
    assert est.time == pytest.approx(slowest + dp, rel=1e-12)


def test_load_balancing_gives_the_faster_replica_more_samples():
    topo = two_node_topology()
    wf = tiny_workflow()
    even = estimate_task(wf.by_name["actor_train"], [0, 2], ParallelConfig(1, 1, 2),
                         PlanContext(topo, wf, load_balance=False))
    lb = estimate_task(wf.by_name["actor_train"], [0, 2], ParallelConfig(1, 1, 2),
                       PlanContext(topo, wf, load_balance=True))
    assert lb.samples[0] > lb.samples[1] and sum(lb.samples) == 16
    assert lb.time < even.time


def test_generation_is_hbm_bound_decoding_plus_prefill(setup):
    topo, wf, ctx = setup
    est = estimate_task(wf.by_name["actor_gen"], [0], ParallelConfig(1, 1, 1), ctx)
    assert est.dbs == [4]  # max_decode_batch=4 < 16 sequences
    prefill = 16 * NL * flops(64) / A100  # generation's computation uses seq_out = 0
    hbm = 32 * 16 * 2 * NL * P_LAYER / (4 * 2039e9)
    assert est.terms["hbm"] == pytest.approx(hbm, rel=1e-12)
    assert est.time == pytest.approx(prefill + hbm, rel=1e-12)


def test_training_model_memory_is_mixed_precision_adam(setup):
    topo, wf, ctx = setup
    task = wf.by_name["actor_train"]
    params = NL * P_LAYER + 2 * 1000 * H  # layers + embedding + head on the only stage
    assert model_memory(task, NL, True, True, tp=1, dp=1) == params * 16
    assert model_memory(task, NL, True, True, tp=2, dp=4) == params / 2 * (2 + 2 + 12 / 4)


def _three_regions(middle_gpus: int):
    return load({"gpus_per_node": 8, "devices": [
        {"type": "A100", "count": 1, "node": "x", "zone": "x", "region": "rx"},
        {"type": "A100", "count": middle_gpus, "node": "y", "zone": "y", "region": "ry"},
        {"type": "A100", "count": 1, "node": "z", "zone": "z", "region": "rz"}],
        "links": {"regions": [{"a": "rx", "b": "ry", "latency_ms": 1, "bandwidth_gbps": 8},
                              {"a": "ry", "b": "rz", "latency_ms": 2, "bandwidth_gbps": 8},
                              {"a": "rx", "b": "rz", "latency_ms": 10, "bandwidth_gbps": 8}]}})


def test_ring_bottleneck_must_close_the_cycle():
    v = 1e6
    topo = _three_regions(1)  # x, y, z one GPU each: the ring uses all three links
    assert cm.ring_cost(topo, [0, 1, 2], v) == pytest.approx(10e-3 + v / 1e9)
    topo = _three_regions(2)  # two GPUs in y: x-y1-z-y2-x avoids the slow x-z link
    assert cm.ring_cost(topo, [0, 1, 2, 3], v) == pytest.approx(2e-3 + v / 1e9)
    assert cm.ring_cost(topo, [1, 2], v) == pytest.approx(5e-6 + v / 600e9)  # same node


def test_phi_interpolates_between_parallel_and_sequential():
    assert cm.phi([3.0, 1.0, 2.0], 1.0) == 3.0
    assert cm.phi([3.0, 1.0, 2.0], 0.0) == 6.0
    assert cm.phi([3.0, 1.0, 2.0], 0.5) == pytest.approx(0.5 * 3 + 0.5 * 6)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_end_to_end_grpo_split_plan(mode):
    topo = two_node_topology()
    wf = tiny_workflow(algorithm="grpo", mode=mode, eta=0.5)
    ctx = PlanContext(topo, wf, load_balance=False)
    plan = evaluate_groups([("actor_gen", "reward_inf"), ("ref_inf", "actor_train")], [[2, 3], [0, 1]], ctx)
    t = plan.step.task_costs
    gen_g, train_g = plan.groups
    inf = max(t["reward_inf"], t["ref_inf"]) + 0.5 * min(t["reward_inf"], t["ref_inf"])  # two groups, η=0.5
    p2p = link(NET, 2 * NL * P_LAYER)
    sync = train_g.tasks["actor_train"].allgather_min + gen_g.tasks["actor_gen"].broadcast_max + p2p
    assert plan.step.parts["weight_sync"] == pytest.approx(sync, rel=1e-12)
    if mode == "sync":
        expect = t["actor_gen"] + inf + t["actor_train"] + sync
    else:
        expect = max(t["actor_gen"] + t["reward_inf"], inf + t["actor_train"]) + sync
    assert plan.step_time == pytest.approx(expect, rel=1e-12)


def test_colocated_actor_pays_resharding_not_sync():
    topo = two_node_topology()
    wf = tiny_workflow(algorithm="grpo")
    ctx = PlanContext(topo, wf, load_balance=False)
    g = plan_group(["actor_gen", "reward_inf", "ref_inf", "actor_train"], [0, 1], ctx,
                   {"actor_train": ParallelConfig(2, 1, 1)})
    plan = evaluate_groups([tuple(g.tasks)], [[0, 1]], ctx, fixed={"actor_train": ParallelConfig(2, 1, 1)})
    reshard = link(NVLINK, 2 * NL * P_LAYER * (2 - 1) / 2)  # all-gather over the TP pair
    assert plan.step.parts["reshard"] == pytest.approx(reshard, rel=1e-12)
    assert "weight_sync" not in plan.step.parts
    assert math.isfinite(plan.step_time)


def test_pipelined_generation_decodes_in_micro_batches(setup):
    topo, wf, ctx = setup
    est = estimate_task(wf.by_name["actor_gen"], [0, 1], ParallelConfig(1, 2, 1), ctx)
    assert est.dbs == [4] and est.layers == [2, 2]
    per_stage_batch = 4 / 2  # 4 resident sequences flow through 2 stages as 2 micro-batches
    hbm = 32 * 16 * 2 * 2 * P_LAYER / (per_stage_batch * 2039e9)
    passes = 32 * 16 / per_stage_batch
    hop = 8 * link(NVLINK, 2 * 2 * 64 * H) + passes * link(NVLINK, 2 * per_stage_batch * H)
    prefill = 16 * 2 * flops(64) / A100
    assert est.terms["hbm"] == pytest.approx(hbm, rel=1e-12)
    assert est.time == pytest.approx(prefill + hop + hbm, rel=1e-12)  # stage 0 (it has the hop) is slowest
