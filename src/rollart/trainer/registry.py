"""Trainer backends by name: ``trainer="torch" | "deepspeed"`` or any ``"module:Class"`` string."""
from __future__ import annotations

from rollart.trainer.config import TrainerConfig
from rollart.trainer.model_io import resolve_object

TRAINERS = {
    "torch": "rollart.trainer.torch_trainer:TorchTrainer",
    "deepspeed": "rollart.trainer.deepspeed_trainer:DeepSpeedTrainer",
}


def trainer_class(name: str) -> type:
    """The trainer class registered under ``name`` (or named by a 'module:Class' string)."""
    if ":" not in name and name not in TRAINERS:
        raise ValueError(f"unknown trainer backend {name!r}; choose one of {sorted(TRAINERS)} "
                         "or give a 'module:Class' string")
    return resolve_object(TRAINERS.get(name, name))


def make_trainer(cfg: TrainerConfig, model=None):
    """Build the trainer for ``cfg.backend`` (``model`` optionally passes an nn.Module in-process)."""
    return trainer_class(cfg.backend)(cfg, model=model)
