"""A shared training deployment on emulated GPUs (``simulate_hardware``, ``rollart.emulation``): an operation holds
the deployment for as long as the emulated GPUs would take, so the emulated device is exclusive — two jobs' train
steps on one deployment wait for each other, as they would on one GPU pool.

    service.register_job("lake", trainer_cfg, emulated=EmulatedJob(cfg.trainer_speed(), switch_s=0.4))

The Router runs each operation on the real workers, then (still holding the deployment) waits what the real work
lacked of the emulated time: a ``TrainStep`` lasts its batch's ``TrainerSpeedConfig.step_seconds``, a ``Load`` of the
job's state (the costly half of a context switch, PlexRL §6.2) ``switch_s``; other operations last their real time.
A train step's answer carries the emulation metrics (``system/train_emulated_s`` and ``_real_s``, ``_outran``), which
tell the job's run that its step was emulated where the device is (it waits nothing more itself).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from rollart.emulation import TrainerSpeedConfig, train_delay
from rollart.messages import TrainStep
from rollart.multiplex.messages import Load


@dataclass(frozen=True)
class EmulatedJob:
    speed: TrainerSpeedConfig
    """The job's train step on the emulated GPUs (already multiplied by its time scale)."""
    switch_s: float = 0.0
    """Seconds (scaled) loading the job's state onto the emulated GPUs lasts."""

    def __post_init__(self) -> None:
        if self.switch_s < 0:
            raise ValueError(f"switch_s={self.switch_s} must be >= 0")

    async def hold(self, request: Any, answer: Any, real_s: float) -> Any:
        """``answer`` once the emulated time of ``request`` (which took ``real_s`` real seconds) has passed."""
        if isinstance(request, TrainStep):
            delay, metrics = train_delay(self.speed, sum(len(t.token_ids) for t in request.trajectories), real_s)
            await asyncio.sleep(delay)
            return {**answer, **metrics}
        if isinstance(request, Load):
            await asyncio.sleep(max(0.0, self.switch_s - real_s))
        return answer
