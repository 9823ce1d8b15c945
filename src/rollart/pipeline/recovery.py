"""Recovery: the run goes on after its trainer or weight store dies, or it ends in one line.

The actor runtime restarts a dead trainer or weight store in place (``trainer_restarts``,
``weight_store_restarts``); a restarted actor is a fresh object. A fresh trainer holds the initial weights,
so it reloads the newest checkpoint and the run goes back to that checkpoint's step and version: the store
forgets newer versions, every inference worker gets the checkpoint's weights, and buffered samples newer than
it are kept or dropped by the alpha rule (``SampleBuffer.rewind``), with the counts logged. A fresh weight
store is empty: the trainer's weights are published to it again (when the trainer is busy, the version being
moved is dropped and the next one replaces it). A restart may land on another node (cluster.backend=ray lost the
node): the trainer and the store are then asked their weight-plane addresses again and restarted workers pull
from the store's new one; the trainer's checkpoints must be on a filesystem that node reads. Once an actor's
restarts are spent, ``ActorLostError`` ends the run; recipes print it as one line with the ``--resume`` command.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from rollart.actors import ActorDeadError, ActorRef, RemoteError
from rollart.messages import GetVersion, LoadCheckpoint, RewindVersions
from rollart.weightplane.sync import WeightSync
from rollart.rollout.buffer import SampleBuffer
from rollart.weightplane.store import WeightSyncStats

log = logging.getLogger("rollart.pipeline")


class ActorLostError(RuntimeError):
    """A trainer or weight store died and has no restart left: the run cannot go on."""

    def __init__(self, actor: str, cause: str, restarts: int):
        super().__init__(f"actor {actor} died: {cause} (after {restarts} restart{'s' * (restarts != 1)}; "
                         "none left)")
        self.actor = actor
        self.cause = cause


def lost(handle: ActorRef, error: BaseException) -> ActorLostError:
    reason = handle.dead_reason or (error.reason if isinstance(error, ActorDeadError) else "") or str(error)
    return ActorLostError(handle.name, reason, handle.restarts)


async def wait_back(handle: ActorRef, error: BaseException) -> None:
    """Wait until the restarted actor answers again; ActorLostError once it is dead for good."""
    delay = 0.05
    while True:
        if not handle.alive:
            raise lost(handle, error)
        try:
            await handle.send(GetVersion())  # waits for the new incarnation to be ready
            return
        except ActorDeadError as e:  # not restarted yet (a send to the dead process fails at once), or the
            error = e                # new incarnation died too: let the runtime notice and restart it
        await asyncio.sleep(delay)  # backoff between probes, so this loop never starves the event loop
        delay = min(delay * 2, 1.0)


class Recovery:
    """Notices trainer and weight-store restarts and brings the run back in step (see the module docstring)."""

    def __init__(self, trainer: ActorRef, store: ActorRef, weights: WeightSync, buffer: SampleBuffer, proxy: Any,
                 checkpoints: Path, alpha: int):
        self.trainer = trainer
        self.store = store
        self.weights = weights
        self.buffer = buffer
        self.proxy = proxy
        self.checkpoints = checkpoints
        self.alpha = alpha
        self.seen = {"trainer": trainer.restarts, "store": store.restarts}
        """Restarts of each actor the run has already recovered from."""
        self.counters = {"trainer_restarts": 0, "store_restarts": 0, "rewound_kept": 0, "rewound_dropped": 0,
                         "replayed_steps": 0}

    # ------------------------------------------------------------------ what died
    def is_trainer_loss(self, error: BaseException) -> bool:
        return self._is_loss(error, self.trainer, "trainer")

    def is_store_loss(self, error: BaseException) -> bool:
        return self._is_loss(error, self.store, "store")

    def _is_loss(self, error: BaseException, handle: ActorRef, role: str) -> bool:
        if not handle.supervised:  # not an actor this run restarts (a shared trainer service)
            return False
        if isinstance(error, ActorDeadError) and error.actor == handle.name:
            return True
        # a call that reached the new incarnation instead (e.g. the store no longer knows the version)
        return isinstance(error, (ActorDeadError, RemoteError)) and handle.restarts != self.seen[role]

    def check_trainer(self) -> None:
        """Raise ActorDeadError if the trainer was restarted since the run last recovered (it died while idle):
        a call now would reach a trainer holding the initial weights."""
        if self.trainer.restarts != self.seen["trainer"]:
            raise ActorDeadError(self.trainer.name, self.trainer.dead_reason or "restarted while idle")

    def as_lost(self, error: BaseException) -> BaseException:
        """The error to end the run with: ActorLostError for a trainer or store that is dead for good."""
        for handle in (self.trainer, self.store):
            if isinstance(error, ActorDeadError) and error.actor == handle.name:
                return lost(handle, error)
        return error

    # ------------------------------------------------------------------ the weight store
    async def store_back(self, error: BaseException) -> None:
        """Wait for the restarted store; the version it was handing out is lost (pull afresh)."""
        log.warning("weight store %s died (%s); waiting for its restart", self.store.name, _reason(error))
        await wait_back(self.store, error)
        self.seen["store"] = self.store.restarts
        await self.weights.store_restarted()  # on another node it serves on another address
        self.counters["store_restarts"] += 1
        self.weights.restart_pull(lost=True)

    async def publish(self, version: int, background: bool = False) -> WeightSyncStats:
        """``weights.publish(version, background)``, published again to a store that restarted meanwhile. Call it
        only while the trainer is idle (its weights are ``version``); with ``background`` it may train again once
        this returns (the store's fetch goes on: a failure of it surfaces where the pulls are awaited)."""
        retry = False
        while True:
            self.check_trainer()
            try:
                if retry:  # part of it may have reached the new store already
                    await self.store.send(RewindVersions(version))
                retry = True
                stats = await self.weights.publish(version, background)
            except (ActorDeadError, RemoteError) as e:
                if not self.is_store_loss(e):
                    raise
                await self.store_back(e)
                continue
            self.check_trainer()  # the buckets came from the trainer we recovered, not a fresh one
            if self.store.restarts == self.seen["store"]:
                return stats
            await self.store_back(ActorDeadError(self.store.name, self.store.dead_reason or "restarted"))

    async def update_now(self) -> dict:
        """Steps ②–④ while the trainer is idle: workers take the published version, which gates the buffer;
        a store lost meanwhile gets the trainer's weights again first."""
        while True:
            await self.proxy.suspend()
            try:
                sync = await self.weights.update_workers()
                await self.buffer.set_version(self.weights.version)
                return sync
            except (ActorDeadError, RemoteError) as e:
                if not self.is_store_loss(e):
                    raise
                failure = e
            finally:
                await self.proxy.resume()
            await self.store_back(failure)
            await self.publish(self.weights.version)

    # ------------------------------------------------------------------ the trainer
    async def trainer_back(self, error: BaseException) -> tuple[int, int]:
        """Wait for the restarted trainer, reload the newest checkpoint and take the run back to it; returns
        the (step, version) the run continues from."""
        from rollart.trainer.checkpoint import latest
        log.warning("trainer %s died (%s); waiting for its restart", self.trainer.name, _reason(error))
        while True:
            try:
                await wait_back(self.trainer, error)
                self.seen["trainer"] = self.trainer.restarts
                found = latest(self.checkpoints)
                extra = await self.trainer.send(LoadCheckpoint(str(found))) if found is not None else {}
                version = await self.trainer.send(GetVersion())
                self.check_trainer()
                break
            except ActorDeadError as e:
                if not self.is_trainer_loss(e):
                    raise
                error = e
        step = int(extra.get("step", version))
        self.counters["trainer_restarts"] += 1
        try:
            await self.store.send(RewindVersions(version))
        except (ActorDeadError, RemoteError) as e:
            if not self.is_store_loss(e):
                raise
            await self.store_back(e)  # a fresh store holds nothing to forget
        self.weights.restart_pull(lost=True)
        self.weights.trainer_restarted()
        await self.weights.rewind_workers(version)
        await self.publish(version)
        await self.proxy.suspend()
        try:
            await self.weights.update_workers()
            kept, dropped = await self.buffer.rewind(version)
        finally:
            await self.proxy.resume()
        self.counters["rewound_kept"] += kept
        self.counters["rewound_dropped"] += dropped
        where = found.name if found is not None else "the initial weights (no checkpoint yet)"
        log.warning("trainer %s is back from %s: step %d, version %d; buffered samples newer than it: %d kept, "
                    "%d dropped (alpha=%d)", self.trainer.name, where, step, version, kept, dropped, self.alpha)
        return step, version


def _reason(error: BaseException) -> str:
    return error.reason if isinstance(error, ActorDeadError) else str(error)
