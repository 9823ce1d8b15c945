"""Inference engines behind one ``Engine`` protocol (``rollart.engine.protocol``). ``torch`` (default):
rollart's own continuous-batching engine with a paged KV cache and prefix caching (``LLMEngine``);
``vllm``: an adapter over vLLM (``rollart.engine.vllm_backend``)."""
from rollart.engine.config import EngineConfig
from rollart.engine.llm_engine import LLMEngine
from rollart.engine.protocol import Engine
from rollart.types import EngineStats, GenerationResult, InvalidRequestError, SamplingParams

__all__ = ["Engine", "EngineConfig", "EngineStats", "GenerationResult", "InvalidRequestError", "LLMEngine",
           "SamplingParams"]
