"""Policy versions: how stale a token or trajectory is, measured one way everywhere.

A policy version counts train steps: the trainer's ``optimizer_step`` that ends a step makes version n+1,
the weight store publishes it, the inference engines tag every token they sample with the version they
hold. Who holds which version (one holder per role):

    trainer      Trainer.version            the policy being trained (the next one to publish)
    weight store WeightStore.latest_version newest complete version a worker may pull
    coordinator  WeightSync.version         the version the run has reached (published after each step)
    proxy        WorkerHealth.version       what every inference worker should hold (read as LLMProxy.version)
    engine       engine.version             the weights loaded now; the tag on each sampled token
    buffer       SampleBuffer.version       the agent LLM's version n that gates the window n - alpha

An actor answers ``rollart.messages.GetVersion`` with the version it holds (TrainerActor, WeightStore,
InferenceWorker, and the multiplex services for a job).
"""
from __future__ import annotations

from typing import Sequence, TypeVar

from rollart.types import Trajectory

Lag = TypeVar("Lag")


def staleness(current: Lag, sampled: Lag) -> Lag:
    """Versions ``sampled`` lies behind ``current`` (0 when it is not older); ints or, elementwise, tensors."""
    lag = current - sampled
    return lag * (lag > 0)


def trained_versions(traj: Trajectory) -> list[int]:
    """The version that sampled each token the trajectory is trained on (its model tokens)."""
    return [v for v, m in zip(traj.versions, traj.loss_mask) if m]


def oldest_version(traj: Trajectory) -> int:
    """The oldest policy behind the trajectory's trained tokens (``start_version`` when it has none)."""
    return min(trained_versions(traj), default=traj.start_version)


def version_span(traj: Trajectory) -> int:
    """How many weight updates a trajectory's model tokens straddle (0: all from one version)."""
    versions = trained_versions(traj)
    return max(versions) - min(versions) if versions else 0


def staleness_values(trajectories: Sequence[Trajectory], version: int, per_token: bool = False) -> list[int]:
    """Staleness at ``version`` of each trajectory (its oldest trained token) or of each trained token."""
    if per_token:
        return [staleness(version, v) for t in trajectories for v in trained_versions(t)]
    return [staleness(version, oldest_version(t)) for t in trajectories]
