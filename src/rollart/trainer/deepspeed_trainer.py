"""DeepSpeed trainer (ZeRO 0-3): the same RL step as the torch backend, DeepSpeed doing the optimiser mechanics.

DeepSpeed is imported only inside this backend (``pip install deepspeed``). ``trainer.device`` picks its
accelerator: on the CPU it runs over gloo with ``DS_ACCELERATOR=cpu``; on CUDA over nccl, DeepSpeed placing
the model on the GPU, and every batch is moved to the model's device (``self.device``) before its forward.
``trainer.dtype`` bfloat16/float16 turns on DeepSpeed's own bf16/fp16 mode (it keeps fp32 master weights in
its optimizer). A single process without a launcher gets the RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* variables
from the config so DeepSpeed does not try MPI.

Choices, and why:
  * the optimiser is a torch ``AdamW`` passed to ``deepspeed.initialize`` — the config optimiser "AdamW"
    would compile ``fused_adam`` (~37 s on a fresh CPU machine) for no gain at this scale;
  * one train step may have any number of micro-batches, so the gradient-accumulation boundary is set
    by hand (``set_gradient_accumulation_boundary``) and ``engine.step()`` runs once per mini-batch;
  * DeepSpeed *averages* gradients over data-parallel ranks while our losses are already normalised by
    the global token count, so each rank's loss is multiplied by ``world_size`` to get the sum back;
  * a single process skips DeepSpeed's shared-memory all-reduce kernel (there are no peers to reduce
    with); it would otherwise be compiled (~20 s or more) at the first start.
  * ``algorithm="ppo"`` (critic) is served by the torch backend only.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn as nn

from rollart.trainer import checkpoint as ckpt
from rollart.trainer import lora
from rollart.trainer.base import Trainer
from rollart.trainer.networks import forward_logits
from rollart.trainer.config import TrainerConfig
from rollart.trainer.model_io import build_model, enable_gradient_checkpointing, save_policy
from rollart.trainer.collectives import timeout_of
from rollart.trainer.device import dist_backend
from rollart.trainer.torch_trainer import make_optimizer, seed_everything


def _import_deepspeed(cfg: TrainerConfig, device: torch.device):
    # DeepSpeed picks its accelerator once per process, from this variable: the resolved device decides
    os.environ["DS_ACCELERATOR"] = "cuda" if device.type == "cuda" else "cpu"
    local_rank = device.index if device.type == "cuda" else cfg.rank  # DeepSpeed puts the model on this GPU
    for key, value in (("RANK", cfg.rank), ("WORLD_SIZE", cfg.world_size), ("LOCAL_RANK", local_rank),
                       ("MASTER_ADDR", cfg.master_addr), ("MASTER_PORT", cfg.master_port)):
        os.environ.setdefault(key, str(value))
    try:
        import deepspeed
    except ImportError:
        raise ImportError("trainer=deepspeed needs DeepSpeed: pip install deepspeed "
                          "(or use trainer.backend=torch)") from None
    if cfg.world_size == 1:
        import deepspeed.ops
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # no peers: nothing to reduce
    return deepspeed


class DeepSpeedTrainer(Trainer):
    """GRPO on a DeepSpeed engine; ``cfg.zero_stage`` selects ZeRO 0, 1, 2 or 3."""

    def __init__(self, cfg: TrainerConfig, model: nn.Module | None = None):
        if cfg.algorithm != "grpo":
            raise ValueError(f"trainer.backend=deepspeed supports algorithm='grpo' only; for "
                             f"{cfg.algorithm!r} use trainer.backend=torch")
        super().__init__(cfg)
        seed_everything(cfg.seed)
        deepspeed = _import_deepspeed(cfg, self.device)
        self._ds = deepspeed
        if self.placement.is_cuda:
            torch.cuda.set_device(self.device)
        deepspeed.init_distributed(dist_backend=dist_backend(cfg, self.placement),
                                   timeout=timeout_of(cfg.collective_timeout_s))
        module = (model if model is not None else build_model(cfg)).float()  # DeepSpeed casts for bf16/fp16
        if cfg.gradient_checkpointing:
            enable_gradient_checkpointing(module)
        ref = self._make_reference(module)  # before ZeRO-3 partitions the parameters (and before any adapter)
        if cfg.lora.enabled:
            module = lora.attach(module, cfg.lora)
        optimizer = make_optimizer(cfg, module.parameters())  # the trainable ones: with LoRA, the adapters
        ds_config = {
            "train_micro_batch_size_per_gpu": 1,  # unused: we feed our own micro-batches
            "gradient_accumulation_steps": 1,
            "gradient_clipping": cfg.grad_clip,
            "zero_optimization": {"stage": cfg.zero_stage},
            "zero_allow_untested_optimizer": True,
            "bf16": {"enabled": self.compute_dtype == torch.bfloat16},
            "fp16": {"enabled": self.compute_dtype == torch.float16},
            "steps_per_print": 10**9,
        }
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=module, optimizer=optimizer,
                                                                 config=ds_config)
        self.policy = self.engine
        self.device = torch.device(self.engine.device)  # where DeepSpeed put the model: batches go there
        self.ref_model = ref.to(device=self.device, dtype=self.compute_dtype) if ref is not None else None

    # ------------------------------------------------------------------ step hooks
    def _zero_grad(self) -> None:
        pass  # DeepSpeed zeroes gradients inside engine.step()

    def _begin_micro(self, last: bool) -> None:
        # gradients are reduced across ranks only on the boundary pass (the last micro-batch)
        self.engine.set_gradient_accumulation_boundary(last)

    def _backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss * self.cfg.world_size)  # DeepSpeed averages over ranks; we want the sum

    def _backward_nothing(self) -> None:
        self.engine.backward(forward_logits(self.engine, self._dummy_ids()).sum() * 0.0)

    @torch.no_grad()
    def _forward_nothing(self) -> None:
        forward_logits(self.engine, self._dummy_ids())

    def _dummy_ids(self) -> torch.Tensor:
        return torch.full((1, 2), self.cfg.pad_id, dtype=torch.long, device=self.device)

    def _max_over_ranks(self, n: int) -> int:
        if self.cfg.world_size == 1:
            return n
        import torch.distributed as dist
        t = torch.tensor([n], dtype=torch.long, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def _optimizer_step(self) -> float:
        norm = None
        if self.cfg.zero_stage == 0:
            grads = [p.grad for p in self.engine.module.parameters() if p.grad is not None]
            if grads:  # (DeepSpeed's bf16 optimizer keeps them in its own fp32 buffers instead)
                norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        self.engine.step()
        if norm is None:
            got = self.engine.get_global_grad_norm()
            norm = float(got) if got is not None else float("nan")
        return norm

    # ------------------------------------------------------------------ weights and checkpoints
    def named_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every weight, or with LoRA the adapters only (gathered first under ZeRO-3)."""
        if self.cfg.lora.enabled:
            adapters = [p for n, p in self.engine.module.named_parameters() if ".lora_" in n]
            if self.cfg.zero_stage == 3:
                with self._ds.zero.GatheredParameters(adapters, modifier_rank=None):
                    return [(n, t.clone()) for n, t in lora.adapter_tensors(self.engine.module, self.compute_dtype)]
            return lora.adapter_tensors(self.engine.module, self.compute_dtype)
        params = list(self.engine.module.named_parameters())
        if self.cfg.zero_stage == 3:  # parameters are partitioned: gather, copy out, release
            with self._ds.zero.GatheredParameters([p for _, p in params], modifier_rank=None):
                return [(n, p.detach().to(self.compute_dtype).to("cpu").clone()) for n, p in params]
        return [(n, p.detach().to(self.compute_dtype).to("cpu")) for n, p in params]

    def _full_module(self) -> nn.Module:
        """An unpartitioned copy of the policy (for saving in HF format)."""
        import copy
        if self.cfg.zero_stage != 3:
            return self.engine.module
        named = dict(self.named_tensors())
        module = copy.deepcopy(self.engine.module)
        for n, p in module.named_parameters():
            p.data = named[n].clone()
        return module

    def save_checkpoint(self, root: str, extra: dict | None = None, keep_last: int = 3) -> str:
        """Atomic checkpoint: HF-format model, DeepSpeed optimizer/engine state, RNG, version, ``extra``."""
        import torch.distributed as dist
        meta = {"version": self.version, "extra": extra or {},
                "world_size": self.cfg.world_size, "backend": "deepspeed", "zero_stage": self.cfg.zero_stage}
        rank = self.cfg.rank
        full = self._full_module()  # collective under ZeRO-3: every rank takes part

        def write(tmp: Path) -> None:
            if rank == 0 and self.cfg.lora.enabled:  # the adapter (PEFT format) and the merged model
                lora.save_adapter(full, self.cfg.lora, tmp / "adapter", self.cfg.model_path)
                lora.save_merged(full, self.cfg.lora, self.cfg.model_path, tmp / "model")
            elif rank == 0:
                save_policy(full, tmp / "model")
            self.engine.save_checkpoint(str(tmp / "deepspeed"), tag="state", save_latest=False)
            ckpt.save_rng(tmp, rank)

        barrier = dist.barrier if self.cfg.world_size > 1 else None
        return str(ckpt.save_atomic(root, self.version, write, meta, rank=rank, barrier=barrier,
                                    keep_last=keep_last))

    def _load_state(self, folder: Path) -> None:
        load_path, _ = ckpt.load_file(folder / "deepspeed",
                                      lambda p: self.engine.load_checkpoint(str(p), tag="state"))
        if load_path is None:
            raise FileNotFoundError(f"DeepSpeed found no engine state in {folder / 'deepspeed'}; the checkpoint "
                                    "was not written by the deepspeed backend (or with another ZeRO layout)")

    def close(self) -> None:
        """Wait for the other ranks, then destroy the process group. DeepSpeed keeps the groups referenced, so
        their C++ threads outlive this call: a process that ran this trainer ends with
        ``rollart.trainer.shutdown.exit_process`` (actor processes do), not through interpreter finalisation."""
        import torch.distributed as dist
        if dist.is_initialized():
            if self.cfg.world_size > 1:
                dist.barrier()
            dist.destroy_process_group()

