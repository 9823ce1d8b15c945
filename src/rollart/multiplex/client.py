"""What a job's run holds of the shared services: its trainer (``SharedTrainerClient``) on the TrainingService
and its view of each shared inference worker (``JobWorker``), both ``ActorRef``s a Coordinator uses as its own.

    cfg = grpo_frozenlake.default_config()
    await service.register_job("lake", shared_trainer_config(cfg, [TASK]))
    result = await Coordinator(cfg, [TASK], trainer=SharedTrainerClient(service, "lake"),
                               inference=[("shared-gen", "cpu", JobWorker(shared_worker, "lake"))]).run()

The client is the run's trainer (an ``ActorRef``): it answers the messages of ``rollart.trainer.actor.TrainerActor``
the service offers (``TrainStep``, ``WeightBuckets``, ``SaveCheckpoint``, ``LoadCheckpoint``, ``GetVersion``,
``DeviceStats``) by sending them as the job's requests; any other (``WeightAddress``: the service serves no
weight plane, so the run pushes the weights it gets from ``WeightBuckets``) raises TypeError.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

from rollart.actors import ActorRef
from rollart.multiplex.messages import JobMessage
from rollart.multiplex.service import TrainingService
from rollart.pipeline.config import PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.trainer.config import TrainerConfig


def shared_trainer_config(cfg: PipelineConfig, tasks: Sequence[TaskSpec] = ()) -> TrainerConfig:
    """The trainer config a Coordinator of ``tasks`` would give its private trainer: the resolved run's (model
    folder, built as that run builds it, seed, pad id filled in)."""
    from rollart.pipeline.prepare import prepare_run
    return prepare_run(cfg, tasks).config.trainer


class SharedTrainerClient:
    """One job's trainer on a shared TrainingService. The service is not the run's to restart
    (``supervised`` False, ``restarts`` 0); it is ``alive`` while the job is registered and active."""

    supervised = False
    restarts = 0

    def __init__(self, service: TrainingService, job: str, name: str = "shared-trainer"):
        self.service = service
        self.job = job
        self.name = name

    @property
    def alive(self) -> bool:
        return not self.service.ended(self.job)

    @property
    def dead_reason(self) -> str:
        return self.service.ended(self.job)

    async def send(self, message: Any, timeout: float | None = None) -> Any:
        """The service's answer to the job's ``message``; TypeError for a message it does not serve."""
        async with asyncio.timeout(timeout):
            return await self.service.send(self.job, message)

    def on_restart(self, callback: Callable[[str, str], Any]) -> None:
        """The run's runtime never restarts the shared service: nothing to call back."""


class JobWorker:
    """One job's view of a shared inference worker: the ``ActorRef`` a job's LLMProxy and WeightSync use. Every
    message goes to the shared worker as ``JobMessage(job, message)``. The worker is a shared service, not one
    the job's run restarts (``supervised`` False, ``restarts`` 0); it lives and dies with the shared actor."""

    supervised = False
    restarts = 0

    def __init__(self, shared: ActorRef, job: str):
        self.shared = shared
        self.job = job
        self.name = f"{shared.name}[{job}]"

    @property
    def alive(self) -> bool:
        return self.shared.alive

    @property
    def dead_reason(self) -> str:
        return self.shared.dead_reason

    def send(self, message: Any, timeout: float | None = None) -> Any:
        return self.shared.send(JobMessage(self.job, message), timeout=timeout)

    def on_restart(self, callback: Callable[[str, str], Any]) -> None:
        """The job's run never restarts the shared worker: nothing to call back."""
