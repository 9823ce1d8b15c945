"""Sums and maxima over a trainer's data-parallel ranks: what makes N ranks' losses and metrics those of one batch.

Each is the identity with one process; with several, one ``torch.distributed`` all-reduce (the group is joined by
the backend). nccl reduces device tensors only, so a value is reduced on the trainer's device and comes back.
"""
from __future__ import annotations

import torch


def all_reduce_sum(t: torch.Tensor, world_size: int, device: torch.device) -> torch.Tensor:
    """Sum ``t`` over data-parallel ranks, on the CPU (identity with one process)."""
    if world_size > 1:
        import torch.distributed as dist
        t = t.to(device)  # a copy: nccl reduces device tensors only
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu()


def all_reduce_max(x: float, world_size: int, device: torch.device) -> float:
    """Largest ``x`` over data-parallel ranks (``x`` with one process)."""
    if world_size > 1:
        import torch.distributed as dist
        t = torch.tensor([x], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())
    return x
