"""tools/bench/actions_real.py's rollout modes on real sandboxes: the paper's pod-per-trajectory baseline holds
at most cores / 0.5 pods at once, making later trajectories wait, and every mode plays the same actions."""
import asyncio
import os

import pytest

from bench_modules import bench_module

bench = bench_module("actions_real")


def test_pod_baseline_admits_two_pods_per_core_and_queues_the_rest():
    episodes = bench.swe_episodes(3, seed=0)
    core = [sorted(os.sched_getaffinity(0))[0]]
    r = asyncio.run(bench.play_swe(episodes, "pod", core))
    assert r["pods_peak"] == 2  # 0.5 CPU per pod on one core; the third trajectory waited for a pod
    assert len(r["waits"]) == 3 and r["success"] == 1.0
    assert sum(len(v) for v in r["acts"].values()) == sum(len(e["messages"]) for e in episodes)


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="pod"):
        asyncio.run(bench.play_swe(bench.swe_episodes(1, seed=0), "k8s", [0]))


def test_the_emulated_act_speedup_misses_when_test_runs_may_not_scale():
    """real_act_speedup (the rollout on an emulated node) can fail: with the profiled test-run curve cut to one
    core the actions mode keeps only its exclusive-core ordering, and on a node with a core per trajectory the
    pods never contend, so the key reads about 1, not >= 1.5."""
    from rollart.sim.coding_actions import CodingTraceConfig
    actions_emulated = bench_module("actions_emulated")
    setup = actions_emulated.Setup(8, CodingTraceConfig(batch=8, turns_mean=3), scale=0.03)
    r = asyncio.run(actions_emulated.emulated_rollout(setup, speedup=(1.0,), log=lambda line: None))
    assert set(r["dop"]) == {1} and r["runs"]["actions"]["passed"] == 8
    assert r["act_speedup"] < 1.5
