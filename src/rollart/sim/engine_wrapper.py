"""EngineWrapper: an Engine around another one, every part of the protocol passed through to ``inner``. The
simulated-speed engines (``engine_speed``, ``engine_profiled``) build on it and override only what they time."""
from __future__ import annotations

from typing import Any

from rollart.engine.protocol import Engine, EngineCapabilities
from rollart.types import EngineStats, GenerateRequest, GenerationResult, WeightBucket


class EngineWrapper:
    def __init__(self, engine: Engine) -> None:
        self.inner = engine

    @property
    def version(self) -> int:
        return self.inner.version

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.inner.capabilities

    @property
    def weights_device(self) -> Any:
        return self.inner.weights_device

    def add_request(self, request: GenerateRequest) -> None:
        self.inner.add_request(request)

    def abort_request(self, request_id: str) -> bool:
        return self.inner.abort_request(request_id)

    def has_unfinished_requests(self) -> bool:
        return self.inner.has_unfinished_requests()

    def step(self) -> list[GenerationResult]:
        return self.inner.step()

    def update_weights(self, weights: WeightBucket, namespace: str | None = None, reuse_cached: bool = False) -> None:
        self.inner.update_weights(weights, namespace, reuse_cached)

    def named_weights(self) -> list[tuple[str, Any]]:
        return self.inner.named_weights()

    def reset_prefix_cache(self) -> Any:
        return self.inner.reset_prefix_cache()

    def release_kv(self) -> int:
        return self.inner.release_kv()

    def reclaim_kv(self) -> int:
        return self.inner.reclaim_kv()

    def stats(self) -> EngineStats:
        return self.inner.stats()
