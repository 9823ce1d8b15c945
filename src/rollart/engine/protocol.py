"""The Engine protocol: what the inference worker needs from an engine backend (torch or vllm).

A backend is a plain, single-threaded class; the worker calls it only from its engine thread,
applying add / abort / update between two ``step()`` calls. A request reaches it as the one typed
``GenerateRequest`` the proxy sent, already validated; an engine still refuses, with
``InvalidRequestError``, what only it can judge (a token outside its vocabulary, a prompt longer than
its context).

What an engine can do beyond the common core it declares in ``capabilities``: callers read that field,
never probe the engine's attributes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rollart.types import EngineStats, GenerateRequest, GenerationResult, WeightBucket


@dataclass(frozen=True)
class EngineCapabilities:
    """The optional parts of the protocol one engine implements."""
    kv_transfer: bool = False
    """``add_request`` honours ``GenerateRequest.kv`` / ``export_kv`` (PD disaggregation,
    ``rollart.engine.kv_transfer``). Without it the worker refuses such a request before it reaches the engine."""
    release_kv: bool = False
    """``release_kv()`` frees the KV cache's memory (aborting what is unfinished) and ``reclaim_kv()`` allocates it
    again, empty (``PipelineConfig.release_kv_while_training``: one GPU shared with the trainer)."""
    prefix_namespaces: bool = False
    """``update_weights`` honours ``namespace`` / ``reuse_cached`` (jobs sharing one engine keep their cached
    prefixes). Without it every update drops the whole prefix cache, whatever the namespace."""
    paced: bool = False
    """``pause_s()`` says, after each step, how long stepping again would find nothing to do (an emulated engine
    whose step under way ends later): the loop waits that long, or until a command arrives, instead of stepping."""


@runtime_checkable
class Engine(Protocol):
    version: int
    """Policy version of the weights loaded now (tags every generated token)."""
    tokenizer: Any
    """The model's tokenizer, or None (the worker decodes text with it)."""
    capabilities: EngineCapabilities
    weights_device: Any
    """The ``torch.device`` new weights are staged on before ``update_weights`` (where the engine's weights
    live, or the host for an engine that loads from host tensors)."""

    def add_request(self, request: GenerateRequest) -> None:
        """Queue a request; InvalidRequestError (and nothing queued) if this engine cannot serve it."""

    def abort_request(self, request_id: str) -> bool:
        """Stop a request; False if it is unknown or already finished (idempotent)."""

    def step(self) -> list[GenerationResult]:
        """One engine step; returns the requests that finished in it (``request_id`` set)."""

    def has_unfinished_requests(self) -> bool: ...

    def update_weights(self, weights: WeightBucket, namespace: str | None = None, reuse_cached: bool = False) -> None:
        """Load a whole weight version; in-flight requests continue, their K/V recomputed under it.
        ``namespace`` / ``reuse_cached``: see ``EngineCapabilities.prefix_namespaces``."""

    def named_weights(self) -> list[tuple[str, Any]]:
        """(HF name, tensor) of every weight held now; NotImplementedError, in one line, where the backend
        keeps its weights out of reach."""

    def reset_prefix_cache(self) -> Any: ...

    def stats(self) -> EngineStats:
        """Cumulative counters since the engine was built."""
