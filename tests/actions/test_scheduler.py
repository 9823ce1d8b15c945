"""Algorithm 1 (greedy eviction with Algorithm 2's objective) against an exhaustive reference; vector constraints."""
import itertools
import math
import random

import pytest

from rollart.actions.action import Action, amdahl
from rollart.actions.basic import CountPool
from rollart.actions.gpu import GpuPool
from rollart.actions.elastic import ElasticScheduler


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def ref_estimate(free_times, remaining, now, depth):
    """Algorithm 2's ESTIMATE written plainly: per-unit free times, min units, first tries depth choices."""
    if not remaining:
        return 0.0
    best = math.inf
    first = remaining[0]
    for d in range(min(depth, len(first.units))):
        times, total = sorted(free_times), 0.0
        for idx, a in enumerate(remaining):
            u = first.units[d] if idx == 0 else a.min_units
            if u > len(times):
                total = math.inf
                break
            start = times[u - 1]
            times = sorted(times[u:] + [start + a.duration(u)] * u)
            total += start + a.duration(u) - now
        best = min(best, total)
    return best


def ref_decide(waiting, free_cpu, free_mem, running_ends, depth, now):
    """Exhaustive reference for one decision on a single node (cpu key + memory)."""
    cpu, mem, cands = free_cpu, free_mem, []
    for a in waiting:
        if a.min_units <= cpu and a.cost.get("memory", 0) <= mem:
            cpu, mem = cpu - a.min_units, mem - a.cost.get("memory", 0)
            cands.append(a)
        else:
            break
    rest = waiting[len(cands):]

    def objective(length):
        group = cands[:length]
        best, best_alloc = math.inf, None
        for alloc in itertools.product(*[a.units for a in group]):
            if sum(alloc) <= free_cpu:
                cost = sum(a.duration(k) for a, k in zip(group, alloc))
                if cost < best:
                    best, best_alloc = cost, alloc
        heap = list(running_ends) + [now] * (free_cpu - sum(best_alloc))
        heap += [now + a.duration(k) for a, k in zip(group, best_alloc) for _ in range(k)]
        return best + ref_estimate(heap, cands[length:] + rest, now, depth), best_alloc

    obj, alloc = objective(len(cands))
    keep = len(cands)
    floor = 0 if running_ends else 1  # evicting everyone is allowed only if something will finish
    for length in range(len(cands) - 1, floor - 1, -1):
        new, new_alloc = objective(length)
        if new >= obj:
            break
        obj, alloc, keep = new, new_alloc, length
    return [a.id for a in cands[:keep]], obj


def random_action(rng, max_units):
    units = sorted(rng.sample(range(1, max_units + 1), rng.randint(1, 3)))
    return Action({"memory": rng.choice([0.5, 1.0, 2.0])}, key="cpu", units=units,
                  elasticity=amdahl(rng.uniform(0.3, 1.0)), t_ori=rng.uniform(5, 100), kind="test")


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("seed", range(25))
def test_algorithm1_matches_exhaustive_reference(seed, depth):
    rng = random.Random(seed)
    clock = Clock()
    cap = rng.randint(4, 10)
    pools = {"cpu": CountPool("cpu", cap, clock), "memory": CountPool("memory", 8, clock)}
    sched = ElasticScheduler(pools, depth=depth, clock=clock)
    # some work already running, with known predicted ends
    busy = rng.randint(0, cap - 2)
    if busy:
        sched.submit(Action({"memory": 0.5}, key="cpu", units=(busy,), t_ori=busy * rng.uniform(1, 30),
                            kind="running"))
        sched.step()
    running_ends = [r.predicted_end for r in sched.running.values() for _ in range(r.units)]
    clock.t = 1.0
    waiting = [random_action(rng, 4) for _ in range(rng.randint(1, 5))]
    for a in waiting:
        sched.submit(a)
    expected_ids, expected_obj = ref_decide(waiting, cap - busy, 8 - (0.5 if busy else 0),
                                            running_ends, depth, clock.t)
    decisions = sched.decide()
    assert [d.action.id for d in decisions] == expected_ids
    # the allocation the scheduler picked achieves the exhaustive optimum for the kept set
    kept = [d.action for d in decisions]
    chosen = sum(a.duration(d.units) for a, d in zip(kept, decisions))
    best = min(sum(a.duration(k) for a, k in zip(kept, alloc))
               for alloc in itertools.product(*[a.units for a in kept]) if sum(alloc) <= cap - busy)
    assert chosen == pytest.approx(best)


def test_non_scalable_actions_start_at_minimum_in_fcfs_order():
    clock = Clock()
    sched = ElasticScheduler({"cpu": CountPool("cpu", 3, clock)}, clock=clock)
    acts = [Action({}, key="cpu", units=(1,), kind="tool") for _ in range(5)]
    for a in acts:
        sched.submit(a)
    started = sched.step()
    assert [r.action.id for r in started] == [a.id for a in acts[:3]]
    assert all(r.units == 1 for r in started)


def test_head_of_line_blocks_later_actions():
    clock = Clock()
    sched = ElasticScheduler({"cpu": CountPool("cpu", 4, clock)}, clock=clock)
    sched.submit(Action({}, key="cpu", units=(3,), kind="big"))
    sched.step()
    sched.submit(Action({}, key="cpu", units=(2,), kind="blocked"))
    sched.submit(Action({}, key="cpu", units=(1,), kind="small"))
    assert sched.step() == []  # FCFS: the 1-core action does not jump the 2-core head


def test_unknown_resource_is_a_clear_error():
    sched = ElasticScheduler({"cpu": CountPool("cpu", 4)})
    with pytest.raises(ValueError, match="unmanaged resource.*'gpu'"):
        sched.submit(Action({"gpu": 1}))


@pytest.mark.parametrize("seed", range(10))
def test_vector_constraints_never_violated(seed):
    """Random mixed CPU/memory/GPU/concurrency workload, checking every pool after every event."""
    rng = random.Random(seed)
    clock = Clock()
    pools = {"cpu": CountPool("cpu", 16, clock), "memory": CountPool("memory", 32, clock),
             "gpu": GpuPool("gpu", nodes=2), "gpu_memory": CountPool("gpu_memory", 100, clock),
             "api": CountPool("api", 3, clock)}
    sched = ElasticScheduler(pools, clock=clock)
    pending = []

    def start(runs):
        for run in runs:
            pending.append((run.start + run.action.duration(run.units or None, default=1.0), run.action))
        pending.sort(key=lambda x: x[0])
        for name, pool in pools.items():
            assert pool.used <= pool.capacity + 1e-9, name

    for step in range(300):
        clock.t += rng.uniform(0, 2)
        kind = rng.choice(["tool", "test", "judge", "api"])
        if kind == "tool":
            a = Action({"memory": rng.uniform(0.5, 4)}, key="cpu", units=(1,), t_ori=rng.uniform(0.1, 3))
        elif kind == "test":
            a = Action({"memory": rng.uniform(1, 8)}, key="cpu", units=range(1, 9),
                       elasticity=amdahl(0.9), t_ori=rng.uniform(10, 60))
        elif kind == "judge":
            a = Action({"gpu_memory": rng.uniform(5, 40)}, key="gpu", units=(1, 2, 4, 8),
                       elasticity=amdahl(0.8), t_ori=rng.uniform(2, 20), service="judge")
        else:
            a = Action({"api": 1, "cpu": 1})
        sched.submit(a)
        start(sched.step())
        while pending and pending[0][0] <= clock.t:
            _, done = pending.pop(0)
            sched.finish(done)
            start(sched.step())
    assert pools["gpu"].peak <= 16 and pools["cpu"].peak <= 16 and pools["api"].peak <= 3
    assert len(sched.records) > 250


@pytest.mark.parametrize("explore,expect_start", [("smallest", True), ("spread", False)])
def test_explore_spread_can_wait_for_more_units(explore, expect_start):
    """2 cores free, 30 busy until t=1: Algorithm 2 as written (1..depth units) starts the long test
    now on 2 cores; 'spread' also prices waiting for 32 cores and evicts (waits)."""
    clock = Clock()
    sched = ElasticScheduler({"cpu": CountPool("cpu", 32, clock)}, depth=2, clock=clock, explore=explore)
    sched.submit(Action({}, key="cpu", units=(30,), t_ori=30.0, kind="busy"))
    sched.step()
    sched.submit(Action({}, key="cpu", units=range(1, 33), elasticity=amdahl(1.0), t_ori=1000.0,
                        kind="reward_test"))
    started = sched.step()
    assert bool(started) == expect_start
    if started:
        assert started[0].units == 2
    assert sched._first_choices(Action({}, key="cpu", units=range(1, 33), elasticity=amdahl(1.0),
                                       t_ori=1.0)) == ([1, 2] if explore == "smallest" else [1, 32])


@pytest.mark.parametrize("explore_depth", [1, 2, 3])
@pytest.mark.parametrize("seed", range(30))
def test_estimate_equals_the_plain_reference(seed, explore_depth):
    """ESTIMATE's fast path (one-unit actions in one heap sift) gives the reference's exact value."""
    rng = random.Random(100 + seed)
    sched = ElasticScheduler({"cpu": CountPool("cpu", 16)}, depth=explore_depth, clock=Clock())
    heap = [rng.choice([0.0, rng.uniform(0, 50)]) for _ in range(rng.randint(1, 12))]
    remaining = []
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.6:  # single-core, profiled tool call
            remaining.append(Action({}, key="cpu", units=(1,), t_ori=rng.uniform(0.1, 5), kind="tool"))
        else:
            remaining.append(random_action(rng, 4))
    got = sched._estimate(list(heap), remaining, 0.0)
    want = ref_estimate(heap, remaining, 0.0, explore_depth)
    assert got == pytest.approx(want) or (math.isinf(got) and math.isinf(want))
