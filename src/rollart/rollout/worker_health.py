"""Worker deaths as the proxy sees them (RollArt §8): count them, wait for a restart, or remove.

A death (``ActorDeadError``) marks the worker unhealthy and counts one failure per crash, however many
requests it took down. The requests it was running all wait on one shared probe: it asks the worker
for its version until the actor runtime has restarted it in place (then, if it missed the latest weights,
tells it the version and the weight store's address: it pulls the weights itself), and removes the worker once it is gone for good, did not come back within
``restart_timeout_s``, or has failed ``max_worker_failures`` times.
"""
from __future__ import annotations

import asyncio
import logging

from rollart.rollout.proxy_config import ProxyConfig
from rollart.rollout.worker_slot import WorkerSlot
from rollart.messages import GetVersion, UpdateWeights

log = logging.getLogger("rollart.rollout.proxy")


class WorkerHealth:
    """Failure accounting and in-place-restart recovery for the proxy's workers."""

    def __init__(self, cfg: ProxyConfig, counters: dict, dead_errors: tuple[type[BaseException], ...]) -> None:
        self.cfg = cfg
        self.counters = counters
        self.dead_errors = dead_errors
        self.version = 0
        """The weights version every live worker should hold (the proxy's ``version``)."""
        self.source = ""
        """With ``resync_weights``: the weight store's address, where a worker restarted without ``version``
        pulls it (no copy of the weights is kept here)."""

    def updated(self, update: UpdateWeights) -> None:
        """Every live worker is being told to install ``update.version``: the version to hold from now on."""
        self.version = update.version
        self.source = update.source if self.cfg.resync_weights else ""

    def record_death(self, slot: WorkerSlot, error: BaseException) -> None:
        if slot.healthy:  # one crash fails every request it was running: count it once
            slot.failures += 1
            slot.healthy = False
        gone = not slot.handle.alive  # the actor runtime gave up restarting it
        if (gone or slot.failures >= self.cfg.max_worker_failures) and not slot.dead:
            slot.dead = True
            log.error("inference worker %s removed after %d failures (last: %s)", slot.name, slot.failures, error)

    def restarting(self, slot: WorkerSlot) -> None:
        """``slot``'s actor is restarting: unhealthy (one failure for this crash) until a probe in the background
        sees it back and resyncs its weights, or removes it after ``restart_timeout_s``."""
        from rollart.actors import ActorDeadError
        self.record_death(slot, ActorDeadError(slot.name, "restarting"))
        if not slot.dead and (slot.recovering is None or slot.recovering.done()):
            slot.recovering = asyncio.ensure_future(self._probe(slot))

    def record_alive(self, slot: WorkerSlot) -> None:
        slot.healthy = True

    async def recover(self, slot: WorkerSlot) -> None:
        """Wait (once per crash, shared by its requests) for a dead worker to come back, or remove it."""
        if slot.dead:
            self.counters["rerouted"] += 1
            return
        if slot.recovering is None or slot.recovering.done():
            slot.recovering = asyncio.ensure_future(self._probe(slot))
        await asyncio.shield(slot.recovering)
        if slot.dead:
            self.counters["rerouted"] += 1

    async def _probe(self, slot: WorkerSlot) -> None:
        deadline = asyncio.get_running_loop().time() + self.cfg.restart_timeout_s
        delay = 0.05
        while True:
            try:
                async with asyncio.timeout(max(0.1, deadline - asyncio.get_running_loop().time())):
                    version = await slot.handle.send(GetVersion())
                    if version < self.version:
                        if self.source:  # it pulls the version itself, from the store
                            await slot.handle.send(UpdateWeights(self.version, source=self.source))
                        else:
                            log.warning("inference worker %s came back at version %d (not %d) and no weight "
                                        "store address is known to pull from", slot.name, version, self.version)
                slot.version = self.version
                slot.healthy = True
                log.warning("inference worker %s is back (restarted in place)", slot.name)
                return
            except (TimeoutError, *self.dead_errors):
                if not slot.handle.alive:
                    slot.dead = True
                    log.error("inference worker %s is dead for good: removed", slot.name)
                    return
                if asyncio.get_running_loop().time() >= deadline:
                    slot.dead = True
                    log.error("inference worker %s did not come back in %.0f s: removed",
                              slot.name, self.cfg.restart_timeout_s)
                    return
            await asyncio.sleep(delay)  # exponential backoff between restart probes, not a work poll
            delay = min(delay * 2, 1.0)
