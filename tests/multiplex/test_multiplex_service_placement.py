"""Live TrainingService placement via the Placer: never over-commits, refuses only real misfits, releases, cold start -> repack."""
import asyncio
import random

import pytest

from rollart.messages import TrainStep
from rollart.multiplex.placer import Trace
from rollart.multiplex.router import OpRecord
from rollart.multiplex.hrrs import JobState
from rollart.multiplex.service import PlacementError, ServiceConfig, TrainingService, profiled_trace

from mx_fixtures import save_tiny_policy, trainer_config, trajectories

H = 120


def projection(trace: Trace, shift: int) -> set[int]:
    """Slots the trace occupies on the ring at this shift, computed slot by slot (independent of the Placer)."""
    return {(k * trace.period + off + shift + x) % H
            for k in range(H // trace.period) for off, dur in trace.segments for x in range(dur)}


def random_trace(rng: random.Random) -> Trace:
    period = rng.choice([10, 20, 30, 40, 60])
    segs, t = [], 0
    for _ in range(rng.randint(1, 2)):
        t += rng.randrange(0, 4)
        d = rng.randint(1, max(1, period // 3))
        if t + d > period:
            break
        segs.append((t, d))
        t += d
    return Trace(period, segs or [(0, 1)])


async def test_random_registrations_never_overcommit_and_follow_the_placer(tmp_path):
    model = save_tiny_policy(tmp_path / "m", 0)
    rng = random.Random(7)
    cfg = ServiceConfig(deployments=3, mode="inprocess", placement_horizon=H, max_jobs_per_deployment=50)
    async with TrainingService(cfg) as s:
        live: dict[str, Trace] = {}
        refused = 0
        for step in range(36):
            if live and rng.random() < 0.3:
                job = rng.choice(sorted(live))
                await s.complete_job(job)
                del live[job]
                assert s.job_state(job) == JobState.COMPLETED
            else:
                job, trace = f"j{step}", random_trace(rng)
                occupied = {d: set() for d in s.names}
                for other, t in live.items():
                    occupied[s.placement[other]] |= projection(t, s.placed(other).shift)
                try:
                    d = await s.register_job(job, trainer_config(model), demand=trace)
                except PlacementError as e:
                    refused += 1
                    assert job in str(e) and "fits on no deployment" in str(e)
                    # a refusal is real: at every shift the trace collides on every deployment
                    assert all(projection(trace, sh) & occupied[dd] for dd in s.names for sh in range(trace.period))
                    assert job not in s.placer.placed and job not in s.scheduler.jobs
                    continue
                live[job] = trace
                p = s.placed(job)
                assert d == s.names[p.nodes[0]] == s.scheduler.jobs[job].deployment
                assert projection(trace, p.shift) == {x for a, b in p.windows for x in range(a, b)}
                assert not projection(trace, p.shift) & occupied[d]
            # independent recount after every change: no slot of any deployment reserved twice
            used = {d: [0] * H for d in s.names}
            for other, t in live.items():
                for x in projection(t, s.placed(other).shift):
                    used[s.placement[other]][x] += 1
            assert max(max(u) for u in used.values()) <= 1
            assert set(s.placer.placed) == set(live)
            for x in range(0, H, 11):
                assert s.placer.capacity.min(x, x + 1) == sum(used[d][x] == 0 for d in s.names)
        assert refused > 0 and len(live) >= 3  # the load was high enough to refuse, and jobs were spread out
        # the workers hold exactly the trainers the placements say, and those jobs still train
        stats = await s.worker_stats()
        for d in s.names:
            assert stats[d][0]["jobs"] == sorted(j for j in live if s.placement[j] == d)
        busiest = max(s.names, key=lambda d: len(stats[d][0]["jobs"]))
        for job in stats[busiest][0]["jobs"][:2]:
            m = await s.send(job, TrainStep(trajectories(seed=1)))
            assert m["charts/version"] == 1.0


async def test_default_demand_fills_a_deployment_then_refuses_and_pinning_is_respected(tmp_path):
    model = save_tiny_policy(tmp_path / "m", 1)
    async with TrainingService(ServiceConfig(deployments=2, mode="inprocess", default_duty=0.5,
                                             max_jobs_per_deployment=8)) as s:
        assert await s.register_job("a", trainer_config(model)) == "train0"
        assert await s.register_job("b", trainer_config(model)) == "train1"  # least loaded first (spread)
        assert await s.register_job("c", trainer_config(model), deployment="train0") == "train0"
        assert s.placed("c").shift == s.placed("a").shift + 10  # micro-shifted into a's idle half
        with pytest.raises(PlacementError, match="fits on no deployment"):
            await s.register_job("d", trainer_config(model), deployment="train0")
        assert "d" not in s.scheduler.jobs and "d" not in s.placer.placed
        assert await s.register_job("d", trainer_config(model)) == "train1"
        with pytest.raises(PlacementError):
            await s.register_job("e", trainer_config(model))
        with pytest.raises(ValueError, match="divide placement_horizon"):
            await s.register_job("e", trainer_config(model), demand={"period": 7, "segments": [(0, 1)]})
        with pytest.raises(ValueError, match="demand must be"):
            await s.register_job("e", trainer_config(model), demand={"period": 20})
        with pytest.raises(ValueError, match="already active"):
            await s.register_job("a", trainer_config(model))
        with pytest.raises(TypeError, match="must be a TrainerConfig"):
            await s.register_job("e", dict(model_path=model))
        await s.complete_job("a")  # its windows come back: e fits now, on train0
        assert await s.register_job("e", trainer_config(model)) == "train0"
        # a job whose trainer cannot be built gives its windows back too
        await s.complete_job("e")
        with pytest.raises(Exception, match="model"):
            await s.register_job("bad", trainer_config(str(tmp_path / "missing")))
        assert "bad" not in s.placer.placed
        assert await s.register_job("f", trainer_config(model)) == "train0"


def test_profiled_trace_measures_duty_from_the_router_log():
    log = [OpRecord(1, "p", "add_job", 0.0, 5.0), OpRecord(2, "p", "train_step", 10.0, 12.0),
           OpRecord(3, "q", "train_step", 12.0, 30.0), OpRecord(4, "p", "offload", 30.0, 31.0),
           OpRecord(5, "p", "train_step", 40.0, 43.0), OpRecord(6, "p", "forward", 43.0, 45.0)]
    duty, trace = profiled_trace(log, "p", period=20)
    assert duty == pytest.approx((2 + 3 + 2) / (45 - 10))  # add_job and the switch are not its demand
    assert trace == Trace(20, [(0, 4)])  # 0.2 of 20 slots
    with pytest.raises(ValueError, match="at least two"):
        profiled_trace(log, "q", period=20)
    _, full = profiled_trace([OpRecord(1, "p", "forward", 0, 1), OpRecord(2, "p", "forward", 1, 2)], "p", 20)
    assert full == Trace(20, [(0, 20)])  # back to back: the whole period


async def test_cold_start_profile_then_repack_in_place(tmp_path):
    model = save_tiny_policy(tmp_path / "m", 2)
    async with TrainingService(ServiceConfig(deployments=2, mode="inprocess")) as s:
        assert await s.register_job("p", trainer_config(model), demand="profile") == "train0"
        assert s.placed("p").dedicated
        assert await s.register_job("a", trainer_config(model)) == "train1"  # train0 is taken whole
        with pytest.raises(PlacementError, match="none is idle"):
            await s.register_job("p2", trainer_config(model), demand="profile")
        with pytest.raises(PlacementError):
            await s.register_job("b", trainer_config(model), deployment="train0")
        with pytest.raises(ValueError, match="at least two"):
            s.repack("p")
        for k in range(3):  # steps with a pause between them, as if the job's rollout were running
            await s.send("p", TrainStep(trajectories(seed=k)))
            await asyncio.sleep(0.1)
        with pytest.raises(ValueError, match="not being profiled"):
            s.repack("a")
        placed = s.repack("p")
        duty, trace = profiled_trace(s.router.log["train0"], "p", s.cfg.default_period)
        assert not placed.dedicated and placed.nodes == [0] and 0 < duty <= 1
        assert sum(b - a for a, b in placed.windows) == trace.segments[0][1] * (s.cfg.placement_horizon // trace.period)
        # the rest of train0 is open again: a job needing one slot per period fits iff one is left
        if trace.segments[0][1] < trace.period:
            assert await s.register_job("b", trainer_config(model), deployment="train0",
                                        demand={"period": 20, "segments": [(0, 1)]}) == "train0"
        else:
            with pytest.raises(PlacementError):
                await s.register_job("b", trainer_config(model), deployment="train0",
                                     demand={"period": 20, "segments": [(0, 1)]})
        m = await s.send("p", TrainStep(trajectories(seed=9)))
        assert m["charts/version"] == 4.0
