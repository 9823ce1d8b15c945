"""TrainerActor: a trainer backend served as an actor (its own process by default).

Long methods are ``@blocking`` so the actor keeps answering (heartbeats, cancels) while it trains.
"""
from __future__ import annotations

import os
from typing import Any

from rollart.actors import blocking
from rollart.devices import peak_memory
from rollart.trainer import TrainerConfig, make_trainer


class TrainerActor:
    def __init__(self, config: TrainerConfig):
        self.config = config
        self.trainer = make_trainer(self.config)

    @blocking
    def reset(self) -> int:
        """Start over from the configured initial weights with a fresh optimizer at version 0 (one trainer
        process serving several runs one after the other, e.g. a benchmark comparing modes)."""
        self.trainer.close()
        self.trainer = make_trainer(self.config)
        return self.trainer.version

    def get_version(self) -> int:
        return self.trainer.version

    def placement(self) -> dict:
        """Where this trainer runs: its process id and the cores it may use."""
        return {"pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0))}

    def device_stats(self) -> dict:
        """Where the trainer computes and, on a GPU, its peak memory so far (GiB)."""
        return {"device": str(self.trainer.device), "dtype": str(self.trainer.compute_dtype).removeprefix("torch."),
                **peak_memory(self.trainer.device)}

    @blocking
    def train_step(self, trajectories: list) -> dict:
        return self.trainer.train_step(trajectories)

    @blocking
    def weight_buckets(self, bucket_bytes: int) -> list[tuple[list[str], list[Any]]]:
        """The current weights as buckets of (names, tensors), for the weight store."""
        return [([n for n, _ in b], [t for _, t in b]) for b in self.trainer.state_dict_buckets(bucket_bytes)]

    @blocking
    def save_checkpoint(self, root: str, extra: dict, keep_last: int = 3) -> str:
        return str(self.trainer.save_checkpoint(root, extra, keep_last))

    @blocking
    def load_checkpoint(self, path: str) -> dict:
        return self.trainer.load_checkpoint(path)

    def on_stop(self) -> None:
        self.trainer.close()
