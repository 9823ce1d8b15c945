"""The requests of the training path's actor calls, declared once: each names the actor role that answers it
and what it answers. An actor marks the method that answers one with ``@rollart.actors.handles(Type)``; a caller
sends it with ``await handle.send(Type(...))``, so no call on the training path names a method by string.

Inference workers answer ``GenerateRequest``, ``AbortRequest``, ``PullWeights``, ``UpdateWeights`` (with the
values of ``rollart.types``) and the queries below; trainers, the weight store and env hosts answer theirs.
A query several roles answer (``GetVersion``, ``WeightAddress``) is one type, answered by each.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rollart.types import AbortRequest, GenerateRequest, PullWeights, UpdateWeights, WeightBucket

__all__ = ["AbortRequest", "GenerateRequest", "PullWeights", "UpdateWeights",
           "GetVersion", "GetStats", "WeightAddress", "WeightEndpoint", "WaitWeights", "ForgetWeights",
           "TrainStep", "SaveCheckpoint", "LoadCheckpoint", "PublishWeights", "PublishedVersion", "WeightBuckets",
           "DeviceStats", "WeightsDigest", "Rendezvous", "JoinGroup", "ResetTrainer",
           "FetchVersion", "RewindVersions", "PutBucket", "PublishVersion",
           "CreateEnv", "ResetEnv", "StepEnv", "CloseEnv", "PrewarmEnvs", "CloseIdleEnvs"]


# ---------------------------------------------------------------- queries several roles answer

@dataclass
class GetVersion:
    """-> int: the policy version the actor holds (trainer, weight store: its newest, inference worker)."""


@dataclass
class GetStats:
    """-> dict: the actor's counters (diagnostics)."""


@dataclass
class WeightAddress:
    """-> WeightEndpoint (trainer, inference worker) or its address str (weight store): where the actor serves
    weight versions on the weight plane."""


@dataclass
class WeightEndpoint:
    address: str
    node: str = ""
    """The machine it runs on (CUDA IPC needs the same node)."""
    cuda: bool = False
    """Its weights live on a GPU."""


@dataclass
class WeightsDigest:
    """-> dict[str, int]: name -> CRC-32 of every weight held now (checks a sync without moving weights)."""


# ---------------------------------------------------------------- inference worker

@dataclass
class ReleaseKV:
    """-> int: abort what is in flight and free the engine's KV cache (bytes freed); requests wait until ReclaimKV."""


@dataclass
class ReclaimKV:
    """-> int: allocate the engine's KV cache again, empty (bytes it holds), and serve the requests that waited."""


@dataclass
class WaitWeights:
    """-> dict: wait for the background pull of ``version`` (``PullWeights``); its stats (seconds, bytes, ...)."""
    version: int


@dataclass
class ForgetWeights:
    """-> list[int]: drop the versions >= ``first`` held or being pulled (the trainer went back before them)."""
    first: int


# ---------------------------------------------------------------- trainer

@dataclass
class TrainStep:
    """-> dict[str, float]: one RL update on ``trajectories`` (its metrics). ``shard``: a data-parallel rank
    sent only its rows (``rollart.trainer.batching.shard_of``)."""
    trajectories: list
    shard: dict | None = None


@dataclass
class SaveCheckpoint:
    """-> str: save an atomic checkpoint under ``root`` with ``extra`` (the run's counters); its folder."""
    root: str
    extra: dict = field(default_factory=dict)
    keep_last: int = 3


@dataclass
class LoadCheckpoint:
    """-> dict: load (and verify) the checkpoint folder ``path``; the ``extra`` it was saved with."""
    path: str


@dataclass
class PublishWeights:
    """-> PublishedVersion: snapshot the current weights as ``version`` and serve them on the trainer's weight
    plane address (CUDA IPC handles too with ``ipc`` on a GPU); answered once the snapshot is taken."""
    version: int
    bucket_bytes: int
    ipc: bool = False


@dataclass
class PublishedVersion:
    version: int
    num_buckets: int
    bytes: int
    address: str


@dataclass
class WeightBuckets:
    """-> list[(names, tensors)]: the current weights as buckets (a trainer that serves no weight plane)."""
    bucket_bytes: int


@dataclass
class DeviceStats:
    """-> dict: where the trainer computes and, on a GPU, its peak memory so far."""


@dataclass
class Rendezvous:
    """-> (host, port): rank 0 of a data-parallel group opens a torch.distributed rendezvous, on its address
    toward ``toward`` (the coordinator's host)."""
    toward: str = "127.0.0.1"


@dataclass
class JoinGroup:
    """-> int: become data-parallel rank ``rank`` of the group whose rank 0 listens at ``master_addr:master_port``
    (answers once every rank joined, with rank 0's weights); the version."""
    rank: int
    master_addr: str
    master_port: int


@dataclass
class ResetTrainer:
    """-> int: start over from the configured initial weights with a fresh optimizer at version 0."""


# ---------------------------------------------------------------- weight store

@dataclass
class FetchVersion:
    """-> dict: pull ``version`` from the trainer's address ``source`` and serve it to the workers."""
    version: int
    source: str
    timeout_s: float | None = None
    retries: int | None = None
    link_bytes_per_s: float = 0.0
    """> 0 EMULATES a slower trainer -> store link (each bucket takes its bytes over this rate)."""


@dataclass
class RewindVersions:
    """-> int: forget the versions >= ``version`` (the trainer went back before it); how many were dropped."""
    version: int


@dataclass
class PutBucket:
    """-> int: store one bucket a coordinator pushes (a trainer that serves no weight plane); its bytes."""
    bucket: WeightBucket


@dataclass
class PublishVersion:
    """-> None: ``version``'s ``num_buckets`` pushed buckets are complete: serve it."""
    version: int
    num_buckets: int


# ---------------------------------------------------------------- env host

@dataclass
class CreateEnv:
    """-> dict: make an env (``gymnasium.make(env_id, **kwargs)``, with injected ``faults``); ``{ok, key, ...}``."""
    env_id: str
    kwargs: dict = field(default_factory=dict)
    faults: dict | None = None


@dataclass
class ResetEnv:
    """-> dict: ``{ok, observation, info}`` or ``{ok: False, error}``."""
    key: str
    seed: int | None = None
    options: dict | None = None


@dataclass
class StepEnv:
    """-> dict: ``{ok, observation, reward, terminated, truncated, info}`` or ``{ok: False, error}``. ``cores``:
    granted by the action scheduler (the host pins what the step starts to them)."""
    key: str
    action: str
    cores: list[int] | None = None


@dataclass
class CloseEnv:
    """-> bool: release the env (idempotent)."""
    key: str


@dataclass
class PrewarmEnvs:
    """-> int: create ``count`` envs ahead of a step, kept idle for reuse; how many were made."""
    env_id: str
    kwargs: dict = field(default_factory=dict)
    faults: dict | None = None
    count: int = 1


@dataclass
class CloseIdleEnvs:
    """-> int: close the envs kept idle for reuse; how many."""

