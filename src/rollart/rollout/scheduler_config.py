"""RolloutScheduler's settings (``rollart.rollout.group_scheduler``): GRPO groups, redundancy, concurrency, when groups
start and in what task mix."""
from __future__ import annotations

from dataclasses import dataclass

from rollart.config import ConfigError


@dataclass
class SchedulerConfig:
    """RolloutScheduler settings."""
    group_size: int = 8
    """Complete trajectories per GRPO group."""
    extra_envs_per_group: int = 0
    """Redundancy: extra envs launched per group; cancelled once group_size are complete."""
    extra_groups: int = 0
    """Redundancy: extra groups launched per batch (collect_batch); cancelled once the batch is full."""
    max_replacements: int = 8
    """Per group: failed trajectories replaced (same seed) while the group could still fall short."""
    max_concurrency: int = 64
    """Most envs open at once (trajectories in flight)."""
    seed: int = 0
    """Seeds the task choice and the env reset seeds (in a run: derived from PipelineConfig.seed)."""
    max_failed_groups: int = 32
    """Groups that may fail in a row (every env broken, say) before the scheduler raises RolloutError."""
    defer_late_starts: bool = True
    """Per-turn bound (mode=async): a group whose task's recent groups took longer (median of the last 16) than is
    left before its start version is retired, but no longer than a whole window, starts at the next version
    instead of running until the bound aborts it (its generation wasted, its engine time taken from groups that
    can finish). Other modes abort nothing mid-flight, and this has no effect there."""
    keep_task_mix: bool = True
    """Several tasks: each task's share of the groups trained follows its weight. Groups start in that mix (a lost
    group's task is drawn again), and each batch the SampleBuffer forms takes every task's quota, waiting for a task it
    lacks while a group of it runs or can start. Off: tasks drawn at random by weight, and batches take the groups
    that finished first, so quick tasks fill them beyond their weight (and under the per-turn bound, a task whose
    groups outlast the window is hardly trained)."""

    def __post_init__(self) -> None:
        for name in ("group_size", "max_concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("extra_envs_per_group", "extra_groups", "max_replacements", "max_failed_groups"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0")
