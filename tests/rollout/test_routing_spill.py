"""Router spill_ratio: load-aware affinity overflows new trajectories to a fallback class, keeps sticky ones."""
import pytest

from rollart.rollout.proxy_config import ProxyConfig
from rollart.rollout.routing import Router
from rollart.rollout.worker_slot import WorkerSlot

AFFINITY = {"FrozenLake": "H800", "default": "H20"}


def router(**cfg) -> Router:
    slots = {n: WorkerSlot(n, hw, handle=None) for n, hw in (("a", "H800"), ("b", "H800"), ("c", "H20"))}
    return Router(slots, ProxyConfig(hw_affinity=AFFINITY, **cfg), dict(fallbacks=0, spills=0))


def test_strict_affinity_keeps_a_saturated_class():
    r = router()
    r.workers["c"].outstanding = 10_000
    assert r.pick("t", r.resolve_task("math")).name == "c"
    assert r.counters["spills"] == 0


def test_spills_when_own_class_is_more_than_ratio_times_as_loaded():
    r = router(spill_ratio=2.0)
    r.workers["c"].outstanding = 100
    r.workers["a"].outstanding, r.workers["b"].outstanding = 80, 60
    assert r.pick("t1", "H20").name == "c"  # 100 <= 2 x 60: stays on its own class
    r.workers["b"].outstanding = 40
    assert r.pick("t2", "H20").name == "b"  # 100 > 2 x 40: the least-loaded H800 takes it
    assert r.counters["spills"] == 1
    r.workers["c"].outstanding = 0  # an idle own class is always preferred
    assert r.pick("t3", "H20").name == "c"


def test_sticky_trajectory_stays_on_the_worker_it_spilled_to():
    r = router(spill_ratio=1.0)
    r.workers["c"].outstanding = 50
    first = r.pick("t", "H20")
    assert first.hw_class == "H800"
    r.remember("t", "", first)
    r.workers["c"].outstanding = 0
    first.outstanding = 500  # its prefix cache is there: the next turn follows it
    assert r.pick("t", "H20") is first


def test_fallback_list_limits_where_a_class_may_spill():
    r = router(spill_ratio=1.0, fallback={"H20": []})
    r.workers["c"].outstanding = 10_000
    assert r.pick("t", "H20").name == "c"
    r2 = router(spill_ratio=1.0, fallback={"H800": []})
    r2.workers["a"].outstanding = r2.workers["b"].outstanding = 10_000
    assert r2.pick("t", "H800").hw_class == "H800"  # prefill-heavy work never lands on the H20
    assert r2.pick("u", "H20").name == "c"


def test_ratio_below_one_is_rejected():
    with pytest.raises(ValueError, match="spill_ratio must be 0.*>= 1"):
        ProxyConfig(spill_ratio=0.5)
