"""Inference engines. ``torch`` (default): rollart's own continuous-batching engine with a paged KV
cache and prefix caching (``LLMEngine``); ``vllm``: an adapter over vLLM (``rollart.engine.vllm_backend``)."""
from rollart.engine.config import EngineConfig
from rollart.engine.llm_engine import EngineStats, LLMEngine, RequestOutput
from rollart.engine.sampling import InvalidRequestError, SamplingParams

__all__ = ["EngineConfig", "EngineStats", "InvalidRequestError", "LLMEngine", "RequestOutput", "SamplingParams"]
