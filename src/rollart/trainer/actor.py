"""TrainerActor: a trainer backend served as an actor (its own process by default).

It answers the trainer's requests of ``rollart.messages`` (``TrainStep``, ``SaveCheckpoint``, ...). Long ones
are ``@blocking`` so the actor keeps answering (heartbeats, cancels) while it trains. The trainer is the source
of the weight plane: ``PublishWeights`` snapshots a version into buckets served from its own address
(``WeightAddress``), where the weight store, or a worker on the same GPU node over CUDA IPC, pulls it; nothing
of it passes through the coordinator.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
from typing import Any

from rollart.actors import blocking, handles
from rollart.devices import peak_memory
from rollart.messages import (DeviceStats, GetVersion, JoinGroup, LoadCheckpoint, PublishedVersion, PublishWeights,
                              Rendezvous, ResetTrainer, SaveCheckpoint, TrainStep, WeightAddress, WeightBuckets,
                              WeightEndpoint, WeightsDigest)
from rollart.trainer import TrainerConfig, make_trainer
from rollart.trainer.collectives import bounded_waits


class TrainerActor:
    def __init__(self, config: TrainerConfig):
        self.config = config
        self.trainer: Any = make_trainer(config) if config.world_size == 1 else None  # a rank: built by join
        self.source: Any = None  # rollart.weightplane.WeightSource, started with the actor (rank 0's on demand)

    async def on_start(self) -> None:
        if self.config.world_size == 1:
            await self._source()

    @handles(Rendezvous)
    def rendezvous(self, msg: Rendezvous) -> tuple[str, int]:
        """Rank 0: a (host, port) for the group's torch.distributed rendezvous, free now on this machine; the
        host is this machine's address on its route toward the coordinator (loopback locally)."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((msg.toward, 9))  # no packet is sent: this only picks the outgoing interface
            host = s.getsockname()[0]
        with socket.socket() as s:
            s.bind((host, 0))
            return host, s.getsockname()[1]

    @handles(JoinGroup)
    @blocking
    def join(self, msg: JoinGroup) -> int:
        """Become data-parallel rank ``msg.rank``: build the trainer, which joins the process group at rank 0's
        rendezvous (returns once every rank has joined, with rank 0's weights broadcast); returns the version."""
        rank, master_addr, master_port = msg.rank, msg.master_addr, msg.master_port
        if self.trainer is not None:
            raise RuntimeError(f"this trainer already joined as rank {self.config.rank}")
        device = self.config.device
        if device in ("auto", "cuda"):
            import torch
            if torch.cuda.is_available() and torch.cuda.device_count() > 1:  # several GPUs visible: one each
                device = f"cuda:{rank % torch.cuda.device_count()}"
        self.config = dataclasses.replace(self.config, rank=rank, master_addr=master_addr, master_port=master_port,
                                          device=device)
        with self._bounded("the rendezvous"):
            self.trainer = make_trainer(self.config)
        return self.trainer.version

    def _bounded(self, what: str):
        """A wait for the other ranks past trainer.collective_timeout_s inside ``what`` raises one line."""
        c = self.config
        return bounded_waits(what, c.rank, c.world_size, c.collective_timeout_s)

    async def _source(self) -> Any:
        if self.source is None:
            from rollart.weightplane import WeightSource
            self.source = WeightSource()
        await self.source.start()
        return self.source

    @handles(WeightAddress)
    async def weight_address(self, msg: WeightAddress) -> WeightEndpoint:
        """Where this trainer serves its weight versions, its node, and whether its weights are on a GPU."""
        from rollart.weightplane.cuda import node_id
        source = await self._source()
        param = next(iter(self.trainer.policy.parameters()), None)
        return WeightEndpoint(source.address, node_id(), param is not None and param.is_cuda)

    @handles(WeightsDigest)
    @blocking
    def weights_digest(self, msg: WeightsDigest) -> dict[str, int]:
        """Name -> CRC-32 of every weight the trainer holds now (to check a sync without moving weights)."""
        from rollart.weightplane.buckets import digest
        return digest(self.trainer.named_tensors())

    @handles(PublishWeights)
    async def publish_weights(self, msg: PublishWeights) -> PublishedVersion:
        """Snapshot the current weights as ``msg.version`` and serve them (CUDA IPC handles too with ``ipc`` on a
        GPU); answers once the snapshot is taken."""
        source = await self._source()
        info = await source.publish(msg.version, self._live_tensors(), msg.bucket_bytes, ipc=msg.ipc)
        return PublishedVersion(info["version"], info["num_buckets"], info["bytes"], info["address"])

    def _live_tensors(self) -> list:
        """The weights where they live: a GPU trainer's device parameters (copied to pinned buckets, overlapped,
        and shareable over CUDA IPC) instead of its blocking CPU export; the export otherwise (CPU, ZeRO-3)."""
        if self.config.lora.enabled:  # the adapters alone: small, whatever the device
            return self.trainer.named_tensors()
        module = getattr(self.trainer.policy, "module", self.trainer.policy)  # a DeepSpeed engine wraps it
        params = list(module.named_parameters())
        if params and params[0][1].is_cuda and self.config.zero_stage != 3:
            return [(name, p.detach()) for name, p in params]
        return self.trainer.named_tensors()

    @handles(ResetTrainer)
    async def reset(self, msg: ResetTrainer) -> int:
        """Start over from the configured initial weights with a fresh optimizer at version 0 (one trainer
        process serving several runs one after the other, e.g. a benchmark comparing modes)."""
        if self.config.world_size > 1:
            raise RuntimeError("reset serves one trainer process; a data-parallel group starts afresh instead")
        return await asyncio.to_thread(self._rebuild)

    def _rebuild(self) -> int:
        self.trainer.close()
        self.trainer = make_trainer(self.config)
        if self.source is not None:  # the next run publishes from version 1 again: serve none of the last run's
            self.source.server.forget(0)
        return self.trainer.version

    @handles(GetVersion)
    def get_version(self, msg: GetVersion) -> int:
        return self.trainer.version

    def placement(self) -> dict:
        """Where this trainer runs: its process id and the cores it may use."""
        return {"pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0))}

    @handles(DeviceStats)
    def device_stats(self, msg: DeviceStats) -> dict:
        """Where the trainer computes and, on a GPU, its peak memory so far (GiB)."""
        return {"device": str(self.trainer.device), "dtype": str(self.trainer.compute_dtype).removeprefix("torch."),
                **peak_memory(self.trainer.device)}

    @handles(TrainStep)
    @blocking
    def train_step(self, msg: TrainStep) -> dict:
        """One update; ``msg.shard``: this rank was sent only its rows (``rollart.trainer.batching.shard_of``)."""
        with self._bounded("train step"):
            return self.trainer.train_step(msg.trajectories, shard=msg.shard)

    @handles(WeightBuckets)
    @blocking
    def weight_buckets(self, msg: WeightBuckets) -> list[tuple[list[str], list[Any]]]:
        """The current weights as buckets of (names, tensors), for the weight store."""
        return [([n for n, _ in b], [t for _, t in b]) for b in self.trainer.state_dict_buckets(msg.bucket_bytes)]

    @handles(SaveCheckpoint)
    @blocking
    def save_checkpoint(self, msg: SaveCheckpoint) -> str:
        with self._bounded("checkpoint save"):
            return str(self.trainer.save_checkpoint(msg.root, msg.extra, msg.keep_last))

    @handles(LoadCheckpoint)
    @blocking
    def load_checkpoint(self, msg: LoadCheckpoint) -> dict:
        with self._bounded("checkpoint load"):
            return self.trainer.load_checkpoint(msg.path)

    async def on_stop(self) -> None:
        if self.source is not None:
            await self.source.close()
        if self.trainer is not None:
            self.trainer.close()
