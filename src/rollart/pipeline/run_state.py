"""What a run has done so far, and what it returns: the one record its loop, train steps, evaluations and
checkpoints share (each reads and writes it; nothing else of the run is shared state)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

from rollart.rollout.env_manager import TaskSpec
from rollart.types import Trajectory


class RunTasks(NamedTuple):
    train: list[TaskSpec]
    eval: list[TaskSpec]
    """Played greedily every ``eval_every`` steps and at the end (default: the training tasks)."""
    heldout: list[TaskSpec]
    """Disjoint from training, played in the background (``heldout_episodes`` each); empty: none."""


class Evaluation(NamedTuple):
    step: int
    """The step whose weights were evaluated (0: the initial weights)."""
    success: dict[str, float]
    """Greedy success per task, and their mean under ``"mean"``."""


class TrainedBatch(NamedTuple):
    step: int
    """The step this batch trained."""
    batch: list[Trajectory]


@dataclass
class RunState:
    step: int = 0
    """Train steps done (after a resume: counted from the run's start)."""
    history: list[dict] = field(default_factory=list)
    """Per-step metrics, ``{"step": n, ...}``."""
    evals: list[Evaluation] = field(default_factory=list)
    timings: list[dict[str, float]] = field(default_factory=list)
    """Per trained trajectory: seconds in env_reset, env_step, generate, reward and total."""
    uncheckpointed: list[TrainedBatch] = field(default_factory=list)
    """Batches of the train steps no checkpoint covers yet: trained again if the trainer loses them."""
    elapsed_before: float = 0.0
    """Training seconds of the run(s) before the checkpoint this one resumed from."""
    train_started: float = 0.0
    checkpointed_at: float = 0.0
    hw_affinity_changes: int = 0
    """Changes of the online profiler's mapping already reported."""

    def start_training(self) -> None:
        self.train_started = self.checkpointed_at = time.perf_counter()

    def elapsed(self) -> float:
        """Training seconds so far, across resumes."""
        return self.elapsed_before + time.perf_counter() - self.train_started

    def evaluated_now(self) -> bool:
        """The weights of the current step were evaluated already."""
        return bool(self.evals) and self.evals[-1].step == self.step


@dataclass
class RunResult:
    steps: int
    """Training steps completed in this run (after any resume)."""
    version: int
    """Final policy version."""
    final_success: dict[str, float]
    """Greedy evaluation success per task (and 'mean') with the final weights."""
    history: list[dict] = field(default_factory=list)
    """Per-step metrics."""
    evals: list[Evaluation] = field(default_factory=list)
    """(step, success per task) for every evaluation."""
    wall_s: float = 0.0
    run_dir: str = ""
    buffer: dict = field(default_factory=dict)
    """SampleBuffer counters at the end (accepted / trained / evicted by reason)."""
    rollout: dict = field(default_factory=dict)
    """RolloutScheduler counters at the end: trajectories launched, replaced, cancelled as extras; groups complete
    and failed; reasons (what generation went to trajectories that never trained)."""
    timings: list[dict] = field(default_factory=list)
    """Per trained trajectory: seconds in env_reset, env_step, generate, reward and total."""
    workers: dict = field(default_factory=dict)
    """Inference worker name -> its stats at the end (hardware class, steps, engine_seconds, ...)."""
    devices: dict = field(default_factory=dict)
    """Actor name -> its device and, on a GPU, peak memory in GiB ("peak_memory_gb") at the end of the run."""
