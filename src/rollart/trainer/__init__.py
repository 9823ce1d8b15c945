"""The training plane: turns scored trajectories into policy updates and hands the new weights on.

The step: ``base`` (Trainer: the interface and the RL train step every backend shares), ``objective`` (the loss
of one micro-batch from the ``losses`` terms), ``networks`` (the critic and the frozen reference), ``batching``
(trajectories to padded tensors), ``collectives`` (sums over data-parallel ranks), ``mismatch`` (train/inference
mismatch metrics). Backends: ``torch_trainer`` and ``deepspeed_trainer``, chosen by name in ``registry``, placed
by ``device``, with ``model_io`` and ``checkpoint``; ``config`` (TrainerConfig). In a run: ``actor``
(TrainerActor, the source of the weight plane), ``group`` (TrainerGroup: data-parallel ranks as one trainer),
``shutdown``.

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
