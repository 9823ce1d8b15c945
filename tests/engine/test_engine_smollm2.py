"""LLMEngine on SmolLM2-135M-Instruct (slow): greedy tokens and logprobs equal a full-recompute reference."""
import pytest
import torch

from rollart.engine import EngineConfig, LLMEngine, SamplingParams

from engine_helpers import greedy_reference

pytestmark = pytest.mark.slow


def test_smollm2_greedy_equals_full_recompute():
    pytest.importorskip("gguf", reason="get_smollm2 needs gguf (pip install gguf accelerate)")
    from rollart.models import load_model, load_tokenizer
    from rollart.tools.get_smollm2 import get_smollm2
    path = get_smollm2()
    tok = load_tokenizer(path)
    model = load_model(path)
    questions = ["What is 2 + 3?", "Name a colour.", "Write one word that rhymes with cat, then explain rhyme."]
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                       tokenize=True)["input_ids"] for q in questions]
    engine = LLMEngine(EngineConfig(model=str(path), kv_cache_memory_gb=0.1), model=model, tokenizer=tok)
    outs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    for p, o in zip(prompts, outs):
        ref, ref_lp = greedy_reference(model, p, 12)
        assert o.token_ids == ref
        torch.testing.assert_close(torch.tensor(o.logprobs), torch.tensor(ref_lp), atol=1e-4, rtol=0)
