"""Trace-replay simulator: every policy drains the trace, Isolated never shares a group, every operation runs once, sharing drains faster than Isolated, HRRS switches less than FCFS, and the §6.2
GPU-hour accounting of two packed jobs."""
import pytest

from rollart.multiplex.sim import ClusterSim, SHAPES, gpu_hours_two_jobs, make_trace, replay

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
    assert 0 < r["saved_pct"] <= 25.0 + 1e-9
    assert r["slowdown"] >= 0.95 and r["switches"] > 0
    assert set(SHAPES) == {"7B", "30B", "235B"}
