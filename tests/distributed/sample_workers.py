"""Worker classes used by the distributed tests (importable by actor processes)."""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from rollart.actors import handles, wire_dataclass


@wire_dataclass
@dataclass
class Info:
    """-> dict: what the worker knows of where it runs."""


@wire_dataclass
@dataclass
class Sleep:
    """-> None: answer after ``seconds``."""
    seconds: float


class Plain:
    """A plain class (no ``rollart_bind``): placed and served like any worker."""

    def __init__(self, label: str = "", speed: str = ""):
        self.label, self.speed = label, speed

    @handles(Info)
    def info(self, msg: Info) -> dict:
        return {"label": self.label, "speed": self.speed, "hw_class": os.environ.get("ROLLART_HW_CLASS"),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    @handles(Sleep)
    async def sleep(self, msg: Sleep) -> None:
        await asyncio.sleep(msg.seconds)


class Bound(Plain):
    """A class with ``rollart_bind``: told its rank, name, class and devices once started and on every restart."""

    role = "generate"
    where: dict = {}

    def rollart_bind(self, info: dict) -> dict:
        self.where = dict(info)
        return self.where

    @handles(Info)
    def info(self, msg: Info) -> dict:
        return {**super().info(msg), **self.where}
