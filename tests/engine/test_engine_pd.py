"""PD disaggregation in the engine: a prefill engine hands a prompt's K/V over (through the actor codec's frames), a
decode engine installs it and decodes; greedy output equals colocated generation token for token."""
import pytest
import torch

from rollart.actors.codec import pack_value, unpack_value
from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.types import GenerateRequest, InvalidRequestError, KVBlocks

from engine_helpers import random_prompts

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
FIRST = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
REST = SamplingParams(temperature=0, max_tokens=9, ignore_eos=True)


def over_the_wire(request: GenerateRequest) -> GenerateRequest:
    """Encode and decode as the actor runtime does; the K/V must travel as a separate (zero-copy) frame."""
    data, frames = pack_value(request)
    assert len(frames) == 1 and len(frames[0]) == request.kv.nbytes
    return unpack_value(data, frames)


def run_pd(prefill: LLMEngine, decode: LLMEngine, prompts):
    for i, p in enumerate(prompts):
        prefill.add_request(GenerateRequest(f"p{i}", p, FIRST, export_kv="frames"))
    firsts = {}
    while prefill.has_unfinished_requests():
        firsts.update({o.request_id: o for o in prefill.step()})
    for i, p in enumerate(prompts):
        first = firsts[f"p{i}"]
        assert first.kv is not None and first.kv.num_tokens == len(p)
        req = over_the_wire(GenerateRequest(f"d{i}", p + first.token_ids, REST, kv=first.kv))
        decode.add_request(req)
    rest = {}
    while decode.has_unfinished_requests():
        rest.update({o.request_id: o for o in decode.step()})
    return [firsts[f"p{i}"].token_ids + rest[f"d{i}"].token_ids for i in range(len(prompts))]


def test_pd_greedy_equals_colocated_and_the_decode_side_computes_no_prompt(tiny_model):
    prompts = random_prompts([5, 23, 40, 71])
    prompts.append(prompts[2][:17] + [7, 8, 9])                          # a shared first block
    colocated = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64))
    ref = [o.token_ids for o in colocated.generate(prompts, GREEDY)]
    prefill = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64))
    decode = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=128, block_size=8))  # pages differently
    assert run_pd(prefill, decode, prompts) == ref
    stats = decode.stats()
    assert stats.computed_prompt_tokens == 0 and stats.prefix_hit_tokens == 0
    assert stats.extra["imported_kv_tokens"] == sum(map(len, prompts))
    assert stats.extra["forward_tokens"] == 9 * len(prompts)             # decode tokens only: no prompt forward
    assert prefill.stats().extra["forward_tokens"] == sum(map(len, prompts))  # each prompt forwarded once, there


def test_imported_blocks_serve_the_decode_sides_prefix_cache(tiny_model):
    """Installed blocks are registered like computed ones: a later request with that prefix hits them."""
    prompt = random_prompts([48])[0]
    prefill = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64))
    decode = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64))
    run_pd(prefill, decode, [prompt])
    out = decode.generate([prompt + [3, 4]], GREEDY)[0]
    assert out.num_cached_tokens == 48
    assert out.token_ids == LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64)).generate(
        [prompt + [3, 4]], GREEDY)[0].token_ids


def test_kv_from_other_weights_is_recomputed_and_bad_kv_is_refused(tiny_model):
    prompt = random_prompts([30])[0]
    prefill = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64))
    prefill.add_request(GenerateRequest("p", prompt, FIRST, export_kv="frames"))
    first = prefill.step()[0]
    decode = LLMEngine(EngineConfig(model=tiny_model, num_kv_blocks=64))
    decode.version = 1                                                     # another policy version
    decode.add_request(GenerateRequest("d", prompt + first.token_ids, REST, kv=first.kv))
    while decode.has_unfinished_requests():
        decode.step()
    assert decode.stats().extra["imported_kv_tokens"] == 0 and decode.stats().computed_prompt_tokens == 31
    wrong = KVBlocks(num_tokens=30, dtype="float32", version=1, data=torch.zeros(1, 2, 30, 1, 4))
    with pytest.raises(InvalidRequestError, match="does not fit this model"):
        decode.add_request(GenerateRequest("bad", prompt + [5], REST, kv=wrong))
    with pytest.raises(InvalidRequestError, match="export_kv='pigeon'"):
        decode.add_request(GenerateRequest("bad", prompt, REST, export_kv="pigeon"))
    assert not decode.has_unfinished_requests()


@pytest.mark.cuda
def test_pd_over_cuda_ipc_between_worker_processes_equals_colocated(tiny_model):
    """Two worker processes on one GPU: the K/V crosses as a CUDA IPC handle (no frame), output as colocated."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (CUDA IPC hand-over of the K/V)")
    import asyncio

    from rollart.actors import ActorSystem
    from rollart.rollout.proxy import LLMProxy
    from rollart.rollout.proxy_config import ProxyConfig

    prompts = random_prompts([12, 50])
    engine = dict(model=str(tiny_model), num_kv_blocks=64, device="cuda", dtype="float32")
    ref = [o.token_ids for o in LLMEngine(EngineConfig(**engine)).generate(prompts, GREEDY)]

    async def main():
        async with ActorSystem() as system:
            workers = [await system.spawn("rollart.inference.worker:InferenceWorker", engine, name=c, hw_class=c)
                       for c in ("H800", "H20")]
            proxy = LLMProxy([(c, c, h) for c, h in zip(("H800", "H20"), workers)],
                             ProxyConfig(pd_prefill_class="H800", pd_decode_class="H20", pd_kv_transport="ipc"))
            outs = [await proxy.generate(f"t{i}", p, GREEDY) for i, p in enumerate(prompts)]
            return [o.token_ids for o in outs], proxy.counters, await workers[1].call("engine_stats")

    out, counters, decode = asyncio.run(main())
    assert out == ref
    assert counters["pd_kv_tokens"] == sum(map(len, prompts)) and counters["pd_reprefill_tokens"] == 0
    assert decode["computed_prompt_tokens"] == 0 and decode["imported_kv_tokens"] == sum(map(len, prompts))
