"""EngineConfig: everything the torch engine needs to know, validated up front."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rollart.config import ConfigError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class EngineConfig:
    model: str = ""
    """HF-format model folder (config.json + *.safetensors + tokenizer files)."""
    backend: str = "torch"
    """Engine backend: torch (this engine) | vllm (rollart.engine.vllm_backend)."""
    dtype: str = "float32"
    """Weights and KV cache dtype: float32 | bfloat16 | float16 (float32 on CPU: fastest and exact)."""
    block_size: int = 16
    """Tokens per KV cache block (the unit of paging and of prefix caching)."""
    num_kv_blocks: int | None = None
    """KV cache size in blocks; None derives it from kv_cache_memory_gb."""
    kv_cache_memory_gb: float = 0.5
    """KV cache budget in GiB, used when num_kv_blocks is None."""
    max_num_seqs: int = 64
    """Most sequences in one running batch."""
    max_num_batched_tokens: int = 2048
    """Most tokens (prefill chunks + decodes) computed in one step; longer prompts are prefilled in chunks."""
    max_model_len: int | None = None
    """Longest prompt + output; None means min(model max positions, KV cache capacity)."""
    enable_prefix_caching: bool = True
    """Reuse the KV of full blocks whose token prefix was computed before (LRU-evicted when space is needed)."""
    seed: int = 0
    """Seeds the per-request generators of requests that bring no seed of their own."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype={self.dtype!r}: choose one of {sorted(DTYPES)}")
        if self.block_size < 1:
            raise ConfigError(f"block_size must be >= 1, got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ConfigError(f"num_kv_blocks must be >= 1 (or None to use kv_cache_memory_gb), got {self.num_kv_blocks}")
        if not self.kv_cache_memory_gb > 0:
            raise ConfigError(f"kv_cache_memory_gb must be > 0, got {self.kv_cache_memory_gb}")
        if self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ConfigError(f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"max_model_len must be >= 2, got {self.max_model_len}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]
