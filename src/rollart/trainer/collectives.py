"""Sums and maxima over a trainer's data-parallel ranks: what makes N ranks' losses and metrics those of one batch;
and the bound on every wait for the other ranks (``trainer.collective_timeout_s``).

Each reduction is the identity with one process; with several, one ``torch.distributed`` all-reduce (the group is
joined by the backend, with ``collective_timeout_s`` as the group's timeout). nccl reduces device tensors only, so a
value is reduced on the trainer's device and comes back. A collective that times out raises somewhere inside
torch.distributed (gloo: "Timed out waiting 600000ms for recv ..."); ``bounded_waits`` turns that into one line
naming what the rank was doing, the ranks it waited on and the setting.
"""
from __future__ import annotations

import contextlib
import datetime
import re
from typing import Iterator

import torch

_TIMEOUT = re.compile(r"timed out|timeout|timing out", re.IGNORECASE)
_SOURCE = re.compile(r"^\[[^\]]*\]\s*")  # gloo's "[.../unbound_buffer.cc:78] " prefix


class CollectiveTimeoutError(RuntimeError):
    """A torch.distributed wait for the other data-parallel ranks passed ``trainer.collective_timeout_s``."""


def timeout_of(seconds: float) -> datetime.timedelta:
    """``trainer.collective_timeout_s`` as the timeout torch.distributed and DeepSpeed take."""
    return datetime.timedelta(seconds=seconds)


@contextlib.contextmanager
def bounded_waits(what: str, rank: int, world_size: int, timeout_s: float) -> Iterator[None]:
    """Run ``what`` (e.g. "train step"); a torch.distributed timeout inside becomes one CollectiveTimeoutError line."""
    try:
        yield
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if world_size == 1 or isinstance(e, CollectiveTimeoutError) or not _TIMEOUT.search(first):
            raise
        others = ", ".join(str(r) for r in range(world_size) if r != rank)
        raise CollectiveTimeoutError(
            f"trainer rank {rank}: {what} waited on rank{'s' * (world_size > 2)} {others} of the data-parallel group "
            f"with no progress for {timeout_s:g} s (trainer.collective_timeout_s); torch.distributed: "
            f"{_SOURCE.sub('', first)[:160]}") from e


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
