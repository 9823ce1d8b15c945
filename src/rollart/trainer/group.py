"""TrainerGroup: ``trainer.world_size`` data-parallel trainer ranks that the run talks to as one trainer.

The ranks are one Cluster of TrainerActors (placed like any other actor: local processes or Ray nodes). Rank 0
opens a rendezvous port, every rank joins torch.distributed there (gloo on the CPU, nccl on CUDA), and rank 0's
initial weights are broadcast. The group is a trainer handle (``send``, ``name``, ``restarts``, ``alive``, ``pid``):

- requests that change or save the training state (``TrainStep``, ``SaveCheckpoint``, ``LoadCheckpoint``) go
  to every rank; a batch is split: each rank is sent only its rows' trajectories (and the whole batch's row
  count, rewards and groups, so advantages and loss normalisation are the unsharded batch's), gradients are
  all-reduced; the answer is rank 0's;
- the rest (versions, the weight plane's ``PublishWeights`` / ``WeightAddress``, diagnostics) go to rank 0
  only: one rank publishes weights.

A rank that dies, or fails a call every rank runs, breaks the collective the others are in, so the group does not restart ranks one by one: the
first death stops every rank (none is left hanging in a collective) and, while ``max_restarts`` allows, starts
the whole group afresh (``restarts`` counts these, so rollart.pipeline.recovery reloads the newest checkpoint
into all ranks as for one trainer process); past that the group is dead and the run ends in one line.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Callable

from rollart.actors import ActorDeadError
from rollart.distributed import Cluster
from rollart.messages import JoinGroup, LoadCheckpoint, Rendezvous, SaveCheckpoint, TrainStep
from rollart.trainer.batching import shard_of

log = logging.getLogger("rollart.trainer")

EVERY_RANK = (TrainStep, SaveCheckpoint, LoadCheckpoint)
"""Trainer requests every rank answers (collectives inside); any other goes to rank 0."""


NOTICE_S = 2.0
"""How long a failed call of every rank waits for the other ranks' answers before the group restarts."""


class TrainerGroup:
    def __init__(self, make_cluster: Callable[[], Cluster], world_size: int, max_restarts: int,
                 toward: str = "127.0.0.1", name: str = "trainer-group"):
        """``make_cluster()``: a fresh, unstarted Cluster of ``world_size`` TrainerActors (ranks restart only
        as a group, so its restart policy should allow none); ``toward``: the coordinator's host, from which
        rank 0 picks the address the other ranks reach it at."""
        self.make_cluster = make_cluster
        self.world_size = world_size
        self.max_restarts = max_restarts
        self.toward = toward
        self.name = name
        self.cluster: Cluster | None = None
        self.restarts = 0
        """Times the whole group was started afresh after a rank died."""
        self.dead_reason = ""
        self.alive = True
        self._ready: asyncio.Future | None = None  # set while the group is (re)starting
        self._regroup: asyncio.Task | None = None
        self._death_seen = False  # dead_reason names a rank that died (not one that failed because of it)
        self._restart_callbacks: list[Callable[[str, str], Any]] = []

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> "TrainerGroup":
        self._ready = asyncio.get_running_loop().create_future()
        try:
            await self._start_ranks()
        finally:
            ready, self._ready = self._ready, None
            ready.set_result(None)
        return self

    async def _start_ranks(self) -> None:
        cluster = self.make_cluster()
        if cluster.restart.max_restarts:
            raise ValueError("a TrainerGroup restarts its ranks together: give their Cluster max_restarts=0")
        self.cluster = cluster
        await cluster.start()
        try:
            host, port = await cluster.handle(0).send(Rendezvous(self.toward))
            await asyncio.gather(*(cluster.handle(r).send(JoinGroup(r, host, port)) for r in range(self.world_size)))
        except BaseException:
            await self._stop_ranks(timeout=1.0)  # ranks may wait in the rendezvous for one that failed
            raise
        for m in cluster.members:  # a death while idle is noticed too, not only by the next call
            m.handle.on_dead(lambda name, reason: self._rank_died(name, reason, death=True))
        log.info("trainer group: %d ranks joined at %s:%d", self.world_size, host, port)

    async def shutdown(self) -> None:
        if self._regroup is not None:
            self._regroup.cancel()
        self.alive = False
        if self.cluster is not None:
            await self._stop_ranks(timeout=10.0)

    async def _stop_ranks(self, timeout: float) -> None:
        """Stop every rank at once: a rank's on_stop waits in a barrier for the others to stop too."""
        await asyncio.gather(*(m.handle.stop(timeout=timeout) for m in self.cluster.members if m.handle is not None))
        await self.cluster.shutdown()

    # ------------------------------------------------------------------ a trainer handle (ActorRef)
    supervised = True
    """A dead rank restarts the whole group (``restarts`` counts it): recovery applies as for one trainer."""

    def on_restart(self, callback: Callable[[str, str], Any]) -> None:
        """``callback(name, reason)`` each time a rank's loss makes the group start afresh."""
        self._restart_callbacks.append(callback)

    @property
    def state(self) -> str:
        if not self.alive:
            return "dead"
        return "restarting" if self._ready is not None else "ready"

    @property
    def pid(self) -> int | None:
        """Rank 0's process id."""
        return self.cluster.handle(0).pid if self.cluster is not None else None

    @property
    def pids(self) -> list[int | None]:
        return [m.handle.pid for m in self.cluster.members] if self.cluster is not None else []

    async def send(self, message: Any, timeout: float | None = None) -> Any:
        """Rank 0's answer to ``message``, after every rank answered it when it is one of EVERY_RANK
        (``timeout``: per rank, as for one actor)."""
        while self._ready is not None:  # (re)starting: the request goes to the new ranks
            await asyncio.shield(self._ready)
        if not self.alive:
            raise ActorDeadError(self.name, self.dead_reason)
        ranks = self.cluster.members if isinstance(message, EVERY_RANK) else self.cluster.members[:1]
        calls = [asyncio.ensure_future(m.handle.send(self.rank_message(r, message), timeout))
                 for r, m in enumerate(ranks)]
        try:
            done, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_EXCEPTION)
            if pending and any(c.exception() is not None for c in done):
                # a rank that lost its peer often answers before the runtime has noticed that peer's exit: give
                # the others a moment, so the cause named is the rank that died
                done |= (await asyncio.wait(pending, timeout=NOTICE_S))[0]
            failed = [(m, c.exception()) for m, c in zip(ranks, calls) if c in done and c.exception() is not None]
            if failed and (len(ranks) > 1 or isinstance(failed[0][1], ActorDeadError)):
                # a rank died, or failed mid-collective (the others may wait on it forever): start afresh
                m, e = next(((m, e) for m, e in failed if isinstance(e, ActorDeadError)), failed[0])
                dead = isinstance(e, ActorDeadError)
                why = ((e.reason if dead else "") or str(e) or type(e).__name__).strip().splitlines()[0]
                silent = [r.name for r, c in zip(ranks, calls) if not c.done()]
                if silent and not dead:  # a rank that timed out waiting on the others: name who kept it waiting
                    why += f" (no answer from {', '.join(silent)})"
                self._rank_died(m.name, why, death=dead)
                raise ActorDeadError(self.name, self.dead_reason)
            return (await asyncio.gather(*calls))[0]
        finally:
            for c in calls:
                if not c.done():
                    c.cancel()

    def rank_message(self, rank: int, message: Any) -> Any:
        """What rank ``rank`` is sent: its shard of a TrainStep's batch, else the message itself (a batch with
        fewer rows than ranks goes whole to each; every rank then picks its rows itself)."""
        if not isinstance(message, TrainStep) or len(message.trajectories) < self.world_size:
            return message
        mine, info = shard_of(message.trajectories, rank, self.world_size)
        return dataclasses.replace(message, trajectories=mine, shard=info)

    # ------------------------------------------------------------------ a rank died
    def _rank_died(self, name: str, reason: str, death: bool) -> None:
        """Rank ``name`` died (``death``) or failed a call of every rank: stop the group and start it afresh."""
        reason = reason.strip().splitlines()[0] if reason.strip() else "no reason given"
        if self._regroup is not None and not self._regroup.done() or not self.alive:
            if death and not self._death_seen and self.alive:  # the rank whose loss made the others fail
                self.dead_reason, self._death_seen = f"rank {name} died: {reason}", True
                log.warning("trainer group: %s", self.dead_reason)
            return
        self._death_seen = death
        self.dead_reason = f"rank {name} {'died' if death else 'failed'}: {reason}"
        log.warning("trainer group: %s; stopping every rank", self.dead_reason)
        restart = self.restarts < self.max_restarts
        if restart:  # counted now, so a caller checking restarts (Recovery.check_trainer) sees it at once
            self.restarts += 1
            for callback in self._restart_callbacks:
                callback(self.name, self.dead_reason)
        self._ready = asyncio.get_running_loop().create_future()
        self._regroup = asyncio.get_running_loop().create_task(self._restart(restart))

    async def _restart(self, restart: bool) -> None:
        ready = self._ready
        try:
            # the survivors may wait on the lost rank inside a collective (on_stop too): no grace period
            await self._stop_ranks(timeout=1.0)
            if not restart:
                self.alive = False
                return
            await self._start_ranks()
        except Exception as e:  # noqa: BLE001 - a group that cannot start again is dead: the run ends
            log.error("trainer group: restart failed: %s", e)
            self.dead_reason = f"{self.dead_reason}; restart failed: {e}"
            self.alive = False
        finally:
            self._ready = None
            ready.set_result(None)

