"""The Engine protocol: the torch engine implements it and returns the shared vocabulary types."""
from rollart.engine import Engine, EngineConfig, EngineStats, GenerationResult, LLMEngine, SamplingParams


def test_torch_engine_satisfies_the_engine_protocol(tiny_model):
    engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=64))
    assert isinstance(engine, Engine)
    engine.add_request("r", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    (out,) = outs
    assert isinstance(out, GenerationResult) and out.request_id == "r" and out.num_prompt_tokens == 3
    stats = engine.stats()
    assert isinstance(stats, EngineStats) and stats.generated_tokens == 3 and stats.requests_added == 1
    assert engine.abort_request("r") is False and stats.aborted == 0
