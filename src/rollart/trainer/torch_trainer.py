"""Plain-PyTorch trainer: one process, or data parallel over torch.distributed (gloo on CPU, nccl on CUDA).

On its device (``trainer.device``) the policy keeps float32 master weights and AdamW state (fused AdamW on
CUDA); forward and backward run under ``torch.autocast`` in ``trainer.dtype`` (bf16 by default on a GPU), with
a dynamic loss scaler for float16. Micro-batches of at most ``micro_batch_tokens`` padded tokens accumulate
gradients; ``gradient_checkpointing`` recomputes layer activations in backward.

Data parallelism is explicit and small: every rank holds the full model, trains its rows of each
mini-batch (``shard_rows``), and gradients are summed with one flattened all-reduce before the step.
Because losses are token sums divided by the *global* number of loss tokens, the summed gradient is
exactly the gradient of the single-process loss, so N ranks give the same update as one process.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from rollart.trainer import checkpoint as ckpt
from rollart.trainer import lora
from rollart.trainer.base import Trainer
from rollart.trainer.networks import ValueModel
from rollart.trainer.config import TrainerConfig
from rollart.trainer.model_io import (build_model, enable_gradient_checkpointing, export_named_tensors,
                                      load_policy_weights, save_policy)
from rollart.trainer.device import dist_backend, trainer_placement
from rollart.trainer.collectives import timeout_of


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def init_distributed(cfg: TrainerConfig) -> None:
    """Join the data-parallel group (no-op for one process or when already initialised)."""
    if cfg.world_size == 1 or dist.is_initialized():
        return
    dist.init_process_group(dist_backend(cfg, trainer_placement(cfg)), init_method=f"tcp://{cfg.master_addr}:{cfg.master_port}",
                            rank=cfg.rank, world_size=cfg.world_size, timeout=timeout_of(cfg.collective_timeout_s))


def make_optimizer(cfg: TrainerConfig, params, fused: bool = False) -> torch.optim.Optimizer:
    """AdamW over the trainable ``params``; ``fused``: one kernel for the whole update (CUDA)."""
    return torch.optim.AdamW([p for p in params if p.requires_grad], lr=cfg.lr, betas=tuple(cfg.betas),
                             eps=cfg.adam_eps, weight_decay=cfg.weight_decay, fused=fused or None)


class TorchTrainer(Trainer):
    """GRPO/PPO on a torch nn.Module with AdamW; ``model`` may be passed in-process, else it is built
    from ``cfg.model_path`` / ``cfg.model_factory``."""

    def __init__(self, cfg: TrainerConfig, model: nn.Module | None = None):
        super().__init__(cfg)
        seed_everything(cfg.seed)
        if self.placement.is_cuda:
            torch.cuda.set_device(self.device)
        init_distributed(cfg)
        policy = model if model is not None else build_model(cfg)
        self.policy = policy.to(device=self.device, dtype=torch.float32)  # master weights
        self.policy.train()
        if cfg.gradient_checkpointing:
            enable_gradient_checkpointing(self.policy)
        self.autocast_dtype = self.compute_dtype
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.compute_dtype == torch.float16)
        """Dynamic loss scaling, on for float16 only (bf16 has float32's range)."""
        if cfg.world_size > 1:  # identical start on every rank, whatever each rank's init did
            with torch.no_grad():
                for t in list(self.policy.parameters()) + list(self.policy.buffers()):
                    dist.broadcast(t.data, src=0)
        self.ref_model = self._make_reference(self.policy)  # the base model, before any adapter
        if cfg.lora.enabled:
            self.policy = lora.attach(self.policy, cfg.lora)
        params = list(self.policy.parameters())
        if cfg.algorithm == "ppo":
            self.critic = ValueModel(_copy_for_critic(self.policy))
            if cfg.world_size > 1:
                for t in self.critic.parameters():
                    dist.broadcast(t.data, src=0)
            params += list(self.critic.parameters())
        self.trainable_params = [p for p in params if p.requires_grad]
        """What the optimizer updates (policy, then critic), in its parameter order."""
        self.optimizer = make_optimizer(cfg, self.trainable_params, fused=self.placement.is_cuda)

    # ------------------------------------------------------------------ step hooks
    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=False)
        for p in self.trainable_params:  # every rank must contribute a gradient tensor to the all-reduce
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def _backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def _optimizer_step(self) -> float:
        grads = [p.grad for p in self.trainable_params]
        if self.cfg.world_size > 1:
            flat = torch.cat([g.reshape(-1) for g in grads])  # one collective instead of one per tensor
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            offset = 0
            for g in grads:
                g.copy_(flat[offset: offset + g.numel()].view_as(g))
                offset += g.numel()
        self.scaler.unscale_(self.optimizer)
        if self.cfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.trainable_params, self.cfg.grad_clip)
        else:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        self.scaler.step(self.optimizer)  # skipped (and the scale lowered) if a float16 gradient overflowed
        self.scaler.update()
        return float(norm)

    # ------------------------------------------------------------------ weights and checkpoints
    def named_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every weight, or with LoRA the adapters only (what an engine merges into its base weights)."""
        if self.cfg.lora.enabled:
            return lora.adapter_tensors(self.policy, self.compute_dtype)
        return export_named_tensors(self.policy, self.compute_dtype)

    def save_checkpoint(self, root: str, extra: dict | None = None, keep_last: int = 3) -> str:
        """Atomic checkpoint of model, optimizer, RNG states, version and ``extra``; returns its folder."""
        meta = {"version": self.version, "extra": extra or {},
                "world_size": self.cfg.world_size, "backend": "torch"}
        rank, world = self.cfg.rank, self.cfg.world_size
        barrier = dist.barrier if world > 1 else None

        def write(tmp: Path) -> None:
            if rank == 0:
                if self.cfg.lora.enabled:  # the adapter (PEFT format) and, beside it, the merged model
                    lora.save_adapter(self.policy, self.cfg.lora, tmp / "adapter", self.cfg.model_path)
                    lora.save_merged(self.policy, self.cfg.lora, self.cfg.model_path, tmp / "model")
                else:
                    save_policy(self.policy, tmp / "model")
                torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
                if self.critic is not None:
                    torch.save(self.critic.state_dict(), tmp / "critic.pt")
            if barrier:
                barrier()
            ckpt.save_rng(tmp, rank)

        return str(ckpt.save_atomic(root, self.version, write, meta, rank=rank, barrier=barrier,
                                    keep_last=keep_last))

    def _load_state(self, folder: Path) -> None:
        if self.cfg.lora.enabled:
            ckpt.load_file(folder / "adapter" / "adapter_model.safetensors",
                           lambda p: lora.load_adapter_tensors(self.policy, lora.read_adapter(p)))
        else:
            ckpt.load_file(folder / "model" / "model.safetensors",
                           lambda p: load_policy_weights(self.policy, p.parent))
        ckpt.load_file(folder / "optimizer.pt", lambda p: self.optimizer.load_state_dict(
            torch.load(p, weights_only=False, map_location=self.device)))
        if self.critic is not None:
            ckpt.load_file(folder / "critic.pt",
                           lambda p: self.critic.load_state_dict(torch.load(p, map_location=self.device)))

    def close(self) -> None:
        if self.cfg.world_size > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def _copy_for_critic(policy: nn.Module) -> nn.Module:
    """The critic's trunk: a copy of the policy whose LM head is dropped (features = final hidden states)."""
    import copy

    trunk = copy.deepcopy(policy)
    if hasattr(trunk, "lm_head"):
        trunk.lm_head = nn.Identity()
    for p in trunk.parameters():
        p.requires_grad_(True)
    return trunk

