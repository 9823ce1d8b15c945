"""Trace-driven simulation and baselines: exact results on hand-checkable traces, trace shape, elastic behaviour."""
import pytest

from rollart.actions.action import amdahl
from rollart.sim.coding_actions import CodingTraceConfig, Step, action_time_ratio, coding_trace, simulate_coding
from rollart.sim.mopd_actions import (GpuRequest, MopdTraceConfig, ServiceSpec, mopd_trace, node_sizes,
                                      simulate_gpu_pool)
from rollart.sim.actions_baselines import (OffloadConfig, simulate_gpu_dedicated, simulate_reward_offload,
                                           simulate_static)


def tiny_trace():
    return [[Step(1.0, "tool", 2.0), Step(1.0, "reward_test", 64.0, 1.0)],
            [Step(2.0, "tool", 1.0), Step(5.0, "reward_test", 32.0, 1.0)]]


def test_static_baseline_runs_every_action_on_one_core():
    res = simulate_static(tiny_trace(), nodes=1, cores_per_node=4)
    assert res.traj_act == pytest.approx([66.0, 33.0])  # no queueing, DoP 1
    assert res.makespan == pytest.approx(1 + 2 + 1 + 64)


def test_static_hard_half_core_quota_halves_speed():
    res = simulate_static(tiny_trace(), nodes=1, cores_per_node=4, cpu_quota=0.5)
    assert res.traj_act == pytest.approx([132.0, 66.0])


def test_static_pods_request_half_a_core_and_share_the_node_fairly():
    # §6.1's 0.5-CPU request: two pods fit on one core; their commands share it (CFS, equal requests):
    # both run at half speed until the 10 s one ends at t=20, then the other alone: 30 - 10 left -> t=40
    trace = [[Step(0.0, "tool", 10.0)], [Step(0.0, "tool", 30.0)]]
    res = simulate_static(trace, nodes=1, cores_per_node=1)
    assert res.traj_act == pytest.approx([20.0, 40.0])
    # a third pod does not fit (1 core / 0.5): it waits for the first pod to end at t=20
    res = simulate_static(trace + [[Step(0.0, "tool", 10.0)]], nodes=1, cores_per_node=1)
    # t 20-40: the third (10 s) and the 30 s one (20 left) at 1/2: the third ends at 40 (ACT: 20 s
    # Pending + 20 s run); the 30 s one has 10 left, alone at full speed: ends at 50
    assert res.traj_act == pytest.approx([20.0, 50.0, 40.0])
    assert res.makespan == pytest.approx(50.0)


def test_static_commands_use_at_most_one_core_each():
    trace = [[Step(0.0, "tool", 10.0)], [Step(1.0, "tool", 10.0)]]
    res = simulate_static(trace, nodes=1, cores_per_node=4)  # 4 cores, 2 commands: no sharing
    assert res.traj_act == pytest.approx([10.0, 10.0])


def test_static_baseline_queues_trajectories_beyond_pods():
    trace = [[Step(0.0, "tool", 10.0)], [Step(0.0, "tool", 10.0)]]
    res = simulate_static(trace, nodes=1, cores_per_node=1, pod_request=1.0)
    assert sorted(res.traj_act) == pytest.approx([10.0, 20.0])  # second waits for the pod


def test_static_pod_is_requested_at_trajectory_start_and_held_through_generation():
    # one pod: trajectory 1 waits for the pod from t=0 (not from its first action) until trajectory 0
    # ends at 5 + 10; then its own 5 s generation and 10 s tool run: ACT = 15 (pod wait) + 10
    trace = [[Step(5.0, "tool", 10.0)], [Step(5.0, "tool", 10.0)]]
    res = simulate_static(trace, nodes=1, cores_per_node=1, pod_request=1.0)
    assert res.traj_act == pytest.approx([10.0, 25.0])
    assert res.makespan == pytest.approx(30.0)


def test_static_rejects_bad_provisioning():
    with pytest.raises(ValueError, match="pod_request"):
        simulate_static(tiny_trace(), nodes=1, cores_per_node=4, pod_request=0)
    with pytest.raises(ValueError, match="cpu_quota"):
        simulate_static(tiny_trace(), nodes=1, cores_per_node=4, cpu_quota=0)


def test_elastic_scales_perfectly_parallel_tests_on_an_idle_node():
    res = simulate_coding(tiny_trace(), nodes=1, cores_per_node=64, charge_latency=False)
    # linear speedup (parallel_fraction 1.0): each test run takes all 32 allowed cores
    assert res.units["reward_test"] == [32, 32]
    assert res.mean("reward_test") == pytest.approx((64 / 32 + 32 / 32) / 2)
    assert res.decisions >= 8 and res.overhead_pct >= 0


def test_fixed_dop_uses_exactly_that_dop():
    res = simulate_coding(tiny_trace(), nodes=1, cores_per_node=64, dop=4)
    assert res.units["reward_test"] == [4, 4]
    assert res.units["tool"] == [1, 1]


def test_coding_trace_shape():
    trace = coding_trace(CodingTraceConfig(batch=1280))
    assert len(trace) == 1280
    assert all(steps[-1].kind == "reward_test" and steps[0].kind == "tool" for steps in trace)
    assert 0.42 < action_time_ratio(trace) < 0.52  # ARL-Tangram Fig. 3c: ~47% of trajectory time
    tools = sum(s.seconds for t in trace for s in t if s.kind == "tool")
    tests = sum(s.seconds for t in trace for s in t if s.kind == "reward_test")
    assert 7 < tests / tools < 11  # §6.2 + Table 1: tool time ~ test time / 8.8


def test_dedicated_gpu_services_queue_fcfs():
    services = [ServiceSpec("a", 1e9, 1)]
    reqs = [GpuRequest(0.0, "a", 4.0, 1.0), GpuRequest(0.0, "a", 4.0, 1.0)]
    res = simulate_gpu_dedicated(services, reqs, units_per_service=4)
    assert res.traj_act == pytest.approx([1.0, 2.0])


def test_gpu_pool_restores_once_then_hits():
    cfg = MopdTraceConfig(restore_fixed=1.0, restore_bandwidth=1e9)
    services = [ServiceSpec("a", 8e9, 1)]
    reqs = [GpuRequest(0.0, "a", 8.0, 1.0), GpuRequest(100.0, "a", 8.0, 1.0)]
    res = simulate_gpu_pool(services, reqs, 8, cfg, charge_latency=False)
    # first: restore 1 + 8e9/(8*1e9) = 2 s, then 8/8 = 1 s on all 8 GPUs; second is warm: 1 s
    assert res.traj_act[0] == pytest.approx(3.0)
    assert res.traj_act[1] == pytest.approx(1.0)
    assert res.units["restores"] == [1]


def test_pool_sizes_are_full_nodes_plus_buddy_partial_nodes():
    assert node_sizes(40) == [8] * 5
    assert node_sizes(12) == [8, 4]
    assert node_sizes(11) == [8, 2, 1]
    assert node_sizes(3) == [2, 1]
    with pytest.raises(ValueError, match="at least one GPU"):
        node_sizes(0)


def test_gpu_pool_rejects_a_pool_whose_nodes_are_too_small_for_a_service():
    cfg = MopdTraceConfig()
    services = [ServiceSpec("big", 140e9, 4)]
    with pytest.raises(ValueError, match="largest node"):
        simulate_gpu_pool(services, [GpuRequest(0.0, "big", 1.0, 0.9)], 3, cfg)
    # 11 GPUs = nodes of 8, 2, 1: a 4-GPU service only ever runs on the 8-GPU node
    res = simulate_gpu_pool(services, [GpuRequest(0.0, "big", 8.0, 1.0)] * 3, 11, cfg, charge_latency=False)
    assert all(u in (4, 8) for u in res.units["logprob"])


def test_mopd_trace_has_ten_services_and_skewed_load():
    services, reqs = mopd_trace(MopdTraceConfig())
    assert len(services) == 10 and 950 <= len(reqs) <= 1100
    counts = sorted(sum(r.service == s.name for r in reqs) for s in services)
    assert counts[-1] > 4 * counts[0]


def test_serverless_offload_frees_rollout_gpus_and_raises_utilisation():
    ded = simulate_reward_offload(OffloadConfig(), serverless=False)
    srv = simulate_reward_offload(OffloadConfig(), serverless=True)
    assert srv["rollout_seconds"] < ded["rollout_seconds"]
    assert srv["reward_utilisation"] > ded["reward_utilisation"]


def test_test_run_elasticity_matches_fig8a_at_batch_128():
    # the calibration point of CodingTraceConfig.parallel_range: ARL-Tangram Fig. 8(a) left, batch 128
    # on 1280 cores (no contention on either side): 3.1x total ACT per trajectory vs the k8s pods
    trace = coding_trace(CodingTraceConfig(batch=128))
    ratio = simulate_static(trace).mean() / simulate_coding(trace, charge_latency=False).mean()
    assert 2.6 < ratio < 3.6, ratio  # the earlier unsourced elasticity (0.85..0.99) gave 4.1-4.9


def test_trace_config_rejects_bad_parallel_range():
    with pytest.raises(ValueError, match="parallel_range"):
        CodingTraceConfig(parallel_range=(0.9, 0.8))


def test_replay_submits_at_trace_times_while_closed_loop_waits_for_completion():
    # one core; A's 10 s tool runs from t=0. B's first tool arrives at 1 and waits until 10 (ACT 10).
    # Closed loop: B's next turn starts at 11, its tool arrives at 12 and runs at once (ACT 1).
    # Replay: B's second tool arrives at 1 + 1 + 1 = 3 (one-core timeline) and waits until 11 (ACT 9).
    trace = [[Step(0.0, "tool", 10.0)], [Step(1.0, "tool", 1.0), Step(1.0, "tool", 1.0)]]
    closed = simulate_coding(trace, nodes=1, cores_per_node=1, charge_latency=False)
    replay = simulate_coding(trace, nodes=1, cores_per_node=1, charge_latency=False, replay=True)
    assert closed.traj_act == pytest.approx([10.0, 11.0])
    assert replay.traj_act == pytest.approx([10.0, 19.0])
    assert closed.makespan == pytest.approx(13.0) and replay.makespan == pytest.approx(12.0)


@pytest.mark.parametrize("curve,units,act", [((1.0, 0.5), 1, 64.0), ((1.0, 1.6), 2, 40.0)])
def test_a_profiled_curve_and_core_cap_replace_amdahl(curve, units, act):
    trace = [[Step(1.0, "reward_test", 64.0, 1.0, speedup=curve)]]  # parallel_fraction 1.0 is ignored
    el = simulate_coding(trace, nodes=1, cores_per_node=8, charge_latency=False)
    assert el.units["reward_test"] == [units] and el.traj_act == pytest.approx([act])  # never above the cap 2
    fixed = simulate_coding(trace, nodes=1, cores_per_node=8, dop=16, charge_latency=False)
    assert fixed.units["reward_test"] == [2] and fixed.traj_act == pytest.approx([64.0 / curve[1]])
