"""The Engine protocol: what the inference worker needs from an engine backend (torch or vllm).

A backend is a plain, single-threaded class; the worker calls it only from its engine thread,
applying add / abort / update between two ``step()`` calls. Requests arrive already validated (the
LLMProxy validates them); an engine still refuses, with ``InvalidRequestError``, what only it can
judge (a token outside its vocabulary, a prompt longer than its context).
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rollart.types import EngineStats, GenerationResult, SamplingParams, WeightBucket


@runtime_checkable
class Engine(Protocol):
    version: int
    """Policy version of the weights loaded now (tags every generated token)."""
    tokenizer: Any
    """The model's tokenizer, or None (the worker decodes text with it)."""

    def add_request(self, request_id: str, prompt_token_ids: list[int], sampling: SamplingParams) -> None:
        """Queue a request; InvalidRequestError (and nothing queued) if this engine cannot serve it."""

    def abort_request(self, request_id: str) -> bool:
        """Stop a request; False if it is unknown or already finished (idempotent)."""

    def step(self) -> list[GenerationResult]:
        """One engine step; returns the requests that finished in it (``request_id`` set)."""

    def has_unfinished_requests(self) -> bool: ...

    def update_weights(self, weights: WeightBucket) -> None:
        """Load a whole weight version; in-flight requests continue, their K/V recomputed under it."""

    def reset_prefix_cache(self) -> Any: ...

    def stats(self) -> EngineStats:
        """Cumulative counters since the engine was built."""
