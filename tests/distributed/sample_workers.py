"""Worker classes used by the distributed tests (importable by actor processes)."""
from __future__ import annotations

import asyncio
import os

import rollart.distributed as rdist


class GradWorker(rdist.TrainWorker):
    @rdist.register(mode="execute_all")
    def compute_gradients(self, x):
        # each rank returns a different gradient so aggregation is visible
        return x * (self.rank + 1)  # (N,)

    @rdist.register(mode="execute_all", aggregate="sum")
    def loss_sum(self, x):
        return float(x.sum()) * (self.rank + 1)

    @rdist.register(mode="one")
    def whoami(self) -> str:
        return self.worker_name

    @rdist.register(mode="round_robin")
    def rr_whoami(self) -> str:
        return self.worker_name


class HeteroGen(rdist.GenerateWorker):
    @rdist.hw_mapping(hw_affinity={"FrozenLake": "H800", "default": "H20"})
    async def generate(self, prompt: str, task: str = "default", delay: float = 0.0) -> dict:
        if delay:
            await asyncio.sleep(delay)
        return {"worker": self.worker_name, "hw": self.hw_class, "text": prompt[::-1]}


class Scorer(rdist.RewardWorker):
    @rdist.register_serverless(attribute="reward_proxy")
    def compute_rewards(self, traj: list, scale: float = 1.0) -> float:
        """Local body: used only when no serverless endpoint is declared."""
        return float(len(traj)) * scale + 1000.0

    @rdist.register(mode="one")
    async def score_via_proxy(self, traj: list) -> float:
        return await self.reward_proxy(traj, scale=2.0)



class Plain:
    """A plain class (no Worker base, no rollart_bind): placed and served like any worker."""

    def __init__(self, label: str = "", speed: str = ""):
        self.label, self.speed = label, speed

    def info(self) -> dict:
        return {"label": self.label, "speed": self.speed, "hw_class": os.environ.get("ROLLART_HW_CLASS")}

    def cuda_visible_devices(self) -> str | None:
        return os.environ.get("CUDA_VISIBLE_DEVICES")
