"""Plain actor classes used by the actor-runtime tests (importable by actor processes)."""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import numpy as np

from rollart.actors import blocking, handles, wire_dataclass


@wire_dataclass
@dataclass
class Point:
    x: int
    y: float = 0.0


@dataclass
class Unregistered:
    x: int = 0


@wire_dataclass
@dataclass
class Scale:
    """A request message: ``Typed`` multiplies ``value`` by its factor."""
    value: int


@wire_dataclass
@dataclass
class Nap:
    """A request message: ``Typed`` sleeps, then answers with ``label``."""
    seconds: float
    label: str = ""


@wire_dataclass
@dataclass
class Explode:
    reason: str


class Typed:
    """An actor answering typed request messages; it handles no ``Point``."""

    def __init__(self, factor: int = 2):
        self.factor = factor
        self.cancelled: list[str] = []

    @handles(Scale)
    def scale(self, msg: Scale) -> int:
        return msg.value * self.factor

    @handles(Nap)
    async def nap(self, msg: Nap) -> str:
        try:
            await asyncio.sleep(msg.seconds)
        except asyncio.CancelledError:
            self.cancelled.append(msg.label)
            raise
        return msg.label

    @handles(Explode)
    async def explode(self, msg: Explode) -> None:
        raise ValueError(f"boom: {msg.reason}")

    def get_cancelled(self) -> list:
        return list(self.cancelled)


class Echo:
    """Echo plus a few behaviours the tests poke at."""

    def __init__(self, tag: str = "", *, scale: int = 1):
        self.tag = tag
        self.scale = scale
        self.cancelled: list[str] = []
        self.started = False
        self.bg_runs = 0
        self.busy_runs = 0

    async def on_start(self) -> None:
        self.started = True

    def echo(self, x):
        return x

    def info(self) -> dict:
        return {"tag": self.tag, "scale": self.scale, "pid": os.getpid(), "started": self.started}

    def add(self, a: int, b: int) -> int:
        return (a + b) * self.scale

    def fail(self, msg: str):
        raise ValueError(f"boom: {msg}")

    async def sleep(self, seconds: float, label: str = "") -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled.append(label)
            raise
        return label

    def get_cancelled(self) -> list:
        return list(self.cancelled)

    async def count(self, n: int, delay: float = 0.0):
        for i in range(n):
            if delay:
                await asyncio.sleep(delay)
            yield i

    async def count_then_fail(self, n: int):
        for i in range(n):
            yield i
        raise RuntimeError("stream broke")

    def squares(self, n: int):
        for i in range(n):
            yield i * i

    def tensor_stats(self, t) -> dict:
        return {"dtype": str(t.dtype), "shape": list(t.shape), "nbytes": t.numel() * t.element_size()}

    def nbytes(self, arr) -> int:
        return int(arr.nbytes) if hasattr(arr, "nbytes") else int(arr.numel() * arr.element_size())

    def make_array(self, n: int):
        return np.arange(n, dtype=np.float32)

    def bad_return(self):
        return object()

    def unregistered(self):
        return Unregistered(3)

    @blocking
    def busy(self, seconds: float) -> float:
        self.busy_runs += 1
        time.sleep(seconds)
        return seconds

    def get_busy_runs(self) -> int:
        return self.busy_runs

    def torch_threads(self) -> int:
        import torch

        return torch.get_num_threads()

    def getpid(self) -> int:
        return os.getpid()


class Broken:
    def __init__(self, reason: str):
        raise RuntimeError(f"cannot start: {reason}")


STOP_LOG: list[str] = []  # in-process actors append here in on_stop (same module object)


class Engine:
    """Mimics an inference worker: generate() awaits a future that a background loop resolves."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue | None = None
        self.loop_task: asyncio.Task | None = None
        self.steps = 0

    async def on_start(self) -> None:
        self.queue = asyncio.Queue()
        self.loop_task = asyncio.get_running_loop().create_task(self._engine_loop())

    async def on_stop(self) -> None:
        STOP_LOG.append(f"engine stopped after {self.steps} steps")
        if self.loop_task:
            self.loop_task.cancel()

    async def _engine_loop(self) -> None:
        while True:
            prompt, fut = await self.queue.get()
            await asyncio.sleep(0.01)  # one "engine step"
            self.steps += 1
            if not fut.done():
                fut.set_result(prompt[::-1])

    async def generate(self, prompt: str) -> str:
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((prompt, fut))
        return await fut

    def num_steps(self) -> int:
        return self.steps
