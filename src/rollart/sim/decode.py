"""SIMULATED: an LLM stand-in with a fixed generation capacity, for rollout benchmarks.

A scripted policy that merely sleeps makes every extra env free: a thousand concurrent trajectories
generate as fast as one. A real engine decodes its running sequences together, one token each per step,
and a step costs about the same until the batch saturates the accelerator, then grows with the batch
(memory-bound below ``saturation`` sequences, compute-bound above). :class:`DecodeCapacity` is that
step-time model; :class:`CapacityLimitedLLM` runs it as a shared decode loop in front of a
:class:`rollart.rollout.scripted.ScriptedPolicy`, so each turn's latency grows with the number of
sequences decoding at the same time and extra envs cost generation capacity.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from rollart.config import ConfigError
from rollart.types import GenerationResult, SamplingParams


@dataclass
class DecodeCapacity:
    """Step-time model of batched decode."""

    min_step_s: float = 0.005
    """Seconds per decode step (one token for every running sequence) while the batch is unsaturated."""
    saturation: int = 48
    """Concurrent sequences at which a step becomes throughput-bound; above it a step takes
    ``min_step_s * n / saturation``, i.e. the engine emits at most ``saturation / min_step_s`` tokens/s."""
    tokens_per_turn: int = 8
    """Decode steps each generate call waits for (the action's length as the engine would decode it)."""

    def __post_init__(self) -> None:
        if self.min_step_s <= 0 or self.saturation < 1 or self.tokens_per_turn < 1:
            raise ConfigError("DecodeCapacity needs min_step_s > 0, saturation >= 1 and tokens_per_turn >= 1")

    def step_s(self, running: int) -> float:
        """Wall time of one decode step with ``running`` sequences in the batch."""
        return self.min_step_s * max(1.0, running / self.saturation)

    @property
    def max_tokens_per_s(self) -> float:
        return self.saturation / self.min_step_s

    def turn_s(self, running: int) -> float:
        """A turn's latency when ``running`` sequences decode together for the whole turn."""
        return self.tokens_per_turn * self.step_s(running)


@dataclass
class _Request:
    left: int
    done: asyncio.Future = field(repr=False)


class CapacityLimitedLLM:
    """``generate`` as the wrapped policy's, after waiting for ``tokens_per_turn`` shared decode steps.

    Requests join the batch at the next step boundary; a cancelled request (an aborted trajectory)
    leaves the batch at once. ``steps`` and ``batch_sizes`` record what the loop did."""

    def __init__(self, policy, capacity: DecodeCapacity | None = None):
        self.policy = policy
        self.capacity = capacity or DecodeCapacity()
        self.running: list[_Request] = []
        self.joining: list[_Request] = []
        self.batch_sizes: list[int] = []
        self.loop_task: asyncio.Task | None = None

    @property
    def steps(self) -> int:
        return len(self.batch_sizes)

    async def decode(self, tokens: int) -> None:
        req = _Request(tokens, asyncio.get_running_loop().create_future())
        self.joining.append(req)
        if self.loop_task is None or self.loop_task.done():
            self.loop_task = asyncio.create_task(self._run())
        try:
            await req.done
        finally:  # cancelled: out of the batch before the next step
            for queue in (self.joining, self.running):
                if req in queue:
                    queue.remove(req)

    async def _run(self) -> None:
        while self.running or self.joining:
            # 1) admit the requests that arrived during the last step
            self.running += self.joining
            self.joining = []
            # 2) one decode step for the whole batch
            self.batch_sizes.append(len(self.running))
            await asyncio.sleep(self.capacity.step_s(len(self.running)))
            # 3) one token each; finished requests leave
            still = []
            for req in self.running:
                req.left -= 1
                if req.left > 0:
                    still.append(req)
                elif not req.done.done():
                    req.done.set_result(None)
            self.running = still

    def release(self, trajectory_id: str) -> None:
        self.policy.release(trajectory_id)

    async def generate(self, trajectory_id: str, prompt_token_ids: list[int],
                       sampling: SamplingParams | None = None, task: str = "default") -> GenerationResult:
        await self.decode(self.capacity.tokens_per_turn)
        return await self.policy.generate(trajectory_id, prompt_token_ids, sampling, task)
