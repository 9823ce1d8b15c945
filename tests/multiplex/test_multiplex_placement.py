"""Placement: segment-tree range minimum, interval-set fitting with bisect, cyclic projection with wrap,
micro-shifts, cold start -> warm start -> repack, and that no node slot is ever committed twice under
random placements and releases."""
import random

import pytest

from rollart.multiplex.placer import IntervalSet, Placer, SegmentTree, Trace


def test_segment_tree_matches_brute_force():
    rng = random.Random(0)
    vals = [rng.randrange(10) for _ in range(37)]
    tree = SegmentTree(vals)
    for _ in range(300):
        a = rng.randrange(37); b = rng.randrange(a + 1, 38)
        if rng.random() < 0.5:
            d = rng.randrange(-3, 4)
            tree.add(a, b, d)
            for i in range(a, b):
                vals[i] += d
        else:
            assert tree.min(a, b) == min(vals[a:b])


def test_interval_set_reserve_release_merge():
    s = IntervalSet(100)
    s.reserve(10, 20); s.reserve(30, 40)
    assert s.fits(0, 10) and s.fits(20, 30) and not s.fits(15, 25) and not s.fits(5, 11)
    with pytest.raises(ValueError):
        s.reserve(35, 45)
    s.release(10, 20)
    assert s.fits(0, 30) and s.free_slots() == 90
    s.release(30, 40)
    assert (s.starts, s.ends) == ([0], [100])


def test_second_job_is_micro_shifted_into_the_first_jobs_gap():
    p = Placer(num_nodes=1, horizon=40)
    t = Trace(period=10, segments=[(0, 3)])
    a = p.warm_start("a", t)
    b = p.warm_start("b", t)
    assert a.shift == 0 and b.shift == 3 and a.nodes == b.nodes == [0]
    c = p.warm_start("c", Trace(period=10, segments=[(0, 5)]))
    assert c is None  # only 4 free slots per period remain


def test_windows_wrap_around_the_ring():
    p = Placer(num_nodes=1, horizon=20)
    wins = p.windows(Trace(period=20, segments=[(10, 8)]), shift=5)
    assert wins == [(0, 3), (15, 20)]


def test_cold_start_then_repack_frees_dedicated_nodes():
    p = Placer(num_nodes=2, horizon=60)
    cold = p.cold_start("new", 1)
    assert cold.dedicated and p.capacity.min(0, 60) == 1
    p.warm_start("old", Trace(period=20, segments=[(0, 5)]))
    assert p.cold_start("another", 1) is None  # no idle node left
    warm = p.repack("new", Trace(period=20, segments=[(2, 4)]))
    assert not warm.dedicated
    reserved = sum(60 - n.free_slots() for n in p.nodes)
    assert reserved == 3 * 5 + 3 * 4  # the whole-horizon reservation is gone, only the two traces remain


@pytest.mark.parametrize("prefer", ["spread", "pack"])
def test_random_load_never_overcommits(prefer):
    rng = random.Random(1)
    horizon, nodes = 120, 4
    p = Placer(nodes, horizon, prefer=prefer)
    live = []
    for step in range(200):
        if live and rng.random() < 0.35:
            p.release(live.pop(rng.randrange(len(live))))
        else:
            period = rng.choice([20, 30, 40, 60])
            segs, t = [], 0
            for _ in range(rng.randint(1, 3)):
                t += rng.randrange(0, 5)
                d = rng.randint(1, 8)
                if t + d > period:
                    break
                segs.append((t, d)); t += d
            if not segs:
                continue
            job = f"j{step}"
            if p.warm_start(job, Trace(period, segs), n=rng.choice([1, 1, 2])):
                live.append(job)
        # independent recount: every slot of every node reserved at most once, capacity tree consistent
        used = [[0] * horizon for _ in range(nodes)]
        for pl in p.placed.values():
            for node in pl.nodes:
                for a, b in pl.windows:
                    for s in range(a, b):
                        used[node][s] += 1
        assert max(max(u) for u in used) <= 1
        for s in range(0, horizon, 7):
            assert p.capacity.min(s, s + 1) == nodes - sum(used[n][s] for n in range(nodes))


def test_warm_start_restricted_to_candidate_nodes_and_refuses_a_second_placement():
    p = Placer(num_nodes=3, horizon=40)
    t = Trace(period=10, segments=[(0, 6)])
    assert p.warm_start("a", t, nodes=[2]).nodes == [2]
    assert p.warm_start("b", t, nodes=[2]) is None  # node 2 has only 4 free slots per period; 0 and 1 not allowed
    assert p.warm_start("b", t, nodes=[1, 2]).nodes == [1]
    with pytest.raises(ValueError, match="already placed"):
        p.warm_start("a", t)
    with pytest.raises(ValueError, match="nodes must lie"):
        p.warm_start("c", t, nodes=[3])
    assert p.free_share() == [1.0, 0.4, 0.4]
