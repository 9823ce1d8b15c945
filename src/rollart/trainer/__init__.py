"""Training side: RL losses, batching, trainer backends, the weight store and checkpoints.

    from rollart.trainer import TrainerConfig, make_trainer
    trainer = make_trainer(TrainerConfig(backend="torch", model_path="runs/tiny"))
    metrics = trainer.train_step(trajectories)      # list[Trajectory] -> {"losses/policy": ...}
    buckets = trainer.state_dict_buckets(1 << 20)    # [[(name, tensor), ...], ...] for the weight store
"""
from rollart.trainer.batching import build_batch, micro_batches
from rollart.trainer.config import TrainerConfig
from rollart.trainer.registry import TRAINERS, make_trainer, trainer_class

__all__ = ["TRAINERS", "TrainerConfig", "build_batch", "make_trainer", "micro_batches", "trainer_class"]
