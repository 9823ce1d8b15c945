"""Trace-replay simulator: every policy drains the trace, Isolated never shares a group, every operation runs once, sharing drains faster than Isolated, HRRS switches less than FCFS, and the §6.2
GPU-hour accounting of two packed jobs (equal pools and the Tab. 1 pools)."""
import pytest

from rollart.sim.multiplex import ClusterSim, SHAPES, gpu_hours_two_jobs, make_trace, replay, table1_pools

JOBS = make_trace(16, seed=3, steps=(5, 20))


@pytest.mark.parametrize("policy", ["isolated", "pack", "spread", "spread+backfill"])
def test_every_job_finishes_every_op_runs_once(policy):
    r = ClusterSim(JOBS, 3, policy).run()
    assert all(j.trained == j.steps and j.end >= j.arrival for j in r.jobs)
    assert len(r.op_waits) == 3 * sum(j.steps for j in JOBS)  # three serial operations per step, each once
    assert all(d >= -0.1 for d in r.norm_delay)  # nobody beats running alone (rollout jitter aside)
    if policy == "isolated":
        assert r.switches == 0


def test_sharing_drains_faster_than_isolated_and_hrrs_switches_less():
    jobs = make_trace(30, seed=1, steps=(10, 40))
    iso = replay(jobs, 4, "isolated").drain_s
    for p in ("pack", "spread", "spread+backfill"):
        assert replay(jobs, 4, p).drain_s < iso
    assert replay(jobs, 4, "pack", runtime="hrrs").switches < replay(jobs, 4, "pack", runtime="fcfs").switches


def test_gpu_hours_accounting():
    r = gpu_hours_two_jobs("7B", steps=20, rollout_gpus=8, train_gpus=8)
    # packing can save at most the second training pool: T / (2 (R + T)) = 25% at R = T
    assert 0 < r["saved_pct"] <= r["bound_pct"] == 25.0
    assert r["slowdown"] >= 1.0 and r["switches"] > 0  # same rollout jitter alone and packed: never faster
    assert set(SHAPES) == {"7B", "30B", "235B"}
    with pytest.raises(ValueError, match="rollout_gpus"):
        gpu_hours_two_jobs("7B", rollout_gpus=0, train_gpus=8)


@pytest.mark.parametrize("model,pools", [("7B", (2, 8)), ("30B", (8, 64)), ("235B", (32, 96))])
def test_gpu_hours_default_to_the_table1_pools(model, pools):
    assert table1_pools(model) == pools
    r = gpu_hours_two_jobs(model, steps=20)
    assert (r["rollout_gpus"], r["train_gpus"]) == pools
    assert r["bound_pct"] == pytest.approx(100 * pools[1] / (2 * sum(pools)))
    assert 0 < r["saved_pct"] <= r["bound_pct"] and r["slowdown"] >= 1.0
    # split-async: both jobs hold R + T GPUs for their whole run
    assert r["split_gpu_h_per_step"] > r["packed_gpu_h_per_step"]
