"""Scheduler logic in-process: HRRS ordering and setup-cost batching, freedom from starvation, FCFS,
per-job FIFO, context switches prepended automatically, job FSM, SLO rejection, and a failing request
that fails only its own future."""
import asyncio

import pytest

from rollart.messages import GetVersion, TrainStep
from rollart.multiplex.messages import AddJob, Operation, Prefetch, op_name
from rollart.multiplex.router import Router, check_serial
from rollart.multiplex.hrrs import (JobClosedError, JobState, Scheduler, SLOViolation, hrrs_priority, pick)

ADD = AddJob(config=None)  # the fake group builds no trainer


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_hrrs_prefers_resident_job_at_equal_wait():
    heads = [("B", 0.0, 1.0), ("A", 0.0, 1.0)]
    assert heads[pick(heads, now=0.5, resident="A", switch_cost=2.0, policy="hrrs")][0] == "A"
    # FCFS ignores residency: oldest first
    heads = [("B", 0.0, 1.0), ("A", 0.1, 1.0)]
    assert heads[pick(heads, now=0.5, resident="A", switch_cost=2.0, policy="fcfs")][0] == "B"


def test_hrrs_prefers_short_jobs_and_long_waits():
    assert hrrs_priority(wait=1.0, est=0.1, needs_switch=False, switch_cost=0) > hrrs_priority(1.0, 10.0, False, 0)
    assert hrrs_priority(wait=5.0, est=1.0, needs_switch=True, switch_cost=1.0) > hrrs_priority(0.0, 1.0, False, 1.0)


def test_no_starvation_under_a_stream_of_resident_work():
    """Job A's cheap ops keep arriving; B needs a costly switch. B still runs within a bounded wait."""
    now, b_arrival = 0.0, 0.0
    for step in range(10_000):
        heads = [("A", now, 0.1), ("B", b_arrival, 0.1)]  # A's head always fresh
        if heads[pick(heads, now, resident="A", switch_cost=5.0, policy="hrrs")][0] == "B":
            break
        now += 0.1
    else:
        pytest.fail("B starved")
    assert now <= 5.2 + 0.1 + 1e-9  # priority 1 + W/5.1 beats 1 once W exceeds ~5.1 s


class FakeGroup:
    """A worker group stand-in that records the operations it is sent (the real one is tested in
    test_multiplex_service.py)."""

    def __init__(self):
        self.calls = []
        self.hints = []
        self.gate = None

    async def send(self, message):
        if isinstance(message, Prefetch):  # a hint, outside the serial order
            self.hints.append(message.job)
            return None
        assert isinstance(message, Operation), message
        op = op_name(message.request)
        self.calls.append((message.seq, message.job, op))
        if op == "train_step" and message.request.trajectories == "boom":
            raise ValueError("bad batch")
        if self.gate is not None and op == "train_step":
            await self.gate.wait()
        await asyncio.sleep(0)
        return (message.job, op, message.request)


async def test_switches_are_prepended_and_order_is_fifo_per_job():
    router, group = Router(), FakeGroup()
    router.add("d", [group])
    s = Scheduler(router, policy="hrrs")
    s.add_job("A", "d"); s.add_job("B", "d")
    futs = [s.submit("A", ADD), s.submit("B", ADD)]
    futs += [s.submit("A", TrainStep([i])) for i in range(3)] + [s.submit("B", TrainStep([i])) for i in range(3)]
    await asyncio.gather(*futs)
    ops = [(j, o) for _, j, o in group.calls]
    assert ops[0] == ("A", "add_job") and ops.count(("B", "add_job")) == 1
    a_steps = [c for c in group.calls if c[1] == "A" and c[2] == "train_step"]
    assert [r[0] for r in a_steps] == sorted(r[0] for r in a_steps)
    # every op of a non-resident job is preceded by offload(resident) + load(job)
    resident = None
    for _, job, op in group.calls:
        if op == "offload":
            assert job == resident; resident = None
        elif op == "load":
            assert resident is None; resident = job
        elif op == "add_job":
            assert resident is None; resident = job
        else:
            assert job == resident
    check_serial(router.log["d"])
    assert [r.op for r in router.log["d"]] == [op for _, _, op in group.calls]
    assert s.jobs["A"].state == JobState.RUNNING
    await asyncio.sleep(0)  # let the prefetch hints land
    assert group.hints  # the waiting job was named ahead of its switch
    await s.close()


async def test_hrrs_switches_less_than_fcfs_on_interleaved_arrivals():
    counts = {}
    for policy in ("hrrs", "fcfs"):
        router, group = Router(), FakeGroup()
        router.add("d", [group])
        s = Scheduler(router, policy=policy, default_est_s=0.01)
        s.switch_cost["d"] = 1.0
        s.add_job("A", "d"); s.add_job("B", "d")
        await asyncio.gather(s.submit("A", ADD), s.submit("B", ADD))
        group.gate = asyncio.Event()
        first = s.submit("A", TrainStep(["hold"]))  # occupies the deployment while the queues fill
        await asyncio.sleep(0.01)
        futs = [s.submit(j, TrainStep([i])) for i in range(5) for j in ("B", "A")]
        group.gate.set()
        await asyncio.gather(first, *futs)
        counts[policy] = s.stats()["switches"]
        await s.close()
    assert counts["hrrs"] < counts["fcfs"]


async def test_failing_request_and_closed_job_do_not_stop_others():
    router, group = Router(), FakeGroup()
    router.add("d", [group])
    s = Scheduler(router)
    s.add_job("A", "d"); s.add_job("B", "d")
    await asyncio.gather(s.submit("A", ADD), s.submit("B", ADD))
    bad = s.submit("B", TrainStep("boom"))
    with pytest.raises(ValueError, match="bad batch"):
        await bad
    with pytest.raises(TypeError, match="GetVersion is no operation"):
        s.submit("B", GetVersion())  # a query is never queued
    pending = s.submit("B", TrainStep([1]))
    s.close_job("B", JobState.FAILED, "controller crashed")
    with pytest.raises(JobClosedError, match="controller crashed"):
        await pending
    with pytest.raises(JobClosedError):
        s.submit("B", TrainStep([2]))
    assert (await s.submit("A", TrainStep([3])))[0] == "A"
    assert s.jobs["B"].state == JobState.FAILED and s.jobs["B"].reason == "controller crashed"
    await s.close()


async def test_slo_rejects_colocation_when_a_job_waits_too_much():
    router = Router()
    router.add("d", [FakeGroup()])
    s = Scheduler(router, slo_max_wait_ratio=0.5, min_ops_for_slo=4)
    s.add_job("A", "d")
    s.jobs["A"].recent.extend([(3.0, 1.0)] * 4)  # waited 75% of its time
    with pytest.raises(SLOViolation, match="slo_max_wait_ratio"):
        s.add_job("B", "d")
    s.jobs["A"].recent.clear(); s.jobs["A"].recent.extend([(0.1, 1.0)] * 4)
    s.add_job("B", "d")
    await s.close()


async def test_router_serialises_one_group_and_runs_groups_concurrently():
    router = Router()
    ga, gb = FakeGroup(), FakeGroup()
    router.add("a", [ga]); router.add("b", [gb])
    ga.gate = asyncio.Event()
    held = asyncio.create_task(router.execute("a", "J", TrainStep([0])))
    queued = asyncio.create_task(router.execute("a", "K", TrainStep([1])))
    await asyncio.sleep(0.01)
    assert await router.execute("b", "K", TrainStep([2])) == ("K", "train_step", TrainStep([2]))  # a blocks not b
    assert not queued.done() and len(ga.calls) == 1  # a's second op waits for the first
    ga.gate.set()
    await asyncio.gather(held, queued)
    check_serial(router.log["a"])
    assert [r.seq for r in router.log["a"]] == [1, 2]
