"""The requests of the multiplex services, declared once (the training path's own are in ``rollart.messages``).

A job asks the shared training service with the trainer's messages (``TrainStep``, ``WeightBuckets``,
``SaveCheckpoint``, ``LoadCheckpoint``, ``GetVersion``, ``DeviceStats``) and with the narrow-API operations only
a shared deployment offers (``Forward``, ``ForwardBackward``, ``OptimStep``, ``Materialize``). The Scheduler adds
each job's lifecycle and the context switches (``AddJob``, ``RemoveJob``, ``Offload``, ``Load``); the Router hands
every one of them to each rank of a deployment as an ``Operation``, numbered in the deployment's serial order.

An actor several jobs share takes what one job asks as a ``JobMessage``: the shared inference worker every
message of a job's rollout and weight sync, a deployment rank the queries outside the serial order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollart.messages import DeviceStats, GetVersion, LoadCheckpoint, SaveCheckpoint, TrainStep, WeightBuckets
from rollart.trainer.config import TrainerConfig

__all__ = ["Forward", "ForwardBackward", "OptimStep", "Materialize", "AddJob", "RemoveJob", "Offload", "Load",
           "Operation", "Prefetch", "OpLog", "JobMessage", "RegisterJob", "JOB_OPERATIONS", "JOB_QUERIES",
           "op_name"]


# ---------------------------------------------------------------- a job's operations (the narrow API)

@dataclass
class Forward:
    """-> list[np.ndarray]: the per-token log-probs of each trajectory under the job's current weights."""
    trajectories: list


@dataclass
class ForwardBackward:
    """-> dict: accumulate the RL loss gradient of ``trajectories`` (one mini-batch); ``OptimStep`` applies it."""
    trajectories: list


@dataclass
class OptimStep:
    """-> dict: apply the accumulated gradients (``losses/grad_norm``, ``charts/version``)."""


@dataclass
class Materialize:
    """-> str: checkpoint the job's full state from managed memory or disk to the file ``path``, without making
    it resident (an offloaded job stays offloaded)."""
    path: str


# ---------------------------------------------------------------- what the Scheduler adds

@dataclass
class AddJob:
    """-> int: build the job's trainer from ``config`` on the rank; it becomes the resident job. Its version."""
    config: TrainerConfig


@dataclass
class RemoveJob:
    """-> None: drop the job's trainer and its managed state."""


@dataclass
class Offload:
    """-> dict: first half of a context switch: the resident job's state into the StateManager (``tier``: 'host'
    or 'disk', None for the rank's own), its live tensors released. The StateManager's stats."""
    tier: str | None = None


@dataclass
class Load:
    """-> None: second half of a context switch: the job's state back from the StateManager (bit-exact)."""


@dataclass
class Operation:
    """-> what ``request`` answers: ``job``'s request as the ``seq``-th operation the Router admitted on the
    rank's deployment (one at a time, in this order, on every rank)."""
    seq: int
    job: str
    request: Any


# ---------------------------------------------------------------- outside the serial order

@dataclass
class Prefetch:
    """-> None: a hint: start moving ``job``'s state up from disk ahead of its predicted switch."""
    job: str


@dataclass
class OpLog:
    """-> list[(seq, job, op)]: the operations a rank executed, in execution order."""


@dataclass
class JobMessage:
    """-> what ``message`` answers, for ``job``: one job's message to an actor several jobs share."""
    job: str
    message: Any


@dataclass
class RegisterJob:
    """-> int: give a shared inference worker ``job`` with the weights of the model folder ``model_dir``
    (version 0, offloaded until its first request)."""
    job: str
    model_dir: str


JOB_OPERATIONS = (Forward, ForwardBackward, OptimStep, TrainStep, WeightBuckets, SaveCheckpoint, LoadCheckpoint,
                  Materialize)
"""What a job's requests to the training service queue as (in HRRS order, each alone on the deployment)."""
JOB_QUERIES = (GetVersion, DeviceStats)
"""What the training service answers for a job at once, from rank 0 of its deployment."""

_OP_NAMES = {Forward: "forward", ForwardBackward: "forward_backward", OptimStep: "optim_step",
             TrainStep: "train_step", WeightBuckets: "weight_buckets", SaveCheckpoint: "save_checkpoint",
             LoadCheckpoint: "load_checkpoint", Materialize: "materialize", AddJob: "add_job",
             RemoveJob: "remove_job", Offload: "offload", Load: "load"}


def op_name(request: Any) -> str:
    """The operation kind of ``request`` as the logs and execution-time estimates name it ('train_step', ...)."""
    try:
        return _OP_NAMES[type(request)]
    except KeyError:
        raise TypeError(f"{type(request).__qualname__} is no operation of a training deployment; the operations "
                        f"are {', '.join(t.__name__ for t in _OP_NAMES)}") from None
