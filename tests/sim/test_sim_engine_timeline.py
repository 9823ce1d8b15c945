"""EngineTimeline, one emulated engine: a macro-step shortened when a request arrives keeps only the steps begun,
a request of unknown length decodes until it is told, and new weights make the running requests recompute."""
import pytest

from rollart.hardware import SpeedModel, StepWork
from rollart.sim.engine_timeline import EmulatedRequest, EngineTimeline


def _timeline() -> EngineTimeline:
    return EngineTimeline(SpeedModel(hw_class="H800"))


def _run_out(tl: EngineTimeline) -> list:
    finished = []
    while tl.start_step() is not None:
        finished += tl.finish_step()
    return finished


def test_a_macro_step_runs_to_the_first_finish_and_truncate_keeps_the_steps_begun():
    tl = _timeline()
    tl.submit(EmulatedRequest("a", prefill_left=10, decode_total=101))
    tl.start_step()  # the prefill (and the first token)
    assert tl.finish_step() == []
    dt = tl.start_step()  # 100 identical decode steps at once
    r = tl.running[0]
    assert r.decoded == 101 and r.context == 111
    one = SpeedModel(hw_class="H800").step_seconds(StepWork(decode_seqs=1, decode_context_tokens=11 + 49))
    assert dt == pytest.approx(100 * one, rel=0.01)
    busy = tl.busy_time
    kept = tl.truncate(2.5 * dt / 100)  # a request arrived during the third step: it joins after it
    assert kept == pytest.approx(3 * dt / 100)
    assert (r.decoded, r.context) == (4, 14)
    assert tl.busy_time == pytest.approx(busy - 97 * dt / 100)
    assert tl.finish_step() == [] and [f.key for f in _run_out(tl)] == ["a"] and r.decoded == 101


def test_a_single_step_under_way_is_not_shortened():
    tl = _timeline()
    tl.submit(EmulatedRequest("a", prefill_left=2000, decode_total=10))
    dt = tl.start_step()  # a prefill step
    assert dt > 0 and tl.truncate(dt / 10) is None and tl.running[0].prefill_left == 0


def test_a_horizon_bounds_the_macro_step():
    tl = _timeline()
    tl.submit(EmulatedRequest("a", prefill_left=0, decode_total=1000, context=10))
    dt = tl.start_step(horizon_s=0.05)
    assert 0.04 < dt <= 0.05 + 0.01 and 1 < tl.running[0].decoded < 1000


def test_a_request_of_unknown_length_decodes_until_told():
    tl = _timeline()
    r = EmulatedRequest("a", prefill_left=5, decode_total=None)
    tl.submit(r)
    for _ in range(3):
        tl.start_step(horizon_s=0.1)
        assert tl.finish_step() == []
    assert r.decoded > 3  # it ran on in macro-steps as long as the horizon allowed
    tl.set_decode_total(r, 2)  # shorter than what it decoded: it is done at the end of the next step
    tl.start_step()
    assert tl.finish_step() == [r]


def test_new_weights_recompute_the_running_requests_and_drop_the_cache():
    tl = _timeline()
    tl.cache("idle", 500)
    r = EmulatedRequest("a", prefill_left=20, decode_total=50)
    tl.submit(r)
    tl.start_step()
    tl.finish_step()
    tl.recompute()
    assert (r.prefill_left, r.context) == (21, 0) and tl.take_cached("idle") == 0
    assert _run_out(tl) == [r] and r.decoded == 50 and r.context == 70  # the recompute step yields the next token


def test_a_full_kv_evicts_idle_caches_first_then_makes_a_request_wait():
    tl = _timeline()
    tl.kv_capacity = 1000
    tl.cache("idle", 600)
    tl.submit(EmulatedRequest("a", prefill_left=500, decode_total=10))
    tl.submit(EmulatedRequest("b", prefill_left=500, decode_total=10))
    tl.start_step()
    assert [r.key for r in tl.running] == ["a"] and [r.key for r in tl.waiting] == ["b"]
    assert tl.take_cached("idle") == 0  # evicted to let "a" in
    assert sorted(r.key for r in _run_out(tl)) == ["a", "b"]
