"""LLMEngine.update_weights mid-generation: K/V recomputed under the new weights, tokens and versions tagged right."""
import pytest
import torch
from safetensors.torch import load_file

from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.types import GenerateRequest, WeightBucket
from rollart.models import load_model

from engine_helpers import greedy_reference, random_prompts

N = 20


@pytest.fixture(scope="module")
def models(tiny_model, tiny_model_v2):
    return load_model(tiny_model), load_model(tiny_model_v2)


def _step_until_tokens(engine, k):
    """Step until every request has exactly k output tokens (all decode in lockstep after one prefill)."""
    while min(len(s.output_token_ids) for s in engine.requests.values()) < k:
        assert not engine.step()


def test_update_mid_generation_recomputes_kv_under_new_weights(tiny_model, tiny_model_v2, models):
    v1, v2 = models
    prompts = random_prompts([13, 37, 64], seed=1)
    engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=64))
    sp = SamplingParams(temperature=0, max_tokens=N, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(GenerateRequest(f"r{i}", p, sp))
    switch = 7
    _step_until_tokens(engine, switch)
    engine.update_weights(WeightBucket.of(1, load_file(str(tiny_model_v2 / "model.safetensors"))))
    assert engine.version == 1 and engine.stats().recomputed_tokens > 0
    assert engine.block_manager.num_free_blocks == 64  # every block dropped; K/V will be rebuilt
    done = {}
    while engine.has_unfinished_requests():
        done.update((o.request_id, o) for o in engine.step())
    for i, p in enumerate(prompts):
        out = done[f"r{i}"]
        ref, ref_lp = greedy_reference(v1, p, N, switch_at=switch, model_after=v2)
        assert out.token_ids == ref
        assert out.versions == [0] * switch + [1] * (N - switch)
        torch.testing.assert_close(torch.tensor(out.logprobs), torch.tensor(ref_lp), atol=1e-4, rtol=0)
        # the tokens after the switch are not what the old weights would have produced
        assert greedy_reference(v1, p, N)[0][switch:] != ref[switch:]


def test_update_invalidates_prefix_cache_and_checks_names(tiny_model, tiny_model_v2, models):
    engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=64))
    p = random_prompts([50], seed=2)[0]
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    engine.generate([p], sp)
    assert engine.generate([p], sp)[0].num_cached_tokens == 48
    new = load_file(str(tiny_model_v2 / "model.safetensors"))
    with pytest.raises(KeyError, match="unknown weight"):
        engine.update_weights(WeightBucket.of(5, [("model.layers.99.mlp.up_proj.weight", torch.zeros(1))]))
    with pytest.raises(ValueError, match="shape"):
        engine.update_weights(WeightBucket.of(5, [("model.norm.weight", torch.zeros(3))]))
    assert engine.version == 0  # a rejected update changes nothing
    engine.update_weights(WeightBucket.of(1, new))
    out = engine.generate([p], sp)[0]
    assert out.num_cached_tokens == 0 and out.versions == [1] * 8
    assert out.token_ids == greedy_reference(models[1], p, 8)[0]


def test_namespaces_keep_a_jobs_prefixes_across_swaps_until_its_weights_change(tiny_model, tiny_model_v2, models):
    """Two jobs' weights swapped in and out of one engine: a swap back with the same weights reuses the job's
    cached prefixes (same tokens as without a cache); new weights of the job drop them (output equals a fresh
    engine holding the new weights), the other job's stay."""
    a = load_file(str(tiny_model / "model.safetensors"))
    b = load_file(str(tiny_model_v2 / "model.safetensors"))
    engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=64))
    p, q = random_prompts([50, 40], seed=3)
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    engine.update_weights(WeightBucket.of(0, a), namespace="A")
    first = engine.generate([p], sp)[0]
    engine.update_weights(WeightBucket.of(0, b), namespace="B")
    assert engine.generate([p], sp)[0].num_cached_tokens == 0   # A's K/V never serves B's weights
    engine.generate([q], sp)
    engine.update_weights(WeightBucket.of(0, a), namespace="A", reuse_cached=True)
    again = engine.generate([p], sp)[0]
    assert again.num_cached_tokens == 48 and again.token_ids == first.token_ids
    assert again.token_ids == greedy_reference(models[0], p, 8)[0]
    engine.update_weights(WeightBucket.of(1, b), namespace="A")  # job A's weights changed
    out = engine.generate([p], sp)[0]
    assert out.num_cached_tokens == 0 and out.versions == [1] * 8
    assert out.token_ids == greedy_reference(models[1], p, 8)[0]
    engine.update_weights(WeightBucket.of(0, b), namespace="B", reuse_cached=True)
    assert engine.generate([q], sp)[0].num_cached_tokens == 32  # B's prefixes outlived A's update
    engine.update_weights(WeightBucket.of(2, a))                  # no namespace: the whole cache goes
    assert engine.block_manager.cached_blocks() == {}
