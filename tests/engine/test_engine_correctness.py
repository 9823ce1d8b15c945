"""LLMEngine (torch backend): greedy tokens and logprobs equal a full-recompute reference, incl. chunked prefill,
preemption under a tight KV budget, and seeded sampling."""
import pytest
import torch

from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.models import load_model

from engine_helpers import greedy_reference, random_prompts

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def model(tiny_model):
    return load_model(tiny_model)


def _engine(path, **kw):
    kw.setdefault("num_kv_blocks", 256)
    return LLMEngine(EngineConfig(model=str(path), **kw))


@pytest.mark.parametrize("kw", [{}, {"max_num_batched_tokens": 24}, {"block_size": 4}],
                         ids=["default", "chunked_prefill", "block4"])
def test_greedy_equals_full_recompute_mixed_lengths(tiny_model, model, kw):
    prompts = random_prompts([1, 7, 16, 33, 70, 5, 129])
    outs = _engine(tiny_model, **kw).generate(prompts, GREEDY)
    for p, o in zip(prompts, outs):
        ref, ref_lp = greedy_reference(model, p, GREEDY.max_tokens)
        assert o.token_ids == ref
        assert o.num_prompt_tokens == len(p) and o.finish_reason == "length" and o.versions == [0] * len(ref)
        torch.testing.assert_close(torch.tensor(o.logprobs), torch.tensor(ref_lp), atol=1e-4, rtol=0)


def test_sampled_logprobs_equal_trainer_forward(tiny_model, model):
    """Logprobs are log_softmax of the raw logits, whatever temperature/top-k/top-p drew the token."""
    prompts = random_prompts([9, 40, 21], seed=1)
    params = [SamplingParams(temperature=0.7, max_tokens=30, seed=1, ignore_eos=True),
              SamplingParams(temperature=1.3, top_k=20, max_tokens=30, seed=2, ignore_eos=True),
              SamplingParams(temperature=1.0, top_p=0.8, max_tokens=30, seed=3, ignore_eos=True)]
    outs = _engine(tiny_model).generate(prompts, params)
    for p, o in zip(prompts, outs):
        full = torch.tensor([p + o.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(full)[0].float(), -1)            # (T, V)
        trainer = logp[len(p) - 1:-1].gather(1, torch.tensor(o.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(o.logprobs), trainer, atol=1e-4, rtol=0)


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_model):
    p = random_prompts([12], seed=2)[0]
    sp = SamplingParams(temperature=1.0, max_tokens=20, seed=123, ignore_eos=True)
    alone = _engine(tiny_model).generate([p], sp)[0].token_ids
    others = random_prompts([5, 30, 50], seed=3)
    mixed = _engine(tiny_model).generate(others + [p], [SamplingParams(temperature=1.0, seed=9, max_tokens=20)] * 3 + [sp])
    assert mixed[-1].token_ids == alone
    other_seed = _engine(tiny_model).generate([p], SamplingParams(temperature=1.0, max_tokens=20, seed=124, ignore_eos=True))
    assert other_seed[0].token_ids != alone


def test_top_k_one_is_greedy(tiny_model, model):
    p = random_prompts([15], seed=4)[0]
    out = _engine(tiny_model).generate([p], SamplingParams(temperature=1.5, top_k=1, max_tokens=12, seed=0, ignore_eos=True))[0]
    assert out.token_ids == greedy_reference(model, p, 12)[0]


def test_preemption_under_tight_kv_budget_gives_same_tokens(tiny_model, model):
    prompts = random_prompts([20, 31, 9, 26, 14, 40], seed=5)
    sp = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    # 6 requests need ~6 x 4 blocks of 16 at the end; 12 blocks forces preemption and recompute
    engine = _engine(tiny_model, num_kv_blocks=12, block_size=16)
    outs = engine.generate(prompts, sp)
    assert engine.stats().preemptions > 0
    for p, o in zip(prompts, outs):
        assert o.token_ids == greedy_reference(model, p, 40)[0]
    assert engine.block_manager.num_free_blocks == 12  # everything released


def test_kv_cache_too_small_for_max_model_len_is_refused(tiny_model):
    with pytest.raises(ValueError, match="num_kv_blocks"):
        _engine(tiny_model, num_kv_blocks=4, max_model_len=1024)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_other_architectures_with_gqa(arch, tmp_path):
    """Llama / Qwen2 (q/k/v bias) with 4 query heads over 2 KV heads through the fused engine path."""
    from rollart.tools.make_tiny_model import make_tiny_model
    path = make_tiny_model(tmp_path / arch, arch=arch, hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32,
                           intermediate=256, seed=5, init_std=0.2)
    model = load_model(path)
    if arch == "qwen2":  # random biases, so that a dropped bias would show
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("bias"):
                    p.normal_(0, 0.3)
    prompts = random_prompts([6, 23, 41], seed=6)
    engine = LLMEngine(EngineConfig(model=str(path), num_kv_blocks=64),
                       model=load_model(path) if arch == "llama" else _copy(model))
    for p, o in zip(prompts, engine.generate(prompts, GREEDY)):
        assert o.token_ids == greedy_reference(model, p, GREEDY.max_tokens)[0]


def _copy(model):
    import copy
    return copy.deepcopy(model)
