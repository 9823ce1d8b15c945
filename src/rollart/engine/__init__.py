"""Inference engines behind one ``Engine`` protocol (``protocol``). ``torch`` (default): rollart's own
continuous-batching engine with a paged KV cache and prefix caching (``LLMEngine``); ``vllm``: an adapter over
vLLM (``vllm_backend``); ``registry`` chooses one by name (``create_engine``).

The torch engine: ``llm_engine`` (LLMEngine) steps ``batch_scheduler`` (continuous batching under a token budget)
over ``block_manager`` (the paged cache's blocks and prefix cache) and ``sequence``; ``model_runner`` owns the
model and the KV cache, ``cuda_graphs`` replays decode steps, ``sampler`` / ``device_sampler`` sample,
``detokenizer`` checks stop strings, ``kv_transfer`` packs a prompt's K/V for PD disaggregation, ``lora_weights``
checks a LoRA version's adapters and merges them onto the base weights it keeps; ``config`` holds EngineConfig. Importing the package (or its ``registry``) imports no backend: ``LLMEngine`` is loaded on
first access."""
from typing import Any

from rollart.engine.config import EngineConfig
from rollart.engine.protocol import Engine, EngineCapabilities
from rollart.types import EngineStats, GenerationResult, InvalidRequestError, SamplingParams

__all__ = ["Engine", "EngineCapabilities", "EngineConfig", "EngineStats", "GenerationResult", "InvalidRequestError",
           "LLMEngine", "SamplingParams"]


def __getattr__(name: str) -> Any:
    if name == "LLMEngine":
        from rollart.engine.llm_engine import LLMEngine
        return LLMEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
