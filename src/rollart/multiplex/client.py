"""SharedTrainerClient: lets a Coordinator train through the shared TrainingService.

    cfg = grpo_frozenlake.default_config()
    await service.register_job("lake", shared_trainer_config(cfg, [TASK]))
    result = await Coordinator(cfg, [TASK], trainer=SharedTrainerClient(service, "lake")).run()

It serves the methods of ``rollart.pipeline.trainer_actor.TrainerActor`` (version, train_step,
weight_buckets, save_checkpoint, load_checkpoint) by queueing them as the job's operations.
"""
from __future__ import annotations

from typing import Any, Sequence

from rollart.pipeline.config import PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.trainer.config import TrainerConfig


def shared_trainer_config(cfg: PipelineConfig, tasks: Sequence[TaskSpec] = ()) -> TrainerConfig:
    """The trainer config a Coordinator of ``tasks`` would give its private trainer: the resolved run's (model
    folder, built as that run builds it, seed, pad id filled in)."""
    from rollart.pipeline.coordinator import prepare_run
    return prepare_run(cfg, tasks)[0].trainer


class SharedTrainerClient:
    name = "shared-trainer"

    def __init__(self, service: Any, job: str):
        self.service = service
        self.job = job

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"SharedTrainerClient.call({method!r}) takes positional arguments only")
        if method == "get_version":
            return await self.service.get_version(self.job)
        if method in ("train_step", "weight_buckets", "save_checkpoint", "load_checkpoint"):
            return await self.service.call(self.job, method, *args)
        raise AttributeError(f"shared training service has no trainer method {method!r}")

    async def stop(self) -> None:
        """The service owns the deployment; a job leaving does not stop it (see complete_job)."""
