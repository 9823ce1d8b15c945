"""The memory plan of one GPU shared by the engines and the trainer (the only layout a one-GPU machine has).

When the inference workers and the trainer resolve to the same CUDA device of this machine, the run computes at
start what each side holds there and prints it in one line; it refuses, in one line, a run that cannot fit. The
engines' KV cache gets what is left (``engine.num_kv_blocks`` is set from it, split between the engines), not
what an engine's own profiling would see free before the trainer has allocated anything.

What each side holds (estimates, in bytes; the trainer's are the torch backend's layout, ``TrainerConfig.dtype``):

* trainer, always resident: float32 master weights (4 per parameter; a frozen reference copy with ``kl_coef``, a
  critic with ``algorithm=ppo``) and AdamW's two float32 moments of every trained parameter (8 each; with LoRA only
  the adapters train);
* trainer, while it steps: float32 gradients of the trained parameters (4 each) and the activations of one
  micro-batch: ``micro_batch_tokens`` tokens through every layer (the tensors autograd saves, per token and layer
  ``12 h + 6 i`` elements of the compute dtype and ``q + 2 kv`` float32 ones: within 6 % of what the CPU saves
  under bf16 autocast for SmolLM2-135M's and Qwen3-0.6B's layer shapes, checked by a test on a small shape; with
  ``gradient_checkpointing`` one layer's plus each layer's float32 input) and the float32 logits with their
  log-softmax and gradient (12 bytes per token and vocabulary entry);
* each engine: its weights in its dtype (twice with LoRA: the merged copy and the base it keeps), a step's
  activations (``max_num_batched_tokens`` tokens, ``max_num_seqs`` rows of float32 logits) and, with CUDA graphs,
  their workspaces; then its KV cache.
* every process on the GPU: a CUDA context (``CONTEXT_BYTES``).

With ``release_kv_while_training`` (mode ``sync``) the engines free their KV caches while the trainer steps, so the
KV cache and the trainer's step-time memory (gradients, activations) are never resident together: the plan then
needs ``max(KV, step-time)`` where it needed their sum.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from rollart.config import ConfigError
from rollart.models.lora import LoraConfig

log = logging.getLogger("rollart.pipeline")

GIB = 2**30
CONTEXT_BYTES = 512 * 2**20
"""A CUDA context and the allocator's slack, per process (measured contexts are 300-600 MiB)."""


@dataclass(frozen=True)
class Shape:
    """What the plan needs of the model (``rollart.models.config.ModelConfig`` has all of it)."""
    params: int
    hidden: int
    intermediate: int
    layers: int
    vocab: int
    kv_heads: int
    head_dim: int
    q_dim: int
    max_positions: int

    @classmethod
    def of(cls, mc) -> "Shape":
        return cls(mc.num_params(), mc.hidden_size, mc.intermediate_size, mc.num_hidden_layers, mc.vocab_size,
                   mc.num_key_value_heads, mc.head_dim, mc.num_attention_heads * mc.head_dim,
                   mc.max_position_embeddings)

    def lora_params(self, lora: LoraConfig) -> int:
        """Parameters of the adapters ``lora`` puts on every layer: rank x (in + out) per adapted linear."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim, self.kv_heads * self.head_dim
        dims = {"q_proj": h + q, "k_proj": h + kv, "v_proj": h + kv, "o_proj": q + h,
                "gate_proj": h + i, "up_proj": h + i, "down_proj": i + h}
        return self.layers * lora.rank * sum(dims[m] for m in lora.target_modules)

    def saved_bytes_per_token_layer(self, dtype_bytes: int) -> int:
        """What autograd keeps of one token in one layer for the backward pass (see the module docstring)."""
        return dtype_bytes * (12 * self.hidden + 6 * self.intermediate) + 4 * (self.q_dim + 2 * self.kv_heads * self.head_dim)

    def kv_bytes_per_block(self, block_size: int, dtype_bytes: int) -> int:
        return self.layers * 2 * block_size * self.kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class MemoryPlan:
    device: str
    total: int
    """The device's memory, bytes."""
    limit: int
    """What the run may use: ``engine.gpu_memory_utilization`` of ``total``."""
    other: int
    """Held on the device by other processes at start."""
    trainer_resident: int
    trainer_step: int
    """Gradients and activations: only while the trainer steps."""
    engine_fixed: int
    """All engines, everything but their KV caches (contexts included)."""
    kv_blocks: int
    """Per engine."""
    kv_bytes: int
    """All engines' KV caches."""
    engines: int
    released: bool
    """The KV caches are freed while the trainer steps (``release_kv_while_training``)."""

    @property
    def peak(self) -> int:
        resident = self.other + self.trainer_resident + self.engine_fixed
        if self.released:
            return resident + max(self.kv_bytes, self.trainer_step)
        return resident + self.kv_bytes + self.trainer_step

    def line(self) -> str:
        g = lambda b: f"{b / GIB:.1f}"  # noqa: E731
        kv = f"KV cache {g(self.kv_bytes)} GiB ({self.engines} x {self.kv_blocks} blocks"
        kv += ", freed while the trainer steps)" if self.released else ")"
        other = f", other processes {g(self.other)}" if self.other else ""
        return (f"memory plan ({self.device}, {g(self.total)} GiB, engine and trainer share it): trainer "
                f"{g(self.trainer_resident)} GiB resident + {g(self.trainer_step)} while it steps, "
                f"{self.engines} engine(s) {g(self.engine_fixed)} GiB + {kv}{other}; peak {g(self.peak)} of "
                f"{g(self.limit)} GiB allowed (gpu_memory_utilization) [estimate]")


def plan_memory(shape: Shape, engine, trainer, *, device: str, total: int, other: int = 0, engines: int = 1,
                release_kv: bool = False, engine_dtype_bytes: int = 2, trainer_dtype_bytes: int = 2) -> MemoryPlan:
    """The plan for ``engines`` engines of config ``engine`` and one trainer of config ``trainer`` on a device of
    ``total`` bytes of which ``other`` are held by other processes. ConfigError, in one line, when it cannot fit."""
    P = shape.params
    trained = shape.lora_params(trainer.lora) if trainer.lora.enabled else P
    copies = 1 + (trainer.kl_coef > 0) + (trainer.algorithm == "ppo")
    trainer_resident = 4 * P * copies + 8 * trained + CONTEXT_BYTES  # float32 masters, AdamW's two moments
    if trainer.lora.enabled:
        trainer_resident += 4 * trained  # the adapters' own float32 weights beside the frozen base
    t = trainer.micro_batch_tokens_on("cuda")
    h, i, L, V = shape.hidden, shape.intermediate, shape.layers, shape.vocab
    per_layer = shape.saved_bytes_per_token_layer(trainer_dtype_bytes)
    activations = t * (per_layer + 4 * h * L if trainer.gradient_checkpointing else per_layer * L)
    trainer_step = 4 * trained + activations + 12 * t * V
    n, seqs = engine.max_num_batched_tokens, engine.max_num_seqs
    weights = P * engine_dtype_bytes * (2 if engine.lora.enabled else 1)
    step = n * (8 * h + 2 * i) * engine_dtype_bytes + 2 * seqs * V * 4
    from rollart.engine.model_runner import graph_workspace_bytes
    graphs = graph_workspace_bytes(seqs, V, engine.cuda_graphs)
    engine_fixed = engines * (weights + step + graphs + CONTEXT_BYTES)
    limit = int(total * engine.gpu_memory_utilization)
    per_block = shape.kv_bytes_per_block(engine.block_size, engine_dtype_bytes)
    resident = other + trainer_resident + engine_fixed
    budget = limit - resident - (0 if release_kv else trainer_step)
    fits = max(0, budget) // (engines * per_block)
    most = 2 * seqs * -(-(engine.max_model_len or shape.max_positions) // engine.block_size)  # the engine's own cap
    blocks = engine.num_kv_blocks or min(fits, most)
    plan = MemoryPlan(device, total, limit, other, trainer_resident, trainer_step, engine_fixed, blocks,
                      blocks * per_block * engines, engines, release_kv)
    need_blocks = -(-(engine.max_model_len or engine.max_num_batched_tokens) // engine.block_size)
    if blocks < need_blocks or plan.peak > limit:
        g = lambda b: f"{b / GIB:.1f} GiB"  # noqa: E731
        hints = "trainer.lora.rank, trainer.gradient_checkpointing=true, a smaller trainer.micro_batch_tokens"
        if not release_kv:
            hints += ", mode=sync with release_kv_while_training=true"
        raise ConfigError(f"the engine and the trainer do not fit on {device} ({g(total)}, {g(limit)} allowed by "
                          f"engine.gpu_memory_utilization={engine.gpu_memory_utilization}): trainer "
                          f"{g(trainer_resident)} + {g(trainer_step)} while it steps, engines {g(engine_fixed)}, KV "
                          f"cache {blocks} blocks of the {need_blocks} one sequence needs, other processes "
                          f"{g(other)}; try {hints}")
    return plan


def shared_gpu(cfg) -> str | None:
    """The CUDA device the engines and the trainer of resolved config ``cfg`` share on this machine, else None."""
    if cfg.cluster.backend != "local":
        return None
    from rollart.devices import resolve_device
    engine = resolve_device(cfg.engine.device if cfg.engine.device != "auto" else cfg.device)
    trainer = resolve_device(cfg.trainer.device if cfg.trainer.device != "auto" else cfg.device)
    if engine.type != "cuda" or trainer.type != "cuda":
        return None
    e, t = engine.index or 0, trainer.index or 0  # 'cuda' is the first visible GPU in a new actor process
    return f"cuda:{e}" if e == t else None


def device_memory(device: str, timeout_s: float = 120.0) -> tuple[int, int]:
    """(free, total) bytes of ``device``, asked in a short-lived process: asking here would give this coordinator a
    CUDA context (hundreds of MB of the GPU) for the whole run. ConfigError in one line when the GPU does not
    answer."""
    import subprocess
    import sys
    code = f"import torch; print(*torch.cuda.mem_get_info(torch.device({device!r})))"
    check = "check that the GPU works: python -c 'import torch; print(torch.cuda.mem_get_info())'"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"the memory plan asked for {device}'s memory and got no answer in {timeout_s:.0f} s; "
                          f"{check}") from None
    try:
        free, total = (int(x) for x in out.stdout.split())
    except ValueError:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"the memory plan could not read {device}'s memory ({last}); {check}") from None
    return free, total


def apply_memory_plan(cfg):
    """``cfg`` (resolved, its model folder in place) with the engines' KV cache sized by the plan when they share
    a GPU with the trainer (the plan said in one line), else unchanged."""
    device = shared_gpu(cfg)
    if device is None:
        return cfg
    import torch

    from rollart.devices import placement
    from rollart.models.config import ModelConfig
    free, total = device_memory(device)
    size = lambda dtype: torch.empty((), dtype=dtype).element_size()  # noqa: E731
    plan = plan_memory(Shape.of(ModelConfig.from_pretrained(cfg.model)), cfg.engine, cfg.trainer, device=device,
                       total=total, other=total - free, engines=cfg.num_inference_workers,
                       release_kv=cfg.release_kv_while_training,
                       engine_dtype_bytes=size(placement(device, cfg.engine.dtype if cfg.engine.dtype != "auto"
                                                         else cfg.dtype).dtype),
                       trainer_dtype_bytes=size(placement(device, cfg.trainer.dtype if cfg.trainer.dtype != "auto"
                                                          else cfg.dtype).dtype))
    log.info("%s", plan.line())
    if not cfg.quiet:
        print(plan.line(), flush=True)
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, num_kv_blocks=plan.kv_blocks))


__all__ = ["MemoryPlan", "Shape", "plan_memory", "apply_memory_plan", "shared_gpu"]
