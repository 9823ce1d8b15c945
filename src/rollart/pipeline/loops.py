"""The training loops, one per mode (``PipelineConfig.mode``), each readable top to bottom.

``async`` and ``areal`` share one loop: rollout never stops, and every iteration runs the six steps of
α-bounded asynchronous training (RollArt §6.2, Fig. 9); they differ only in where the sample buffer checks
the bound (every turn, or at a trajectory's start). ``sync`` (Sync+) collects a batch, trains, then updates;
``oneoff`` collects batch k+1 with the previous weights while training on batch k.

In the asynchronous loop the train step (⑥) starts right after ① (it needs only the batch), and the
background push and pull of the newest version finish before ② (rollout keeps running meanwhile), so the
suspension covers only the swap; the *exposed* pull is the part of that wait that outlasts the train step beside
it (RollArt §6.3, Table 4). The push is the asynchronous weight update engine's: a version is published once the
trainer has snapshotted it, and the store fetches it while the next step trains.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from rollart.actors import ActorDeadError, RemoteError
from rollart.pipeline.run import Run, unless_failed
from rollart.pipeline.train_steps import TrainResult
from rollart.types import Trajectory

log = logging.getLogger("rollart.pipeline")


async def overlapped(run: Run) -> None:
    """async / areal: the six steps every iteration, overlapped with a rollout that never stops."""
    p, steps = run.parts, run.steps
    rollout = asyncio.create_task(p.scheduler.run(), name="rollout")
    training: InFlightStep | None = None
    try:
        while True:
            while not run.done(in_flight=training is not None):
                if training is not None:  # publish the version it produced (installed at ③ below)
                    await steps.trained(training.finish(run, rollout))
                    training = None
                t0 = time.perf_counter()
                batch = await unless_failed(p.buffer.get_batch(run.cfg.batch_size), rollout)        # ① get_batch
                extra = {"system/get_batch_wait_s": time.perf_counter() - t0,
                         "rollout/window_start": float(p.buffer.window_start())}
                # the next batch forms with the agent one version on: free the slots of what it cannot take
                await p.buffer.retire_before_next(p.buffer.version + 1)
                training = InFlightStep(asyncio.create_task(steps.train(batch)), extra)             # ⑥ train_step
                await swap_weights(run, rollout, training)                                          # ② ③ ④ ⑤
                await run.maybe_evaluate(rollout)
            if training is None:
                return
            by_target = run.evaluator.target_held()
            await steps.trained(training.finish(run, rollout))
            training = None
            await steps.trained(steps.update_now())
            if not by_target or await run.final_weights_hold():
                return
    finally:
        rollout.cancel()
        if training is not None and not training.task.done():
            training.task.cancel()
        await asyncio.gather(rollout, *([training.task] if training is not None else []), return_exceptions=True)


async def swap_weights(run: Run, rollout: asyncio.Task, training: InFlightStep) -> None:
    """② ③ ④ while the train step runs: the pull of the newest version is finished first (rollout goes on),
    then the suspension covers only the swap. A weight store that dies meanwhile takes this version with it
    (the next published one replaces it) once it is back."""
    p = run.parts
    try:
        await unless_failed(p.weights.prefetch(), rollout)
        training.pulled_at = time.perf_counter()
        await p.actors.proxy.suspend()                                                          # ② suspend
        try:
            training.extra.update(await p.weights.update_workers())                             # ③ update
            await p.buffer.set_version(p.weights.version)  # the agent LLM's version gates the buffer's window
        finally:
            await p.actors.proxy.resume()  # ④ resume; ⑤ each engine recomputes the KV of its requests in flight
    except (ActorDeadError, RemoteError) as e:
        if p.recovery.is_store_loss(e):
            await p.recovery.store_back(e)
        elif not await _trainer_lost(run, training):
            raise
        else:
            log.warning("the trainer died under the background push of weight version %d: that version is dropped "
                        "(the run replays from its newest checkpoint)", p.weights.version)
            p.weights.restart_pull(lost=True)


async def _trainer_lost(run: Run, training: InFlightStep) -> bool:
    """Whether the trainer died under the version's background push: the train step beside it then fails as well
    (its finish replays), so the push's failure is that loss, not one of its own."""
    await asyncio.wait([training.task])
    error = None if training.task.cancelled() else training.task.exception()
    return error is not None and run.parts.recovery.is_trainer_loss(error)


@dataclass
class InFlightStep:
    """A train step running beside the rollout (async loop), and what is known of it meanwhile."""
    task: asyncio.Task
    """Resolves to the step's TrainResult."""
    extra: dict
    """Metrics gathered while it ran: the get_batch wait, the weight sync of ②–④."""
    started: float = 0.0
    pulled_at: float = 0.0
    """When the background pull of the version before it finished (0: no pull happened)."""

    def __post_init__(self) -> None:
        self.started = time.perf_counter()

    async def finish(self, run: Run, rollout: asyncio.Task) -> None:
        """Account the step, counting as exposed only the part of the pull wait that outlasted the train step
        (rollout was never suspended for it, so only that part delays the run)."""
        result: TrainResult = await unless_failed(self.task, rollout)
        if self.pulled_at and "system/weight_pull_accum_s" in self.extra:
            self.extra["system/weight_pull_exposed_s"] = max(0.0, self.pulled_at - max(self.started,
                                                                                         result.train_end))
        await run.steps.finish(result, self.extra, background_push=True)


async def sync(run: Run) -> None:
    """Sync+: collect a batch (trajectory-level envs and rewards), train, update; rollout waits (with
    ``release_kv_while_training`` the engines free their KV caches while the trainer steps: ``TrainSteps.train``)."""
    p, steps = run.parts, run.steps
    while not run.done():
        t0 = time.perf_counter()
        batch = flatten(await p.scheduler.collect_batch(run.cfg.batch_groups))
        await steps.trained(steps.train_and_finish(batch, {"system/rollout_s": time.perf_counter() - t0}))
        await steps.trained(steps.update_now())
        await run.maybe_evaluate()


async def oneoff(run: Run) -> None:
    """One-off: rollout of the next batch (previous weights) overlaps training on this one."""
    p, steps = run.parts, run.steps
    batch = flatten(await p.scheduler.collect_batch(run.cfg.batch_groups))
    while not run.done():
        training = asyncio.create_task(steps.train_and_finish(batch))
        collecting = asyncio.create_task(p.scheduler.collect_batch(run.cfg.batch_groups))
        try:
            await steps.trained(training)
        except BaseException:
            collecting.cancel()
            raise
        t0 = time.perf_counter()
        batch = flatten(await collecting)
        steps.logger.log({"system/get_batch_wait_s": time.perf_counter() - t0}, run.state.step)
        await steps.trained(steps.update_now())
        await run.maybe_evaluate()


LOOPS = {"async": overlapped, "areal": overlapped, "sync": sync, "oneoff": oneoff}


def flatten(groups: list[list[Trajectory]]) -> list[Trajectory]:
    return [t for g in groups for t in g]
