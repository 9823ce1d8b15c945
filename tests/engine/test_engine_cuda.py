"""LLMEngine on a GPU (marked cuda; skipped, saying so, without one): everything on the device, the KV cache sized
from free memory, CUDA-graph decode equal to eager decode and to the CPU reference, bf16 by default."""
import pytest
import torch

from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.models import load_model

from engine_helpers import greedy_reference, random_prompts

pytestmark = pytest.mark.cuda

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


@pytest.fixture(autouse=True)
def need_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")


def test_auto_puts_everything_on_the_gpu_in_bf16_and_sizes_kv_from_free_memory(tiny_model):
    engine = LLMEngine(EngineConfig(model=str(tiny_model), gpu_memory_utilization=0.5, max_num_seqs=16))
    assert engine.placement.is_cuda and engine.runner.kernel == "triton" and engine.runner.graphs is not None
    assert {p.device.type for p in engine.model.parameters()} == {"cuda"}
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    kv = engine.runner.kv_cache
    assert kv.is_cuda and kv.dtype is torch.bfloat16
    total = torch.cuda.get_device_properties(kv.device).total_memory
    assert kv.numel() * kv.element_size() <= 0.5 * total and engine.num_blocks > 1000
    outs = engine.generate(random_prompts([5, 40, 17]), SamplingParams(temperature=1.0, top_k=20, max_tokens=16,
                                                                       seed=1, ignore_eos=True))
    assert all(len(o.token_ids) == 16 and all(v == 0 for v in o.versions) for o in outs)


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_fp32_greedy_equals_cpu_reference(tiny_model, graphs):
    model = load_model(tiny_model)
    prompts = random_prompts([1, 7, 16, 33, 70, 5, 129])
    engine = LLMEngine(EngineConfig(model=str(tiny_model), device="cuda", dtype="float32", num_kv_blocks=256,
                                    max_num_seqs=8, cuda_graphs=graphs))
    for p, o in zip(prompts, engine.generate(prompts, GREEDY)):
        ref, ref_lp = greedy_reference(model, p, GREEDY.max_tokens)
        assert o.token_ids == ref
        torch.testing.assert_close(torch.tensor(o.logprobs), torch.tensor(ref_lp), atol=1e-3, rtol=0)


def test_graph_replay_equals_eager_in_bf16_with_sampling(tiny_model):
    prompts = random_prompts([3, 18, 50, 9, 27], seed=3)
    sp = [SamplingParams(temperature=0.8, top_p=0.9, max_tokens=20, seed=i, ignore_eos=True) for i in range(5)]
    runs = [LLMEngine(EngineConfig(model=str(tiny_model), device="cuda", dtype="bfloat16", num_kv_blocks=128,
                                   max_num_seqs=8, cuda_graphs=g)).generate(prompts, sp) for g in (True, False)]
    for a, b in zip(*runs):
        assert a.token_ids == b.token_ids


def test_releasing_the_kv_cache_gives_its_memory_back_to_the_device(tiny_model):
    """release_kv_while_training on one GPU: the cache's bytes return to the device (the trainer can take them), the
    graphs come back with the cache, and greedy decoding is the same after."""
    engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=4096, max_num_seqs=8))
    prompts = random_prompts([5, 40, 17])
    before = [o.token_ids for o in engine.generate(prompts, GREEDY)]
    device = engine.runner.kv_cache.device
    torch.cuda.synchronize(device)
    held = torch.cuda.memory_reserved(device)
    freed = engine.release_kv()
    assert freed > 0 and held - torch.cuda.memory_reserved(device) >= freed  # gone from the caching allocator too
    assert engine.reclaim_kv() == freed and engine.runner.graphs is not None
    assert [o.token_ids for o in engine.generate(prompts, GREEDY)] == before
