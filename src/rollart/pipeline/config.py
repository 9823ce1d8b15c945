"""PipelineConfig: a training run's config, composed of its components' own configs — step one of three.

The run's own settings sit at the top; each component keeps its config type as a field (``rollout``:
SchedulerConfig, ``buffer``: BufferConfig, ``proxy``: ProxyConfig, ``engine``: EngineConfig, ``trainer``:
TrainerConfig), so a value lives in one place. This module is the schema: fields, their docs and the checks of
values alone (no I/O, no other process). ``rollart.pipeline.preflight`` checks what needs the machine or the
run's tasks, and ``rollart.pipeline.resolve`` fills in what is derived (the buffer's capacity and bound, the
model folder, seeds, devices, a plan's classes, speed models): the resolved config is what the run's parts
receive and what ``config.json`` records. Recipes override any field from the command line
(``rollout.group_size=8``, ``engine.kv_cache_memory_gb=0.5``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Optional

from rollart.actions.config import ActionsConfig
from rollart.config import ConfigError
from rollart.devices import check_device, check_dtype
from rollart.distributed.cluster_config import ClusterConfig
from rollart.emulation import EmulationConfig, TrainerSpeedConfig
from rollart.engine.config import EngineConfig
from rollart.hardware import SpeedModelConfig
from rollart.monitor import check_loggers
from rollart.rewards.config import RewardConfig
from rollart.rollout.buffer_config import MODES, BufferConfig, Mode
from rollart.rollout.proxy_config import ProxyConfig
from rollart.rollout.scheduler_config import SchedulerConfig
from rollart.trainer.config import TrainerConfig
from rollart.weightplane.config import WeightPlaneConfig

ENV_HOST_TIMEOUT_S = 120.0
"""Default of ``PipelineConfig.env_host_timeout_s``."""


@dataclass
class PipelineConfig:
    """One training run: its own settings, then each component's config (see the module docstring)."""
    mode: Mode = "async"
    """async (α-bounded per turn, default) | sync (Sync+) | oneoff | areal (start-only bound)."""
    alpha: int = 1
    """Asynchronous bound: a trajectory is trained only if it started at a version >= n - alpha, n being the
    agent (inference) LLM's version when the batch forms (RollArt §6.2); stale ones are aborted."""
    total_steps: int = 100
    """Training steps (policy versions) to run."""
    batch_groups: int = 4
    """GRPO groups per training batch (of rollout.group_size trajectories each)."""

    model: str = ""
    """HF-format model folder. Empty: a tiny random-init model is built under the run folder."""
    warmup_steps: int = 0
    """Format warm-up of that tiny model before RL (rollart.tools.format_warmup): supervised steps on the training
    tasks' transcripts of random valid actions (each env's ``sample_action``), so it starts knowing how to answer
    and the rules and nothing of how to play, as a pretrained LLM would; 0: none. Applies only to the tiny model
    built when ``model`` is empty."""
    device: str = "auto"
    """Where engine, trainer and weights live: auto | cpu | cuda | cuda:N (auto: CUDA where a GPU is visible,
    else the CPU). resolve() hands it to every component whose own device is auto (engine.device=...,
    trainer.device=... override it); a GPU-class worker process sees its bound GPU(s) as cuda."""
    dtype: str = "auto"
    """Their compute dtype: auto | float32 | bfloat16 | float16 (auto: bfloat16 on a GPU, float32 on the CPU);
    handed on like ``device`` (engine.dtype=..., trainer.dtype=... override it)."""
    release_kv_while_training: bool = False
    """mode=sync: the engines free their KV caches while the trainer steps and allocate them again, empty, before
    the next rollout (as vLLM's sleep mode does), so on one GPU the KV cache and the trainer's gradients and
    activations are never resident together (``rollart.pipeline.memory_plan``). Costs the prefix cache."""
    num_inference_workers: int = 1
    """Inference worker actors."""
    hw_classes: tuple[str, ...] = ("H20",)
    """Hardware class of each inference worker (cycled): the classes proxy.hw_affinity routes tasks to."""
    pd: bool = False
    """PD disaggregation (RollArt §6.3): the workers of hw_classes' first class prefill, those of its second decode,
    and each prompt's K/V moves from one to the other (``rollart.inference.pd``). Needs two hardware classes
    (e.g. hw_classes=H800,H20 with num_inference_workers=2) and engine.backend=torch."""
    simulate_hardware: bool = False
    """Apply each worker's hardware class's simulated speed model (benchmarks; figures are labelled simulated)."""
    sim_time_scale: float = 1.0
    """Scale of simulated hardware time (e.g. 0.01 runs 100x faster than the simulated hardware)."""
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    """With simulate_hardware: the emulated model, trainer GPUs and weight link (``rollart.emulation``)."""
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
    """An actor process silent this long is declared dead (its calls fail; workers are restarted). This bounds
    every call to an actor (a train step, a generation, a weight fetch, an env call) by liveness, not duration:
    a long train step goes on while its process answers heartbeats; a process that stops (hung, stopped, cut
    off) fails the calls waiting on it in one line naming the actor, the call and this setting."""
    spawn_timeout_s: float = 300.0
    """How long an actor process may take to start (import torch, load the model) before it counts as failed."""
    trainer_restarts: int = 2
    """Times a dead trainer process is restarted in place: it reloads the newest checkpoint, and buffered
    samples newer than that checkpoint are kept or dropped by the alpha rule. Past this the run ends with
    one line naming the --resume command."""
    weight_store_restarts: int = 2
    """Times a dead weight-store process is restarted in place (the trainer re-publishes its weights)."""
    worker_restarts: int = 2
    """Times each dead inference worker is restarted in place before it leaves routing for good."""
    env_hosts: int = 0
    """Env-host actors the envs run in, each its own process with actor_mode=process, so an env that crashes
    its process fails only the trajectories on that host, which restarts (0: on threads inside this
    coordinator; recipes default to 1)."""
    env_imports: tuple[str, ...] = ()
    """Modules every env host imports first: where the tasks' env ids are registered (e.g. envs)."""
    env_host_restarts: int = 100
    """Times a dead env host is restarted in place (its trajectories in flight fail; the run goes on)."""
    env_host_timeout_s: float = ENV_HOST_TIMEOUT_S
    """With env_hosts > 0: seconds one call to an env host (create, reset, step, close) may go unanswered before
    that env's trajectory fails in one line naming the host and this setting; the host's own env timeouts (60 s
    for make and reset, 30 s for a step) end a hung env sooner. A host process that stops altogether is noticed
    sooner still, by its heartbeats (heartbeat_timeout_s), and restarted."""
    bucket_bytes: int = 1 << 20
    """Weight-store bucket size in bytes."""
    weight_link_bytes_per_s: float = 0.0
    """SIMULATED store -> inference link rate for weight pulls (0: real speed only); benchmarks label it simulated."""
    weight_push_bytes_per_s: float = 0.0
    """SIMULATED trainer -> store link rate for weight pushes (0: real speed only; RollArt Table 4 separates the
    push from the pulls); benchmarks label it simulated."""

    eval_every: int = 5
    """Greedy evaluation every this many steps (0 disables; a final evaluation always runs)."""
    eval_episodes: int = 8
    """Evaluation episodes per task (greedy decoding)."""
    heldout_episodes: int = 0
    """Greedy episodes per held-out task (the run's heldout_tasks, disjoint from training) every eval_every
    steps, played in the background without stalling training and logged as eval/...; 0: none."""
    eval_at_end: bool = True
    """Evaluate the final weights (RunResult.final_success); benchmarks timing only the steps turn it off."""
    eval_at_start: bool = False
    """Also evaluate the initial weights (a pretrained model's zero-shot success) before training."""
    stop_at_success: Optional[float] = None
    """Stop early once greedy evaluation success reaches this value on every task, on ``stop_consecutive``
    evaluations in a row (the run's last step is then evaluated again: RunResult.final_success)."""
    stop_consecutive: int = 2
    """How many consecutive evaluations must meet ``stop_at_success`` (one alone can be a lucky draw)."""
    time_limit_s: float = 0.0
    """Stop after this many seconds of training (0: no limit); the final evaluation still runs."""

    logdir: str = "runs"
    """Tensorboard runs folder."""
    run_name: str = ""
    """Sub-folder of logdir for this run (default: recipe name + mode)."""
    logger: tuple[str, ...] = ("tensorboard",)
    """Where metrics go, same tags and steps in each: tensorboard (event files in the run folder), wandb (Weights &
    Biases: pip install wandb; WANDB_PROJECT, WANDB_MODE=offline, ...), or both: logger=tensorboard,wandb."""
    checkpoint_every: int = 0
    """Save an atomic checkpoint every this many steps (0: only at the end)."""
    checkpoint_every_s: float = 0.0
    """Also save one once this many seconds passed since the last (0: by steps only); bounds the work a
    trainer crash can lose when steps are slow."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (0 keeps all)."""
    resume: bool = False
    """Continue from the latest checkpoint in the run folder."""
    seed: int = 0
    """Seeds task sampling, env resets, sampling and the trainer."""
    quiet: bool = False
    """No progress line."""

    rollout: SchedulerConfig = field(default_factory=SchedulerConfig)
    """GRPO groups: group_size, redundant envs and groups, max_concurrency (envs open at once)."""
    buffer: BufferConfig = field(default_factory=BufferConfig)
    """Sample buffer: every field derived by resolve() from mode, alpha, rollout and batch_groups."""
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    """Routing of generation requests: hw_affinity (task -> hardware class), spill_ratio, fault handling."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Inference engine of every inference worker."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Trainer backend, optimiser and RL loss."""
    actions: ActionsConfig = field(default_factory=ActionsConfig)
    """ARL-Tangram action scheduling (actions.enabled=true): env steps get cores from the CPU manager and pin
    what they start to them; reward-endpoint calls go through its API-quota pool."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Where rewards come from: the env's return, or a serverless reward endpoint (reward.endpoint=URL, or
    reward.serverless=true to start one for the run)."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """Where actor processes start: backend=local (children of this process) or ray (address=...)."""
    placement: str = ""
    """A HetRL plan (``python -m rollart.planner ... --out plan.json``): inference workers and the trainer are
    placed on the plan's classes and devices; num_inference_workers and hw_classes then come from it."""
    weights: WeightPlaneConfig = field(default_factory=WeightPlaneConfig)
    """Weight plane: cuda_ipc, relay_fanout, timeout_s, retries (versions move trainer -> store -> workers)."""
    speed_models: dict[str, SpeedModelConfig] = field(default_factory=dict)
    """Derived by resolve(): hardware class -> its simulated speed model (simulate_hardware only)."""

    RENAMED: ClassVar[dict[str, str]] = {
        "group_size": "rollout.group_size", "max_concurrency": "rollout.max_concurrency",
        "extra_envs_per_group": "rollout.extra_envs_per_group", "extra_groups": "rollout.extra_groups",
        "hw_affinity": "proxy.hw_affinity", "hw_spill_ratio": "proxy.spill_ratio", "worker_classes": "hw_classes",
    }
    """Old command-line keys -> their new place; the old ones are accepted (with a warning) for one release."""
    DERIVED: ClassVar[dict[str, str]] = {
        "buffer.mode": "mode", "buffer.alpha": "alpha", "buffer.group_size": "rollout.group_size",
        "buffer.capacity": "alpha and rollout.max_concurrency",
        "buffer.max_outstanding_groups": "mode, alpha, batch_groups and rollout.extra_groups",
        "rollout.seed": "seed", "engine.model": "model", "engine.seed": "seed", "engine.lora": "trainer.lora",
        "trainer.model_path": "model",
        "trainer.seed": "seed", "trainer.pad_id": "the model's tokenizer",
        **{f"trainer.{k}": "trainer.world_size (each rank's place and rank 0's rendezvous, set as the ranks start)"
           for k in ("rank", "master_addr", "master_port")},
        "speed_models": "hw_classes, simulate_hardware and sim_time_scale",
    }
    """Fields resolve() sets (key -> what it is derived from); the command line cannot set them."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r}: choose one of {MODES}")
        check_device(self.device)
        check_dtype(self.dtype)
        if self.alpha < 0:
            raise ConfigError(f"alpha={self.alpha} must be >= 0")
        for name in ("total_steps", "batch_groups", "num_inference_workers", "bucket_bytes", "eval_episodes",
                     "stop_consecutive"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("weight_link_bytes_per_s", "weight_push_bytes_per_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0 (0 disables)")
        if self.trainer_cpus and (self.trainer_actor_mode or self.actor_mode) != "process":
            raise ConfigError("trainer_cpus pins the trainer's own process: set trainer_actor_mode=process")
        if set(self.trainer_cpus) & set(self.rollout_cpus):
            raise ConfigError(f"trainer_cpus={self.trainer_cpus} and rollout_cpus={self.rollout_cpus} overlap; "
                              "give each side its own cores")
        if not self.hw_classes:
            raise ConfigError("hw_classes must name at least one hardware class (e.g. H20)")
        check_loggers(self.logger)
        self._check_cluster()
        if self.trainer.world_size > 1 and (self.trainer_actor_mode or self.actor_mode) != "process":
            raise ConfigError(f"trainer.world_size={self.trainer.world_size} starts one process per rank: set "
                              "trainer_actor_mode=process (or actor_mode=process)")
        r = self.rollout
        if r.max_concurrency < r.group_size + r.extra_envs_per_group:
            raise ConfigError(f"rollout.max_concurrency={r.max_concurrency} cannot hold one group of "
                              f"{r.group_size + r.extra_envs_per_group} envs; raise rollout.max_concurrency")
        if self.release_kv_while_training and self.mode != "sync":
            raise ConfigError(f"release_kv_while_training=true needs mode=sync: in mode={self.mode} rollout runs "
                              "while the trainer steps, so the engines need their KV caches then")
        if self.release_kv_while_training and self.engine.backend != "torch":
            raise ConfigError(f"release_kv_while_training=true: engine.backend={self.engine.backend} cannot free its "
                              "KV cache yet (vLLM's sleep mode is not wired); use engine.backend=torch")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps={self.warmup_steps} must be >= 0 (0 disables)")
        for name in ("eval_every", "heldout_episodes", "checkpoint_every", "checkpoint_every_s", "keep_checkpoints", "time_limit_s",
                     "trainer_restarts", "weight_store_restarts", "worker_restarts", "env_hosts",
                     "env_host_restarts"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0 (0 disables)")
        for name in ("sim_time_scale", "heartbeat_timeout_s", "spawn_timeout_s", "env_host_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be > 0")
        if self.trainer.algorithm == "grpo" and r.group_size < 2:
            raise ConfigError(f"rollout.group_size={r.group_size}: GRPO compares trajectories within a group, so one "
                              "alone has advantage 0 and nothing is learned; use rollout.group_size >= 2 (or "
                              "trainer.algorithm=ppo)")
        if self.stop_at_success is not None and not 0 <= self.stop_at_success <= 1:
            raise ConfigError(f"stop_at_success={self.stop_at_success}: a success rate in [0, 1], or none")
        self._check_settings_take_effect()
        if ":" not in self.trainer.backend:
            from rollart.trainer.registry import TRAINERS
            if self.trainer.backend not in TRAINERS:
                raise ConfigError(f"trainer.backend={self.trainer.backend!r}: choose one of {sorted(TRAINERS)} "
                                  "or give a 'module:Class' string")
        self._check_pd()

    # ------------------------------------------------------------------ derived values
    @property
    def batch_size(self) -> int:
        """Trajectories per training batch."""
        return self.batch_groups * self.rollout.group_size

    @property
    def run_dir(self) -> Path:
        """The run folder: checkpoints, config.json, tensorboard events (and the tiny model, if built)."""
        return Path(self.logdir) / (self.run_name or f"run-{self.mode}")

    def worker_hw_classes(self) -> list[str]:
        """The hardware class of each inference worker, in order (hw_classes cycled)."""
        return [self.hw_classes[i % len(self.hw_classes)] for i in range(self.num_inference_workers)]

    def tiny_model_dir(self) -> Path:
        """Where a run with an empty ``model`` builds its tiny random-init model."""
        return self.run_dir / "init_model"

    def _check_pd(self) -> None:
        """What pd=true needs of the settings alone (its two worker classes are checked with the run's
        placement: rollart.pipeline.preflight)."""
        if not self.pd:
            return
        if self.engine.backend != "torch":
            raise ConfigError(f"pd=true hands the K/V between torch engines; engine.backend={self.engine.backend!r} "
                              "cannot: use engine.backend=torch")
        if self.proxy.hw_affinity:
            raise ConfigError("pd=true sends every request to the prefill class, then the decode class, so "
                              f"proxy.hw_affinity={self.proxy.hw_affinity} would route nothing: drop one of them")

    def _check_settings_take_effect(self) -> None:
        """Settings that would be accepted and then do nothing in this combination are errors."""
        t, e = self.trainer, self.engine
        if t.zero_stage and t.backend != "deepspeed":
            raise ConfigError(f"trainer.zero_stage={t.zero_stage} applies to trainer.backend=deepspeed only "
                              f"(backend is {t.backend!r}); set trainer.backend=deepspeed or drop it")
        if t.model_factory:
            raise ConfigError(f"trainer.model_factory={t.model_factory!r} would build the trainer's model only, while "
                              "the inference workers load model=FOLDER; in a run set model= (an HF-format folder)")
        if t.algorithm == "ppo" and t.backend == "deepspeed":
            raise ConfigError("trainer.algorithm=ppo needs trainer.backend=torch (the deepspeed backend trains grpo)")
        if t.world_size == 1 and t.dist_backend != type(t)().dist_backend:
            raise ConfigError(f"trainer.dist_backend={t.dist_backend!r} joins data-parallel ranks; with "
                              "trainer.world_size=1 there are none: set trainer.world_size or drop it")
        if t.world_size == 1 and t.collective_timeout_s != type(t)().collective_timeout_s:
            raise ConfigError(f"trainer.collective_timeout_s={t.collective_timeout_s:g} bounds the waits of "
                              "data-parallel ranks; with trainer.world_size=1 there are none: set "
                              "trainer.world_size or drop it")
        if e.backend == "vllm" and (e.num_kv_blocks is not None or e.block_size != type(e)().block_size):
            raise ConfigError("engine.num_kv_blocks and engine.block_size size rollart's own engine; with "
                              "engine.backend=vllm set engine.kv_cache_memory_gb instead")
        if self.env_hosts == 0 and self.env_host_timeout_s != ENV_HOST_TIMEOUT_S:
            raise ConfigError(f"env_host_timeout_s={self.env_host_timeout_s:g} bounds calls to env-host processes; "
                              "with env_hosts=0 envs run inside this process: set env_hosts or drop it")
        self.emulation = EmulationConfig.of(self.emulation)
        if self.simulate_hardware:
            self.trainer_speed()  # its settings checked now, in one line
        if self.sim_time_scale != 1.0 and not self.simulate_hardware:
            raise ConfigError(f"sim_time_scale={self.sim_time_scale} scales simulated hardware time: set "
                              "simulate_hardware=true as well, or drop it")

    def trainer_speed(self) -> TrainerSpeedConfig | None:
        """The trainer's emulated speed (``simulate_hardware`` with a ``trainer_hw_class``), else None."""
        return self.emulation.trainer_speed(self.sim_time_scale) if self.simulate_hardware else None

    def _check_cluster(self) -> None:
        if self.cluster.backend == "ray":
            if "inprocess" in (self.actor_mode, self.trainer_actor_mode):
                raise ConfigError("cluster.backend=ray starts actors as processes on Ray nodes: drop "
                                  "actor_mode/trainer_actor_mode=inprocess, or use cluster.backend=local")
            if self.trainer_cpus or self.rollout_cpus:
                raise ConfigError("trainer_cpus/rollout_cpus pin cores of this machine; with cluster.backend=ray "
                                  "Ray places the processes: leave them empty")
