"""SampleBuffer's settings (``rollart.rollout.buffer``) and the training modes they choose."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from rollart.config import ConfigError

Mode = Literal["async", "areal", "oneoff", "sync"]
MODES: tuple[str, ...] = get_args(Mode)
"""The training modes, one list: the buffer's gate and the coordinator's loop are chosen by it."""


@dataclass
class BufferConfig:
    """SampleBuffer settings. In a run (``PipelineConfig.buffer``) every field is derived by ``resolve()``."""
    mode: Mode = "async"
    """async (per-turn bound, ROLLART) | areal (start-only bound) | oneoff | sync (α=0)."""
    alpha: int = 1
    """Asynchronous bound: trajectories must start at version >= current - alpha."""
    group_size: int = 8
    """Trajectories per GRPO group; put() takes exactly this many."""
    capacity: int = 256
    """Most trajectories held at once; set about (alpha + 1) * concurrent envs."""
    max_outstanding_groups: int = 0
    """Most groups started (``admit_group``) and not yet discarded or trained; AReaL's start-time staleness bound
    is (alpha + 1) * groups per batch. A batch's groups count until its train step is done (``batch_trained``),
    not only until ``get_batch`` takes them: AReaL's capacity, (η + version + 1) × batch over the samples
    accepted or running, counts them until training moves the version on. Freeing them at ``get_batch`` let
    rollout start, while a batch trained, trajectories for the batch after next, one version staler than α
    allows. 0: no bound (only capacity throttles)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r}: choose one of {MODES}")
        if self.alpha < 0:
            raise ConfigError(f"alpha={self.alpha} must be >= 0")
        if self.mode == "sync":
            self.alpha = 0
        if self.mode == "oneoff":
            self.alpha = 1
        if self.max_outstanding_groups < 0:
            raise ConfigError(f"max_outstanding_groups={self.max_outstanding_groups} must be >= 0")
        if self.group_size < 1 or self.capacity < self.group_size:
            raise ConfigError(f"need group_size >= 1 and capacity >= group_size "
                              f"(got group_size={self.group_size}, capacity={self.capacity})")
