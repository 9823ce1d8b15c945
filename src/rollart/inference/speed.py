"""Simulated hardware speed: how long one engine step would take on a given accelerator class.

rollart's R1 finding (RollArt §3.1) is that prefill is compute-bound and decode is
memory-bandwidth-bound, so a compute-optimized GPU (H800) wins prefill-heavy tasks and a
bandwidth-optimized one (H20) wins decode-heavy tasks. On CPU we cannot measure that, so an inference
worker can be given a *speed model*: the step time a paper-scale model would need on the worker's
declared hardware, from a roofline

    step_time = max(FLOPs / (TFLOPS * mfu), bytes moved / (HBM bandwidth * mbu)) + overhead

where one step reads every weight once plus the KV of every decoding sequence, and computes
2 * params FLOPs per processed token plus attention over the context. The worker sleeps for whatever of
that time its real (tiny-model) step did not already take. Every figure derived from this is simulated.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rollart.config import ConfigError


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator class; numbers from RollArt Table 2."""
    name: str
    tflops: float
    """Dense BF16 tensor TFLOPS."""
    hbm_gbps: float
    """HBM bandwidth in GB/s."""
    hbm_gb: float
    """HBM capacity in GB (bounds how many sequences' KV fit)."""
    cost: float = 1.0
    """Normalized cost per device (H20 = 1.00)."""


H20 = HardwareSpec("H20", tflops=148.0, hbm_gbps=4000.0, hbm_gb=96.0, cost=1.00)
H800 = HardwareSpec("H800", tflops=989.5, hbm_gbps=3350.0, hbm_gb=80.0, cost=2.85)
HARDWARE: dict[str, HardwareSpec] = {h.name: h for h in (H20, H800)}


@dataclass(frozen=True)
class ModelShape:
    """The parts of a transformer's shape that set its prefill FLOPs and decode bytes."""
    name: str
    n_params: float
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    bytes_per_param: int = 2
    """bf16 weights and KV."""

    @property
    def weight_bytes(self) -> float:
        return self.n_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.bytes_per_param  # K and V

    def attention_flops(self, new_tokens: int, context: float) -> float:
        """QK^T and AV for ``new_tokens`` queries each attending to ``context`` keys, all layers."""
        return 4.0 * self.n_layers * self.n_heads * self.head_dim * new_tokens * context


# Qwen3 dense shapes (config.json of the public checkpoints).
QWEN3_8B = ModelShape("Qwen3-8B", 8.19e9, n_layers=36, n_heads=32, n_kv_heads=8, head_dim=128)
QWEN3_14B = ModelShape("Qwen3-14B", 14.8e9, n_layers=40, n_heads=40, n_kv_heads=8, head_dim=128)
QWEN3_32B = ModelShape("Qwen3-32B", 32.8e9, n_layers=64, n_heads=64, n_kv_heads=8, head_dim=128)
MODELS: dict[str, ModelShape] = {m.name: m for m in (QWEN3_8B, QWEN3_14B, QWEN3_32B)}


@dataclass
class StepWork:
    """What one engine step processed."""
    prefill_tokens: int = 0
    """Prompt tokens computed this step (prefix-cache hits excluded)."""
    prefill_context: float = 0.0
    """Mean context length those prefill tokens attend to."""
    decode_seqs: int = 0
    """Sequences that each produced one token this step."""
    decode_context_tokens: int = 0
    """Sum over decoding sequences of their context length (KV read this step)."""


@dataclass
class SpeedModelConfig:
    """Per-worker simulated speed (rollart.inference.speed)."""
    hardware: str = "H800"
    """Accelerator class: one of HARDWARE (H800, H20), or 'custom' with the fields below."""
    model: str = "Qwen3-8B"
    """Paper-scale model shape whose cost is simulated: one of MODELS."""
    tp: int = 1
    """Tensor-parallel degree: FLOPs, bandwidth and capacity of tp devices serve one engine."""
    mfu: float = 0.5
    """Fraction of peak TFLOPS a prefill step reaches (same for every class: a fair comparison)."""
    mbu: float = 0.8
    """Fraction of peak HBM bandwidth a decode step reaches."""
    step_overhead_s: float = 0.002
    """Fixed per-step cost (scheduling, kernel launches)."""
    time_scale: float = 1.0
    """Multiply simulated seconds by this before sleeping (e.g. 0.01 runs 100x faster than real)."""
    custom: dict = field(default_factory=dict)
    """For hardware='custom': {'tflops':..., 'hbm_gbps':..., 'hbm_gb':...}."""

    def __post_init__(self) -> None:
        if self.hardware != "custom" and self.hardware not in HARDWARE:
            raise ConfigError(f"speed.hardware={self.hardware!r} is unknown; use one of {sorted(HARDWARE)} "
                              "or 'custom' with speed.custom={'tflops':..,'hbm_gbps':..,'hbm_gb':..}")
        if self.model not in MODELS:
            raise ConfigError(f"speed.model={self.model!r} is unknown; use one of {sorted(MODELS)}")
        for name in ("mfu", "mbu"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"speed.{name} must be in (0, 1], got {getattr(self, name)}")
        if self.tp < 1 or self.time_scale < 0 or self.step_overhead_s < 0:
            raise ConfigError("speed.tp must be >= 1; speed.time_scale and speed.step_overhead_s >= 0")


class SpeedModel:
    """Roofline step-time model of one engine (``tp`` devices of one hardware class)."""

    def __init__(self, cfg: SpeedModelConfig | None = None, **kwargs) -> None:
        self.cfg = cfg or SpeedModelConfig(**kwargs)
        if self.cfg.hardware == "custom":
            self.hw = HardwareSpec("custom", **self.cfg.custom)
        else:
            self.hw = HARDWARE[self.cfg.hardware]
        self.model = MODELS[self.cfg.model]

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of KV that fit beside the weights (90% of HBM usable)."""
        free = 0.9 * self.hw.hbm_gb * 1e9 * self.cfg.tp - self.model.weight_bytes
        return max(0, int(free / self.model.kv_bytes_per_token))

    def step_seconds(self, work: StepWork) -> float:
        """Simulated wall time of one step (real seconds on the declared hardware)."""
        tokens = work.prefill_tokens + work.decode_seqs
        if tokens == 0:
            return 0.0
        m, tp = self.model, self.cfg.tp
        flops = 2.0 * m.n_params * tokens
        flops += m.attention_flops(work.prefill_tokens, work.prefill_context)
        flops += 4.0 * m.n_layers * m.n_heads * m.head_dim * work.decode_context_tokens
        moved = m.weight_bytes + m.kv_bytes_per_token * (work.decode_context_tokens + work.prefill_tokens)
        compute_s = flops / (self.hw.tflops * 1e12 * self.cfg.mfu * tp)
        memory_s = moved / (self.hw.hbm_gbps * 1e9 * self.cfg.mbu * tp)
        return max(compute_s, memory_s) + self.cfg.step_overhead_s

    def delay_seconds(self, work: StepWork, real_seconds: float) -> float:
        """How long to sleep after a real step that took ``real_seconds`` so it lasts the simulated time."""
        return max(0.0, self.step_seconds(work) * self.cfg.time_scale - real_seconds)
