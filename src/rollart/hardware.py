"""The hardware catalogue: accelerator classes, transformer shapes, and the roofline step time of one on
the other.

Three users share it: the ResourceManager ranks and substitutes classes (rollart.distributed.hardware),
the planner builds device topologies from the GPU specs (rollart.planner.topology), and an inference
worker in simulated-hardware mode steps an engine that sleeps for the :class:`SpeedModel`'s step time
(rollart.sim.engine_speed; the paper-scale simulators in rollart.sim use the same model). Units are the tables' own: TFLOP/s, GB,
GB/s.

The speed model is a roofline: prefill is compute-bound and decode memory-bandwidth-bound (RollArt §3.1,
R1), so a compute-optimized GPU (H800) wins prefill-heavy tasks and a bandwidth-optimized one (H20)
decode-heavy tasks::

    step_time = max(FLOPs / (TFLOPS * mfu), bytes moved / (HBM bandwidth * mbu)) + overhead

where one step reads every weight once plus the KV of every decoding sequence, and computes
2 * params FLOPs per processed token plus attention over the context. Every figure derived from it is
simulated.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rollart.config import ConfigError


@dataclass(frozen=True)
class HardwareSpec:
    """One hardware class. GPU classes carry the attributes of HetRL Table 1 / RollArt Table 2."""

    name: str
    kind: str = "gpu"
    """'gpu' | 'cpu' | 'serverless'."""
    tflops: float = 0.0
    """Dense BF16/FP16 peak, TFLOP/s (what prefill and training are bound by)."""
    memory_gb: float = 0.0
    """HBM capacity, GB."""
    hbm_gb_s: float = 0.0
    """HBM bandwidth, GB/s (what decoding is bound by)."""
    intra_gb_s: float = 0.0
    """Intra-node GPU-to-GPU bandwidth (NVLink, or PCIe where there is none), GB/s."""
    relative_cost: float = 0.0
    """Cost per device-hour relative to an H20."""

    def __post_init__(self) -> None:
        if self.kind not in ("gpu", "cpu", "serverless"):
            raise ConfigError(f"hardware class {self.name!r}: kind must be gpu, cpu or serverless, got {self.kind!r}")
        if self.kind == "gpu":
            for f in ("tflops", "memory_gb", "hbm_gb_s", "intra_gb_s"):
                if not getattr(self, f) > 0:
                    raise ConfigError(f"GPU type {self.name!r}: {f} must be > 0, got {getattr(self, f)}")

    @property
    def flops_per_byte(self) -> float:
        """Compute/bandwidth ratio: high = compute-optimized (prefill, training), low = bandwidth-optimized."""
        return self.tflops * 1e3 / self.hbm_gb_s if self.hbm_gb_s else 0.0


HARDWARE: dict[str, HardwareSpec] = {h.name: h for h in (
    # RollArt Table 2; cost normalised to H20 = 1.00 (RollArt §7: 2.85)
    HardwareSpec("H800", tflops=989.5, memory_gb=80, hbm_gb_s=3350, intra_gb_s=400, relative_cost=2.85),
    HardwareSpec("H20", tflops=148, memory_gb=96, hbm_gb_s=4000, intra_gb_s=900, relative_cost=1.00),
    # HetRL Table 1 as printed: the 40 GB A100 with 2039 GB/s (the datasheet gives the 40 GB part 1555
    # GB/s and the 80 GB part 2039); L40S and L4 reach each other over PCIe (64 GB/s). Relative costs are
    # rough rental-price ratios of ours, not the paper's.
    HardwareSpec("A100", tflops=312, memory_gb=40, hbm_gb_s=2039, intra_gb_s=600, relative_cost=1.6),
    HardwareSpec("L40S", tflops=366, memory_gb=48, hbm_gb_s=864, intra_gb_s=64, relative_cost=0.9),
    HardwareSpec("L4", tflops=121, memory_gb=24, hbm_gb_s=300, intra_gb_s=64, relative_cost=0.35),
    # NVIDIA datasheet (A100 80 GB SXM); no paper table uses it
    HardwareSpec("A100-80GB", tflops=312, memory_gb=80, hbm_gb_s=2039, intra_gb_s=600, relative_cost=1.6),
    HardwareSpec("cpu", kind="cpu"),
    HardwareSpec("serverless", kind="serverless"),
)}
"""Every known class by name; register more with ``HARDWARE[name] = HardwareSpec(...)``."""


@dataclass(frozen=True)
class ModelShape:
    """A transformer's shape: what sets its FLOPs, weight and KV bytes (HetRL App. B.1: h1 hidden,
    h2 intermediate, nl layers)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    kv_dim: int = 0
    """Width of K (= of V) per layer, KV heads x head dim; below hidden for grouped-query attention. 0 = hidden."""
    q_dim: int = 0
    """Width of the queries per layer, attention heads x head dim (Qwen3-32B: 64 x 128 > hidden). 0 = hidden."""
    vocab: int = 0
    n_params: float = 0.0
    """Parameter count of the published checkpoint (what the speed model reads and computes with);
    0 = :attr:`params`, the cost-model count."""
    bytes_per_param: int = 2
    """bf16 weights and KV."""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "intermediate"):
            if getattr(self, f) <= 0:
                raise ConfigError(f"model {self.name!r}: {f} must be > 0")
        for f in ("kv_dim", "q_dim"):
            if getattr(self, f) == 0:
                object.__setattr__(self, f, self.hidden)
        if not self.n_params:
            object.__setattr__(self, "n_params", float(self.params))

    @property
    def layer_params(self) -> int:
        """Weights per layer as HetRL's cost model counts them: 4·h1² (qkvo) + 3·h1·h2 (MLP)."""
        return 4 * self.hidden ** 2 + 3 * self.hidden * self.intermediate

    @property
    def params(self) -> int:
        """Layer weights plus input embedding and output head, as the cost model counts them."""
        return self.layers * self.layer_params + 2 * self.vocab * self.hidden

    @property
    def weight_bytes(self) -> float:
        return self.n_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_dim * self.bytes_per_param  # K and V

    def attention_flops(self, new_tokens: float, context: float) -> float:
        """QK^T and AV for ``new_tokens`` queries each attending to ``context`` keys, all layers."""
        return 4.0 * self.layers * self.q_dim * new_tokens * context


# Qwen3 dense shapes (config.json of the public checkpoints; n_params from their model cards).
MODELS: dict[str, ModelShape] = {m.name: m for m in (
    ModelShape("Qwen3-1.7B", 28, 2048, 6144, kv_dim=1024, q_dim=2048, vocab=151936),
    ModelShape("Qwen3-4B", 36, 2560, 9728, kv_dim=1024, q_dim=4096, vocab=151936),
    ModelShape("Qwen3-8B", 36, 4096, 12288, kv_dim=1024, q_dim=4096, vocab=151936, n_params=8.19e9),
    ModelShape("Qwen3-14B", 40, 5120, 17408, kv_dim=1024, q_dim=5120, vocab=151936, n_params=14.8e9),
    ModelShape("Qwen3-32B", 64, 5120, 25600, kv_dim=1024, q_dim=8192, vocab=151936, n_params=32.8e9),
)}


def model_shape(name: str) -> ModelShape:
    """A preset by name, case-insensitive ('qwen3-8b' is 'Qwen3-8B'); KeyError naming the known ones."""
    for key, shape in MODELS.items():
        if key.lower() == name.lower():
            return shape
    raise KeyError(f"unknown model shape {name!r}; known: {sorted(MODELS)}")


# --- the roofline speed model ------------------------------------------------------------------
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
    """Per-worker simulated speed (:class:`SpeedModel`)."""
    hw_class: str = "H800"
    """Hardware class (a GPU): one of HARDWARE's GPUs, or 'custom' with the fields below."""
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
    token_scale: float = 1.0
    """Emulated tokens per real token: each token the real engine prefills, generates or holds in context stands
    for this many of the emulated model's, so a real decode step lasts ``token_scale`` emulated decode steps over
    contexts that much longer (a CPU-scaled workload of hundreds of tokens reaches the paper's 32K-token contexts,
    where a decode step's KV reads grow with the batch)."""
    task_profiles: dict = field(default_factory=dict)
    """Task name -> the name of the paper task (``rollart.emulation.PAPER_TASKS``) whose turns that task's requests
    are timed as (``rollart.sim.engine_profiled``); empty: each engine step is timed from the real step's tokens."""
    task_turns: dict = field(default_factory=dict)
    """Task name -> its turns here, where they differ from its paper task's (``EmulationConfig.task_turns``)."""
    custom: dict = field(default_factory=dict)
    """For hw_class='custom': HardwareSpec fields, {'tflops':..., 'memory_gb':..., 'hbm_gb_s':..., 'intra_gb_s':...}."""

    def __post_init__(self) -> None:
        gpus = sorted(n for n, h in HARDWARE.items() if h.kind == "gpu")
        if self.hw_class != "custom" and self.hw_class not in gpus:
            raise ConfigError(f"speed.hw_class={self.hw_class!r} is not a GPU class; use one of {gpus} or 'custom' "
                             "with speed.custom={'tflops':..,'memory_gb':..,'hbm_gb_s':..,'intra_gb_s':..}")
        try:
            model_shape(self.model)
        except KeyError:
            raise ConfigError(f"speed.model={self.model!r} is unknown; use one of {sorted(MODELS)}") from None
        for name in ("mfu", "mbu"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"speed.{name} must be in (0, 1], got {getattr(self, name)}")
        if self.tp < 1 or self.time_scale < 0 or self.step_overhead_s < 0:
            raise ConfigError("speed.tp must be >= 1; speed.time_scale and speed.step_overhead_s >= 0")
        if self.token_scale < 1:
            raise ConfigError(f"speed.token_scale={self.token_scale} must be >= 1 (emulated tokens per real token)")


class SpeedModel:
    """Roofline step-time model of one engine (``tp`` devices of one hardware class)."""

    def __init__(self, cfg: SpeedModelConfig | None = None, **kwargs) -> None:
        self.cfg = cfg or SpeedModelConfig(**kwargs)
        if self.cfg.hw_class == "custom":
            self.hw = HardwareSpec("custom", **self.cfg.custom)
        else:
            self.hw = HARDWARE[self.cfg.hw_class]
        self.model = model_shape(self.cfg.model)

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of KV that fit beside the weights (90% of HBM usable)."""
        free = 0.9 * self.hw.memory_gb * 1e9 * self.cfg.tp - self.model.weight_bytes
        return max(0, int(free / self.model.kv_bytes_per_token))

    def step_seconds(self, work: StepWork) -> float:
        """Simulated wall time of one real engine step (real seconds on the declared hardware): with a
        ``token_scale`` k, its prefill over k times the tokens and contexts, then k - 1 more decode steps."""
        k = self.cfg.token_scale
        if k == 1:
            return self._one_step(work)
        scaled = StepWork(prefill_tokens=round(work.prefill_tokens * k), prefill_context=work.prefill_context * k,
                          decode_seqs=work.decode_seqs, decode_context_tokens=round(work.decode_context_tokens * k))
        decode_only = StepWork(decode_seqs=work.decode_seqs, decode_context_tokens=scaled.decode_context_tokens)
        return self._one_step(scaled) + (k - 1) * self._one_step(decode_only)

    def _one_step(self, work: StepWork) -> float:
        tokens = work.prefill_tokens + work.decode_seqs
        if tokens == 0:
            return 0.0
        m, tp = self.model, self.cfg.tp
        flops = 2.0 * m.n_params * tokens
        flops += m.attention_flops(work.prefill_tokens, work.prefill_context)
        flops += m.attention_flops(1, work.decode_context_tokens)
        moved = m.weight_bytes + m.kv_bytes_per_token * (work.decode_context_tokens + work.prefill_tokens)
        compute_s = flops / (self.hw.tflops * 1e12 * self.cfg.mfu * tp)
        memory_s = moved / (self.hw.hbm_gb_s * 1e9 * self.cfg.mbu * tp)
        return max(compute_s, memory_s) + self.cfg.step_overhead_s
