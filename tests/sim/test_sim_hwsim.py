"""Rollout simulator: every trajectory finishes, prefill-heavy favours H800, decode-heavy H20, KV pressure evicts."""
import pytest

from rollart.emulation import TaskProfile
from rollart.sim.hwsim import RolloutSim, batch

PREFILL_HEAVY = TaskProfile("fl", 600, (10, 10), 512, (10, 10))
DECODE_HEAVY = TaskProfile("math", 300, (2, 2), 100, (3000, 3000))


def _time(pools, task, n, **kw):
    return RolloutSim(pools, "Qwen3-8B", 1, {"default": next(iter(pools))}, **kw).run(batch([task], n))


def test_single_trajectory_time_is_the_sum_of_its_steps():
    from rollart.hardware import SpeedModel, StepWork
    task = TaskProfile("one", 100, (1, 1), 0, (5, 5), env_latency_s=0.0)
    t = _time({"H800": 1}, task, 1)
    m = SpeedModel(hw_class="H800")
    prefill = m.step_seconds(StepWork(prefill_tokens=100, prefill_context=50))
    decodes = sum(m.step_seconds(StepWork(decode_seqs=1, decode_context_tokens=101 + i)) for i in range(4))
    assert t == pytest.approx(prefill + decodes, rel=1e-3)


def test_affinity_directions_at_equal_cost():
    assert _time({"H800": 2}, PREFILL_HEAVY, 32) < _time({"H20": 6}, PREFILL_HEAVY, 32)
    assert _time({"H20": 6}, DECODE_HEAVY, 32) < _time({"H800": 2}, DECODE_HEAVY, 32)


def test_prefix_cache_makes_later_turns_cheaper_than_recomputing():
    sim = RolloutSim({"H800": 1}, "Qwen3-8B", 1, {"default": "H800"})
    cached = sim.run(batch([PREFILL_HEAVY], 4))
    no_room = RolloutSim({"H800": 1}, "Qwen3-8B", 1, {"default": "H800"})
    for e in no_room.engines["H800"]:
        e.timeline.kv_capacity = 6000  # one trajectory's history barely fits: idle caches get evicted
    assert no_room.run(batch([PREFILL_HEAVY], 4)) > cached


def test_routing_to_a_missing_class_is_an_error():
    with pytest.raises(ValueError, match="no engines"):
        RolloutSim({"H800": 1}, "Qwen3-8B", 1, {"default": "H20"}).run(batch([PREFILL_HEAVY], 1))


def test_observer_sees_every_request_and_paired_runs_roll_out_the_same_trajectories():
    seen = []
    task = TaskProfile("one", 100, (3, 3), 20, (5, 5), env_latency_s=0.0)
    RolloutSim({"H800": 1, "H20": 1}, "Qwen3-8B", 1, {}, observer=lambda *a: seen.append(a)).run(batch([task], 2))
    assert len(seen) == 6 and {s[1] for s in seen} == {"H800", "H20"}  # no affinity: both classes serve
    first = [s for s in seen if s[5] == seen[0][5]]
    assert [s[2] for s in first] == [100, 20, 20]  # later turns prefill only the observation (prefix cache)
    assert all(s[3] == 5 and s[4] > 0 for s in seen)
    # paired: the same seed gives the same trajectories whatever the routing (here: identical turn counts)
    mix = [PREFILL_HEAVY, TaskProfile("var", 100, (1, 9), 10, (5, 500))]
    tokens = {}
    for routing in ({}, {"default": "H20"}):
        obs = []
        RolloutSim({"H800": 1, "H20": 1}, "Qwen3-8B", 1, routing, seed=3, observer=lambda *a: obs.append(a),
                   paired=True).run(batch(mix, 8))
        tokens[str(routing)] = sorted((o[5], o[3]) for o in obs)
    assert tokens["{}"] == tokens[str({"default": "H20"})]


def test_decode_per_prefill_tells_a_decode_heavy_profile_from_a_prefill_heavy_one():
    assert DECODE_HEAVY.decode_per_prefill == pytest.approx(2 * 3000 / (300 + 100))  # the second turn adds 100
    assert PREFILL_HEAVY.decode_per_prefill == pytest.approx(10 * 10 / (600 + 9 * 512))
