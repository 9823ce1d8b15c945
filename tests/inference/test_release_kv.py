"""An engine frees its KV cache while the trainer steps and takes it back after (one GPU shared with the trainer,
``PipelineConfig.release_kv_while_training``), on the CPU: the memory goes, what runs is aborted, what arrives
meanwhile waits, and the same greedy tokens come after as before."""
import asyncio

import pytest

from rollart.engine import EngineConfig, LLMEngine
from rollart.inference.worker import InferenceWorker
from rollart.messages import ReclaimKV, ReleaseKV
from rollart.types import GenerateRequest, SamplingParams

GREEDY = dict(temperature=0.0, ignore_eos=True)
PROMPTS = [[5, 6, 7], [9, 10, 11, 12, 13, 14, 15], [20]]


def gen(worker, request_id, prompt, max_tokens=6):
    return worker.generate(GenerateRequest(request_id, prompt, SamplingParams(max_tokens=max_tokens, **GREEDY)))


def test_the_engine_frees_its_kv_cache_and_gets_the_same_tokens_after_taking_it_back(engine_config):
    engine = LLMEngine(EngineConfig(**engine_config))
    params = SamplingParams(max_tokens=8, **GREEDY)
    before = [r.token_ids for r in engine.generate(PROMPTS, params)]
    cache = engine.runner.kv_cache
    size = cache.numel() * cache.element_size()
    del cache
    assert engine.release_kv() == size and engine.runner.kv_cache is None and engine.kv_released
    with pytest.raises(RuntimeError, match="KV cache is released"):
        engine.step()
    assert engine.reclaim_kv() == size and not engine.kv_released
    assert engine.stats().extra["free_kv_blocks"] == engine.num_blocks  # empty: nothing cached survives
    assert [r.token_ids for r in engine.generate(PROMPTS, params)] == before


async def test_a_worker_aborts_what_runs_at_release_and_serves_what_waited_after_reclaim(engine_config):
    worker = InferenceWorker(engine_config, name="w0")
    try:
        first = await gen(worker, "warm", PROMPTS[0])
        running = asyncio.ensure_future(gen(worker, "long", PROMPTS[1], max_tokens=10_000))
        while not worker.engine.has_unfinished_requests():
            await asyncio.sleep(0.01)
        freed = await asyncio.wait_for(worker.release_kv(ReleaseKV()), 30)
        assert freed > 0 and worker.stats()["kv_released"]
        assert (await asyncio.wait_for(running, 30)).finish_reason == "abort"
        waiting = asyncio.ensure_future(gen(worker, "later", PROMPTS[0]))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # no KV cache: it waits, it is not lost
        assert await asyncio.wait_for(worker.reclaim_kv(ReclaimKV()), 30) == freed
        later = await asyncio.wait_for(waiting, 30)
        assert later.finish_reason == "length" and later.token_ids == first.token_ids
    finally:
        await worker.shutdown()
