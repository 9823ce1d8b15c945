"""The training plane: turns scored trajectories into policy updates and hands the new weights on.

RL losses, batching, the torch and DeepSpeed backends, the weight store and checkpoints.

    from rollart.trainer import TrainerConfig, make_trainer
    trainer = make_trainer(TrainerConfig(backend="torch", model_path="runs/tiny"))
    metrics = trainer.train_step(trajectories)      # list[Trajectory] -> {"losses/policy": ...}
    terms = trainer.forward_backward(trajectories)  # or step by step: LossTerms(policy=..., kl=..., ...)
    grad_norm = trainer.optimizer_step()            # applies it; trainer.version advances
    buckets = trainer.state_dict_buckets(1 << 20)    # [[(name, tensor), ...], ...] for the weight store
"""
from rollart.trainer.batching import build_batch, micro_batches
from rollart.trainer.config import TrainerConfig
from rollart.trainer.losses import LossTerms
from rollart.trainer.registry import TRAINERS, make_trainer, trainer_class

__all__ = ["TRAINERS", "LossTerms", "TrainerConfig", "build_batch", "make_trainer", "micro_batches",
           "trainer_class"]
