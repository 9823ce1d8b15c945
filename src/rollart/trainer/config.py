"""TrainerConfig: one dataclass for the trainer backend, the optimiser and the RL loss."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from rollart.config import ConfigError
from rollart.devices import check_device, check_dtype
from rollart.models.lora import LoraConfig


@dataclass
class TrainerConfig:
    # --- backend and model
    backend: str = "torch"
    """Trainer backend: 'torch' or 'deepspeed' (or a 'module:Class' string)."""
    model_path: str = ""
    """Folder of an HF-style model loaded with rollart.models.load_model (unless a model object or
    model_factory is given); in a run, derived from PipelineConfig.model."""
    model_factory: str = ""
    """Optional 'module:function' returning an nn.Module (used when model_path is empty; handy for tests
    and custom models in actor processes)."""
    device: str = "auto"
    """Where the policy, its optimizer state and every batch live: auto | cpu | cuda | cuda:N (auto: CUDA where
    a GPU is visible, else the CPU; in a run, auto takes PipelineConfig.device). Resolved by rollart.devices."""
    dtype: str = "auto"
    """Compute dtype: auto | float32 | bfloat16 | float16 (auto: bfloat16 on a GPU, float32 on the CPU; in a run,
    auto takes PipelineConfig.dtype). Master weights and AdamW state stay float32 whatever this says: the torch
    backend runs forward and backward under torch.autocast in this dtype (float16 adds a dynamic loss scaler),
    so updates far below bf16's resolution still accumulate, as RL's small steps need. The DeepSpeed backend
    passes it to DeepSpeed's own bf16/fp16 mode (fp32 master weights in its optimizer). Exported weights
    (named_tensors, the weight store) are in this dtype: what the engine runs."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward instead of keeping them (less memory, ~1/3 more
    compute); for rollart CausalLM, or a model with HF's gradient_checkpointing_enable()."""
    num_threads: int = 2
    """torch intra-op threads for this trainer process (the machine may have only 2 cores)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA (lora.rank > 0): only low-rank adapters on lora.target_modules train and sit in the optimizer, only
    they move to the engines (rollart.models.lora); checkpoints hold the adapter in PEFT's format and the merged
    model. lora.rank=0: full fine-tuning."""
    seed: int = 0
    """Seed for torch/numpy/python RNGs at start; in a run, derived from PipelineConfig.seed."""

    # --- algorithm
    algorithm: Literal["grpo", "ppo"] = "grpo"
    """'grpo' (group-normalised advantages, no critic) or 'ppo' (critic + GAE; torch backend)."""
    clip_eps: float = 0.2
    """Clip range of the probability ratio (lower side, and upper side unless clip_eps_high is set)."""
    clip_eps_high: Optional[float] = None
    """Upper clip range (DAPO 'clip-higher'); None = clip_eps."""
    kl_coef: float = 0.0
    """Weight of the k3 KL penalty to a frozen copy of the initial policy; 0 disables the reference model."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss)."""
    off_policy: Literal["decoupled", "none"] = "decoupled"
    """Stale-token correction: 'decoupled' clips the ratio to the policy at train-step start and weights each
    token by min(pi_prox/mu, is_cap); 'none' clips the ratio to the behaviour policy mu directly."""
    is_cap: float = 2.0
    """Truncation of the importance weight pi_prox/mu in decoupled mode."""
    max_staleness: Optional[int] = None
    """Drop (mask out) tokens sampled more than this many versions ago; None keeps all."""
    adv_eps: float = 1e-4
    """eps in (R - mean)/(std + eps)."""
    scale_adv_by_std: bool = True
    """Divide GRPO advantages by the group std (False = Dr. GRPO style, centring only)."""
    gamma: float = 1.0
    """PPO discount over model tokens."""
    gae_lambda: float = 1.0
    """PPO GAE lambda."""
    vf_coef: float = 0.5
    """PPO value-loss weight."""
    value_clip: Optional[float] = 0.2
    """PPO value clipping range; None disables clipping."""

    # --- optimisation
    lr: float = 1e-3
    """AdamW learning rate (policy and critic)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    adam_eps: float = 1e-8
    """AdamW epsilon."""
    grad_clip: float = 1.0
    """Global gradient-norm clip; 0 disables."""
    micro_batch_tokens: int | None = None
    """Padded-token budget (rows x longest row) of one forward/backward micro-batch: bounds activation memory;
    gradients are accumulated over micro-batches, so the update does not depend on it. None: 2048 on the CPU
    (a micro-batch's activations then stay in the caches: the quickstart's train step was 1.85x faster than with
    16384), 16384 on a GPU (large micro-batches keep it busy)."""
    num_minibatches: int = 1
    """Optimizer steps per train_step (the batch is split into this many mini-batches)."""
    ppo_epochs: int = 1
    """Passes over the batch per train_step."""
    pad_id: int = 0
    """Token id used for right padding (masked out, never trained); in a run, the model tokenizer's."""

    # --- data parallel (torch backend over torch.distributed) / deepspeed
    world_size: int = 1
    """Number of data-parallel trainer processes (in a run: that many trainer-rank actors, see
    rollart.trainer.group)."""
    rank: int = 0
    """This process's rank in [0, world_size); in a run, derived (each rank's place in the group)."""
    dist_backend: str = "auto"
    """torch.distributed backend: 'auto' (nccl on CUDA, gloo on the CPU), 'gloo' or 'nccl'."""
    master_addr: str = "127.0.0.1"
    """Rendezvous address of rank 0; in a run, derived (rank 0's address as the coordinator reaches it)."""
    master_port: int = 29512
    """Rendezvous port of rank 0; in a run, derived (a port free on rank 0's machine)."""
    collective_timeout_s: float = 600.0
    """With world_size > 1: longest one torch.distributed operation (the rendezvous, a gradient all-reduce, a
    checkpoint barrier) waits for the other ranks before the rank gives up in one line naming this setting and
    the group restarts. It bounds each wait, not a train step: a rank that is hung or cut off from the others is
    noticed after this long even while its process still answers heartbeats. Raise it above the longest skew
    between ranks (rank 0 writing a large checkpoint while the others wait at its barrier)."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage 0-3 (deepspeed backend only)."""

    def __post_init__(self):
        self.lora = LoraConfig.of(self.lora)
        check_device(self.device, key="trainer.device")
        check_dtype(self.dtype, key="trainer.dtype")
        if self.dist_backend not in ("auto", "gloo", "nccl"):
            raise ConfigError(f"trainer.dist_backend={self.dist_backend!r}: use auto, gloo or nccl")
        if self.algorithm not in ("grpo", "ppo"):
            raise ConfigError(f"trainer.algorithm={self.algorithm!r}: use 'grpo' or 'ppo'")
        if self.off_policy not in ("decoupled", "none"):
            raise ConfigError(f"trainer.off_policy={self.off_policy!r}: use 'decoupled' or 'none'")
        for name in ("clip_eps", "lr", "is_cap", "micro_batch_tokens", "num_minibatches", "ppo_epochs",
                     "num_threads", "world_size"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ConfigError(f"trainer.{name}={getattr(self, name)} must be positive")
        for name in ("kl_coef", "entropy_coef", "grad_clip", "weight_decay"):
            if getattr(self, name) < 0:
                raise ConfigError(f"trainer.{name}={getattr(self, name)} must be >= 0")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"trainer.rank={self.rank} must be in [0, world_size={self.world_size})")
        if not self.collective_timeout_s > 0:
            raise ConfigError(f"trainer.collective_timeout_s={self.collective_timeout_s} must be > 0")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError(f"trainer.zero_stage={self.zero_stage}: DeepSpeed ZeRO stages are 0, 1, 2, 3")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ConfigError(f"trainer.max_staleness={self.max_staleness} must be >= 0 or None")

    def micro_batch_tokens_on(self, device_type: str) -> int:
        """The micro-batch budget a trainer on ``device_type`` ('cpu', 'cuda') uses."""
        if self.micro_batch_tokens is not None:
            return self.micro_batch_tokens
        return CPU_MICRO_BATCH_TOKENS if device_type == "cpu" else GPU_MICRO_BATCH_TOKENS


CPU_MICRO_BATCH_TOKENS = 2048
GPU_MICRO_BATCH_TOKENS = 16384
