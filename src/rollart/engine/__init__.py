"""Inference engines behind one ``Engine`` protocol (``rollart.engine.protocol``). ``torch`` (default):
rollart's own continuous-batching engine with a paged KV cache and prefix caching (``LLMEngine``);
``vllm``: an adapter over vLLM (``rollart.engine.vllm_backend``).

Importing the package (or its ``registry``, to choose a backend by name) imports no backend: ``LLMEngine``
is loaded on first access."""
from typing import Any

from rollart.engine.config import EngineConfig
from rollart.engine.protocol import Engine
from rollart.types import EngineStats, GenerationResult, InvalidRequestError, SamplingParams

__all__ = ["Engine", "EngineConfig", "EngineStats", "GenerationResult", "InvalidRequestError", "LLMEngine",
           "SamplingParams"]


def __getattr__(name: str) -> Any:
    if name == "LLMEngine":
        from rollart.engine.llm_engine import LLMEngine
        return LLMEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
