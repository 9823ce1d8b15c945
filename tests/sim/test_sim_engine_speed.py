"""SimulatedSpeedEngine on the tiny torch engine: an Engine itself that passes requests, weights and capabilities
through unchanged, times each step from the engine's real work (a long prompt costs more on H20 than on H800), and
sleeps for the simulated time minus the real step's."""
import time

import pytest

from rollart.engine import Engine, EngineConfig, LLMEngine, SamplingParams
from rollart.hardware import SpeedModelConfig
from rollart.sim.engine_speed import SimulatedSpeedEngine
from rollart.types import GenerateRequest, WeightBucket

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3))


def _engine(tiny_model):
    return LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64, seed=0))


def _run(engine, prompts, sampling=GREEDY):
    for i, p in enumerate(prompts):
        engine.add_request(GenerateRequest(f"r{i}", p, sampling))
    done, steps = {}, []
    while engine.has_unfinished_requests():
        t0 = time.perf_counter()
        done.update({o.request_id: o for o in engine.step()})
        steps.append(time.perf_counter() - t0)
    return [done[f"r{i}"] for i in range(len(prompts))], steps


def test_it_is_an_engine_that_passes_everything_through(tiny_model):
    inner = _engine(tiny_model)
    sim = SimulatedSpeedEngine(inner, dict(hw_class="H800", time_scale=0.0))  # a dict, as it crosses processes
    assert isinstance(sim, Engine) and sim.speed.cfg == SpeedModelConfig(hw_class="H800", time_scale=0.0)
    assert sim.capabilities == inner.capabilities and sim.tokenizer is inner.tokenizer
    assert sim.weights_device == inner.weights_device
    assert [n for n, _ in sim.named_weights()] == [n for n, _ in inner.named_weights()]
    prompts = [[5, 6, 7], list(range(20, 45))]
    got, _ = _run(sim, prompts)
    ref, _ = _run(_engine(tiny_model), prompts)
    assert [o.token_ids for o in got] == [o.token_ids for o in ref]
    assert sim.stats() is inner.stats() and sim.stats().generated_tokens == 12
    norm = dict(inner.named_weights())["model.norm.weight"].detach()
    sim.update_weights(WeightBucket.of(3, {"model.norm.weight": norm * 2}))
    assert sim.version == inner.version == 3
    sim.add_request(GenerateRequest("a", [5, 6], GREEDY))
    assert sim.abort_request("a") is True and sim.abort_request("a") is False
    assert not sim.has_unfinished_requests()


def test_simulated_seconds_come_from_the_engines_real_work(tiny_model):
    """A 500-token prompt is prefill-bound: it costs less on H800 (compute) than on H20 (bandwidth)."""
    seconds = {}
    for hw in ("H800", "H20"):
        sim = SimulatedSpeedEngine(_engine(tiny_model), SpeedModelConfig(hw_class=hw, time_scale=0.0))
        _run(sim, [list(range(3, 503))], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
        seconds[hw] = sim.seconds()
        assert seconds[hw]["simulated_scaled_seconds"] == 0.0 and seconds[hw]["engine_seconds"] > 0
    assert 0 < seconds["H800"]["simulated_seconds"] < seconds["H20"]["simulated_seconds"]


def test_each_step_sleeps_the_simulated_time_minus_the_real_one(tiny_model):
    scale = 50.0  # a Qwen3-8B decode step on H20 is ~7 ms simulated: ~350 ms here, far above the tiny model's
    sim = SimulatedSpeedEngine(_engine(tiny_model), SpeedModelConfig(hw_class="H20", time_scale=scale))
    _, steps = _run(sim, [[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))
    s = sim.seconds()
    assert s["simulated_scaled_seconds"] == pytest.approx(scale * s["simulated_seconds"])
    assert sum(steps) >= 0.98 * s["simulated_scaled_seconds"]      # each step lasted the simulated time
    assert sum(steps) <= s["simulated_scaled_seconds"] + s["engine_seconds"] + 0.05 * len(steps)  # not real + it
    assert s["engine_seconds"] < 0.5 * s["simulated_scaled_seconds"]  # the real work is counted apart
    assert min(steps) >= 0.9 * scale * sim.speed.cfg.step_overhead_s  # no step is shorter than its overhead
