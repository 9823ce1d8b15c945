"""The Engine protocol: the torch engine implements it, declares what it supports beyond the core, and returns the
shared vocabulary types."""
from rollart.engine import (Engine, EngineCapabilities, EngineConfig, EngineStats, GenerationResult, LLMEngine,
                            SamplingParams)
from rollart.types import GenerateRequest


def test_torch_engine_satisfies_the_engine_protocol(tiny_model):
    engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=64))
    assert isinstance(engine, Engine)
    assert engine.capabilities == EngineCapabilities(kv_transfer=True, prefix_namespaces=True, release_kv=True)
    assert engine.weights_device.type == "cpu"
    weights = dict(engine.named_weights())
    assert "model.norm.weight" in weights and weights["model.norm.weight"].device == engine.weights_device
    engine.add_request(GenerateRequest("r", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=3,
                                                                      ignore_eos=True)))
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    (out,) = outs
    assert isinstance(out, GenerationResult) and out.request_id == "r" and out.num_prompt_tokens == 3
    stats = engine.stats()
    assert isinstance(stats, EngineStats) and stats.generated_tokens == 3 and stats.requests_added == 1
    assert engine.abort_request("r") is False and stats.aborted == 0
