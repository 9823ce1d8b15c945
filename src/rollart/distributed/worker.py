"""Worker base classes, one per role (RollArt §5.1). A Worker is a plain class; a Cluster runs
each one as an actor and tells it where it landed through :meth:`Worker.rollart_bind`."""
from __future__ import annotations

from typing import Any

from rollart.distributed.serverless import ServerlessFunction


class Worker:
    role = "train"
    """Which stage it serves; picks its default hardware class (train/generate/env/reward)."""
    hw_class: str | None = None
    """Hardware class: set on a subclass to pin placement (else the role's default); ``rollart_bind`` sets it
    to the class this worker was bound to (maybe a fallback)."""

    rank: int = 0
    world_size: int = 1
    worker_name: str = ""
    devices: list = []

    def rollart_bind(self, info: dict) -> dict:
        """Called by the Cluster right after the worker starts: rank, placement, serverless attributes."""
        self.rank = info["rank"]
        self.world_size = info["world_size"]
        self.worker_name = info["name"]
        self.hw_class = info["hw_class"]
        self.devices = list(info.get("devices", []))
        for attribute, (url, function, token) in info.get("serverless", {}).items():
            setattr(self, attribute, ServerlessFunction(url, function, token))
        return {"rank": self.rank, "hw_class": self.hw_class}

    async def on_stop(self) -> None:
        """Closes the HTTP sessions of serverless attributes; call super().on_stop() when overriding."""
        for value in list(vars(self).values()):
            if isinstance(value, ServerlessFunction):
                await value.client.close()

    def worker_info(self) -> dict[str, Any]:
        return {"name": self.worker_name, "rank": self.rank, "world_size": self.world_size,
                "hw_class": self.hw_class, "devices": self.devices, "role": self.role}


class TrainWorker(Worker):
    role = "train"


class GenerateWorker(Worker):
    role = "generate"


class RewardWorker(Worker):
    role = "reward"


class EnvWorker(Worker):
    role = "env"


# the paper's names (RollArt Listing 1)
ActorTrainCls = TrainWorker
ActorGenCls = GenerateWorker
RewardCls = RewardWorker
EnvironmentCls = EnvWorker
