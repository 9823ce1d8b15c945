"""Covers the App. B cost-model terms against hand calculations on one- and two-node toy clusters, and the
cached, plain-float estimates against a straightforward (dp, pp)-array computation."""
import math

import numpy as np
import pytest

from rollart.planner import costmodel as cm
from rollart.planner.groupplan import parallel_configs, plan_group
from rollart.planner.memory import kv_bytes_per_seq, model_memory, working_memory
from rollart.planner.plan import evaluate_groups, locality_order
from rollart.planner.scenarios import scenario
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


def _reference_estimate(task, devices, cfg, ctx, est):
    """The straightforward (dp, pp)-array evaluation of ``est``'s own split (layers, samples, decode
    batches): time, terms, weight-movement rings and per-GPU memory, every ring and hop from scratch."""
    topo, c, m = ctx.topo, ctx.wf.cfg, task.model
    tp, pp, dp, mbs, h = cfg.tp, cfg.pp, cfg.dp, c.micro_batch_size, m.hidden
    gen, train = task.kind == "gen", task.kind == "train"
    cells = [[[devices[cfg.position(i, j, k)] for k in range(tp)] for j in range(pp)] for i in range(dp)]
    tflops = np.array([[min(topo.tflops[d] for d in cell) for cell in row] for row in cells])
    hbm_bw = np.array([[min(topo.hbm[d] for d in cell) for cell in row] for row in cells])
    classes = [[tuple(sorted(int(topo.class_of[d]) for d in cell)) for cell in row] for row in cells]

    def rings(vol):
        return np.array([[cm.ring_cost_classes(topo, cc, vol) for cc in row] for row in classes])

    def hops(vol):
        return np.array([[min(cm.link_time(topo, a, b, vol) for a in set(row[j]) for b in set(row[j + 1]))
                          if j + 1 < pp else 0.0 for j in range(pp)] for row in classes])

    seq = c.seq_in if gen else c.seq_in + c.seq_out
    n = np.array(est.samples, dtype=float)[:, None]
    nms = [max(1, math.ceil(s / mbs)) if s > 0 else 0 for s in est.samples]
    nm = np.array(nms, dtype=float)[:, None]
    nl = np.array(est.layers, dtype=float)[None, :]
    comp = (3 if train else 1) * n * nl * cm.layer_flops(seq, h, m.intermediate) / (tflops * tp)
    tp_mult = (6 if c.recompute else 4) if train else 2
    tpc = tp_mult * nm * nl * rings(cm.cv_tp(mbs, seq, h, tp)) if tp > 1 else 0.0 * comp
    ppc = (2 if train else 1) * nm * hops(cm.cv_pp(mbs, seq, h)) if pp > 1 else 0.0 * comp
    hbm = 0.0 * comp
    if gen:
        b = np.array(est.dbs, dtype=float)[:, None] / pp
        hbm = c.seq_out * n * cm.B_BF16 * nl * m.layer_params / (b * hbm_bw * tp)
        steps = c.seq_out * n / b
        for bi in set(est.dbs):
            rows = np.array(est.dbs) == bi
            if tp > 1:
                tpc[rows] += (steps * 2 * nl * rings(cm.cv_tp(bi / pp, 1, h, tp)))[rows]
            if pp > 1:
                ppc[rows] += (steps * hops(cm.cv_pp(bi / pp, 1, h)))[rows]
    stage = comp + tpc + ppc + hbm
    stage[n[:, 0] == 0] = 0.0
    replica, bubble = stage.max(axis=1), np.zeros(dp)
    if train and pp > 1:
        bubble = np.where(nm[:, 0] > 0, stage[:, 1:].sum(axis=1) / np.maximum(nm[:, 0], 1), 0.0)
    dp_cost = 0.0
    if train and dp > 1:
        for j in range(pp):
            vol = cm.cv_dp(est.layers[j], m.layer_params, dp, tp)
            for k in range(tp):
                dp_cost = max(dp_cost, cm.ring_cost(topo, [row[j][k] for row in cells], vol))
    terms = {"comp": float(comp.max()), "tp": float(np.max(tpc)), "pp": float(np.max(ppc)),
             "hbm": float(np.max(hbm)), "bubble": float(bubble.max()), "dp": dp_cost}
    vol = cm.cv_allgather(m.layers, m.layer_params, tp * pp)
    per_rep = [cm.ring_cost(topo, [d for cell in row for d in cell], vol) if tp * pp > 1 else 0.0
               for row in cells]
    weights = (max(per_rep), min(per_rep)) if (train and task.role == "actor") or gen else (0.0, 0.0)

    stage_of = np.array([j for i in range(dp) for j in range(pp) for _ in range(tp)])
    replica_of = np.array([i for i in range(dp) for _ in range(pp * tp)])
    order = np.array([cfg.position(i, j, k) for i in range(dp) for j in range(pp) for k in range(tp)])
    model = np.zeros(len(devices))
    model[order] = [model_memory(task, est.layers[j], j == 0, j == pp - 1, tp, dp) for j in stage_of]
    work = np.zeros(len(devices))
    if gen:
        work[order] = [est.dbs[i] * kv_bytes_per_seq(task, est.layers[j], tp, c.seq_in + c.seq_out)
                       for i, j in zip(replica_of, stage_of)]
    else:
        work[order] = [working_memory(task, est.layers[j], j == pp - 1, tp, mbs, c.seq_in + c.seq_out,
                                      max(1, min(nms[i], pp - j)), c.recompute)
                       for i, j in zip(replica_of, stage_of)]
    return float((replica + bubble).max()) + dp_cost, terms, weights, model, work


@pytest.mark.parametrize("samples", [8, 16])  # 8 < 12 GPUs: some replicas get no sample
def test_cached_estimates_equal_the_straightforward_array_computation(samples):
    topo = scenario("multi-region-hybrid", [("A100", 4), ("L40S", 4), ("L4", 4)], gpus_per_node=4)
    # odd sizes, so that the floating-point results depend on each formula's operation order
    odd = '{"name": "odd", "layers": 6, "hidden": 384, "intermediate": 1000, "vocab": 1000}'
    wf = tiny_workflow(model=odd, prompts_per_step=samples // 2, seq_in=100, seq_out=60, micro_batch_size=3,
                       max_decode_batch=5)
    ctx = PlanContext(topo, wf)  # one context: later estimates reuse what earlier ones cached
    groups = [locality_order(topo, range(12)), locality_order(topo, [0, 1, 4, 5, 6, 8, 9, 10]), (4, 0, 8, 1)]
    checked = 0
    for devices in groups:
        for task in wf.tasks:
            for cfg in parallel_configs(len(devices), task.model.layers):
                for resident in (None, np.full(len(devices), 30e9)):
                    est = estimate_task(task, devices, cfg, ctx, resident)
                    if not est.feasible:
                        continue
                    time, terms, (slowest, fastest), model, work = _reference_estimate(task, devices, cfg, ctx,
                                                                                        est)
                    assert (est.time, est.terms) == (time, terms), (task.name, devices, cfg)
                    if task.kind == "gen":
                        assert est.broadcast_max == slowest
                    else:
                        assert (est.reshard, est.allgather_min) == (slowest, fastest)
                    assert np.array_equal(est.model_mem, model) and np.array_equal(est.working_mem, work)
                    checked += 1
    assert checked > 100
