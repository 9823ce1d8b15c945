"""InferenceWorker command loop in-process on the tiny model: completion order, abort, cancel, update, suspend,
what the engine refuses (its declared capabilities included), typed messages, a simulated speed."""
import asyncio

import pytest

from rollart.engine import EngineCapabilities, EngineConfig, LLMEngine
from rollart.inference.worker import InferenceWorker
from rollart.messages import GetVersion
from rollart.types import (AbortRequest, GenerateRequest, InvalidRequestError, SamplingParams, UpdateWeights,
                           WeightBucket)

GREEDY = dict(temperature=0.0, ignore_eos=True)


def gen(worker, request_id, prompt, **sampling):
    """worker.generate with one typed request, as the proxy sends it."""
    return worker.generate(GenerateRequest(request_id, prompt, SamplingParams(**sampling)))


@pytest.fixture
async def worker(engine_config):
    w = InferenceWorker(engine_config, name="w0")
    yield w
    await w.shutdown()


async def test_greedy_matches_engine_alone(worker, engine_config):
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20]]
    results = await asyncio.gather(*(gen(worker, f"r{i}", p, **GREEDY, max_tokens=6 + i)
                                     for i, p in enumerate(prompts)))
    ref = LLMEngine(EngineConfig(**engine_config)).generate(
        prompts, [SamplingParams(max_tokens=6 + i, **GREEDY) for i in range(3)])
    for p, res, r in zip(prompts, results, ref):
        assert res.token_ids == r.token_ids and res.finish_reason == "length"
        assert res.logprobs == pytest.approx(r.logprobs, abs=1e-5)
        assert res.worker == "w0" and res.num_prompt_tokens == r.num_prompt_tokens == len(p)


async def test_each_request_returns_when_it_finishes(worker):
    long = asyncio.create_task(gen(worker, "long", [5, 6, 7], **GREEDY, max_tokens=120))
    await asyncio.sleep(0)
    short = await gen(worker, "short", [8, 9], **GREEDY, max_tokens=3)  # added while long runs
    assert len(short.token_ids) == 3
    assert not long.done()  # short was admitted between steps and finished first
    assert len((await long).token_ids) == 120


async def test_abort_and_idempotent_abort(worker):
    task = asyncio.create_task(gen(worker, "a", [5, 6, 7], **GREEDY, max_tokens=500))
    while worker.stats()["steps"] < 3:
        await asyncio.sleep(0.01)
    assert await worker.abort(AbortRequest("a")) is True
    res = await task
    assert res.finish_reason == "abort"
    assert await worker.abort(AbortRequest("a")) is False  # already gone
    assert await worker.abort(AbortRequest("never-existed")) is False
    await gen(worker, "b", [5], **GREEDY, max_tokens=2)  # the loop has applied the ABORT by now
    assert not worker.engine.has_unfinished_requests()


async def test_cancelling_generate_aborts_in_engine(worker):
    task = asyncio.create_task(gen(worker, "c", [5, 6, 7], **GREEDY, max_tokens=500))
    while "c" not in worker.engine.requests:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await gen(worker, "d", [5], **GREEDY, max_tokens=2)
    assert "c" not in worker.engine.requests and not worker.engine.has_unfinished_requests()
    assert worker.stats()["aborted"] == 1


async def test_update_mid_generation_tags_versions(worker, tiny_weights_v2):
    task = asyncio.create_task(gen(worker, "u", [5, 6, 7], **GREEDY, max_tokens=60))
    while worker.stats()["steps"] < 5:
        await asyncio.sleep(0.005)
    assert await worker.update_weights(UpdateWeights.of(WeightBucket.of(1, tiny_weights_v2))) == 1
    res = await task
    assert res.versions[0] == 0 and res.versions[-1] == 1
    assert res.versions == sorted(res.versions)  # old tokens keep version 0, later ones are 1
    assert await worker.get_version(GetVersion()) == 1


async def test_suspend_holds_steps_and_resume_continues(worker):
    await worker.suspend()
    task = asyncio.create_task(gen(worker, "s", [5, 6], **GREEDY, max_tokens=4))
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert not task.done() and worker.stats()["steps"] == 0
    await worker.resume()
    assert len((await task).token_ids) == 4


async def test_requests_the_engine_refuses_fail_alone(worker):
    good = asyncio.create_task(gen(worker, "g", [5, 6], **GREEDY, max_tokens=20))
    with pytest.raises(InvalidRequestError, match="max_model_len"):
        await gen(worker, "long", [5] * 5000, **GREEDY)  # longer than the context
    with pytest.raises(InvalidRequestError, match="vocabulary"):
        await gen(worker, "vocab", [5, 99999], **GREEDY)
    with pytest.raises(InvalidRequestError, match="already in flight"):
        await gen(worker, "g", [5], **GREEDY)
    assert len((await good).token_ids) == 20
    assert worker.stats()["failed"] == 2


async def test_finish_callback_and_prefix_stats(worker):
    seen = []
    worker.add_finish_callback(lambda rid, res: seen.append(rid))
    history = list(range(5, 70))
    first = await gen(worker, "t1", history, **GREEDY, max_tokens=4)
    second = await gen(worker, "t2", history + first.token_ids + [9, 9], **GREEDY, max_tokens=4)
    assert seen == ["t1", "t2"]
    assert second.num_cached_tokens >= 64  # the history's full blocks came from the prefix cache
    assert worker.stats()["prefix_hit_rate"] > 0


async def test_a_speed_config_wraps_the_engine_and_its_sleeps_hold_the_engine_thread_only(engine_config):
    """SIMULATED speed: every step lasts the simulated time, while the actor's event loop stays free; the stats
    count the real step seconds apart from the simulated ones."""
    w = InferenceWorker(engine_config, name="h20", hw_class="H20", speed=dict(hw_class="H20", time_scale=50.0))
    try:
        assert w.simulated is w.engine and isinstance(w.simulated.inner, LLMEngine)
        task = asyncio.create_task(gen(w, "p", [5, 6, 7], **GREEDY, max_tokens=4))
        lags = []
        while not task.done():  # each simulated step is ~350 ms: a blocked loop would lag that long
            t0 = asyncio.get_running_loop().time()
            await asyncio.sleep(0.005)
            lags.append(asyncio.get_running_loop().time() - t0 - 0.005)
        assert len((await task).token_ids) == 4 and len(lags) > 20 and max(lags) < 0.15
        st = w.stats()
        assert st["steps"] == 4 and st["simulated_scaled_seconds"] == pytest.approx(50 * st["simulated_seconds"])
        assert 0 < st["engine_seconds"] < 0.5 * st["simulated_scaled_seconds"]
    finally:
        await w.shutdown()
    plain = InferenceWorker(engine_config, name="cpu")
    try:
        await gen(plain, "p", [5, 6, 7], **GREEDY, max_tokens=2)
        st = plain.stats()
        assert plain.simulated is None and st["simulated_seconds"] == st["simulated_scaled_seconds"] == 0.0
        assert st["engine_seconds"] > 0
    finally:
        await plain.shutdown()


async def test_an_engine_without_kv_transfer_refuses_pd_requests_alone(engine_config):
    class CoreOnly(LLMEngine):
        capabilities = EngineCapabilities()

    w = InferenceWorker(engine_obj=CoreOnly(EngineConfig(**engine_config)), name="core")
    try:
        with pytest.raises(InvalidRequestError, match="cannot hand over K/V; PD disaggregation needs engine.backend"):
            await w.generate(GenerateRequest("pd", [5, 6], SamplingParams(max_tokens=1), export_kv="frames"))
        assert len((await gen(w, "ok", [5, 6], **GREEDY, max_tokens=3)).token_ids) == 3
        assert w.stats()["failed"] == 1 and w.stats()["finished"] == 1
    finally:
        await w.shutdown()
