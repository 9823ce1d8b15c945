"""Where a trainer runs and in what precision: its device, compute dtype, autocast and loss scaling.

The settings are resolved by :func:`rollart.devices.placement` (the one place that decides); this module adds
what only a trainer needs: a data-parallel rank's own GPU, the collective backend that fits the device, and
the mixed-precision context (fp32 master weights, forward and backward under ``torch.autocast``).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

from rollart.devices import Placement, placement
from rollart.trainer.config import TrainerConfig


def trainer_placement(cfg: TrainerConfig) -> Placement:
    """The trainer's (device, compute dtype). A bare ``cuda`` becomes an indexed device: with several
    data-parallel ranks on one machine each takes its own GPU (``LOCAL_RANK``, else its rank, modulo the
    visible GPUs); alone, the current one."""
    p = placement(cfg.device, cfg.dtype, prefix="trainer.")
    if p.is_cuda and p.device.index is None:
        if cfg.world_size > 1:
            index = int(os.environ.get("LOCAL_RANK", cfg.rank)) % torch.cuda.device_count()
        else:
            index = torch.cuda.current_device()
        p = Placement(torch.device("cuda", index), p.dtype)
    return p


def dist_backend(cfg: TrainerConfig, where: Placement) -> str:
    """The torch.distributed backend: the configured one, or for ``auto`` nccl on CUDA and gloo on the CPU."""
    if cfg.dist_backend != "auto":
        return cfg.dist_backend
    return "nccl" if where.is_cuda else "gloo"


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of a batch on ``device`` (a no-op for tensors already there)."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@contextlib.contextmanager
def autocast(device: torch.device, dtype: torch.dtype | None) -> Iterator[None]:
    """Run the enclosed forward in ``dtype`` (matmuls, attention) over fp32 weights; None or float32: as is."""
    if dtype is None or dtype == torch.float32:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=dtype):
        yield
