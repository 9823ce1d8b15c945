"""The batched-interaction baseline (RollArt §3 Fig. 5b; the "Sync" baseline of §7.2), never rollart's own way
of running a trajectory: every trajectory in flight starts each turn's generation together with the others,
and no env steps before every generation of that turn returned. rollart runs each trajectory at its own pace
(trajectory-level interaction); benchmarks wrap a run's env manager in this to measure what that is worth.

    Coordinator(cfg, tasks, interaction=BatchedInteraction)          # a run with batched interaction
    scheduler = RolloutScheduler(tasks, BatchedInteraction(manager))  # or one scheduler's rollout

A trajectory joins the barrier when its manager starts it and leaves when it ends (done, failed, aborted or
cancelled); the barrier waits for the members in flight at each point, so a finished trajectory never holds
the others back.
"""
from __future__ import annotations

import asyncio

from rollart.rollout.env_manager import EnvManager, Policy, TaskSpec
from rollart.types import GenerationResult, SamplingParams, Trajectory


class TurnBarrier:
    """A barrier whose membership changes: finished trajectories leave, the rest wait for each other."""

    def __init__(self) -> None:
        self.members = 0
        self.arrived = 0
        self._released: asyncio.Future | None = None

    def join(self) -> None:
        self.members += 1

    def leave(self) -> None:
        self.members -= 1
        self._maybe_release()

    async def wait(self) -> None:
        if self._released is None:
            self._released = asyncio.get_running_loop().create_future()
        released = self._released
        self.arrived += 1
        self._maybe_release()
        await asyncio.shield(released)  # shield: a cancelled member must not cancel the others' wait

    def _maybe_release(self) -> None:
        if self._released is not None and self.arrived >= self.members:
            self._released.set_result(None)
            self._released, self.arrived = None, 0


class _TurnSynchronised:
    """A policy whose generations wait at the barrier before they start and after they return."""

    def __init__(self, policy: Policy, barrier: TurnBarrier) -> None:
        self.policy, self.barrier = policy, barrier

    async def generate(self, trajectory_id: str, prompt_token_ids: list[int], sampling: SamplingParams,
                       task: str) -> GenerationResult:
        await self.barrier.wait()  # every env of the batch starts the turn together
        out = await self.policy.generate(trajectory_id, prompt_token_ids, sampling, task)
        await self.barrier.wait()  # ... and all generations finish before any env steps
        return out

    def release(self, trajectory_id: str) -> None:
        self.policy.release(trajectory_id)


class BatchedInteraction:
    """An env manager (``run``, ``pool``) that plays ``manager``'s trajectories in lockstep."""

    def __init__(self, manager: EnvManager) -> None:
        self.barrier = TurnBarrier()
        self.manager = EnvManager(_TurnSynchronised(manager.policy, self.barrier), manager.tokenizer, manager.pool,
                                  gate=manager.gate, actions=manager.actions)
        self.pool = manager.pool

    async def run(self, task: TaskSpec, trajectory_id: str, group_id: str, seed: int | None) -> Trajectory:
        self.barrier.join()
        try:
            return await self.manager.run(task, trajectory_id, group_id, seed)
        finally:
            self.barrier.leave()

    def __repr__(self) -> str:
        return f"BatchedInteraction({self.barrier.members} in flight)"

