"""``Supervisor``: what happens when an actor incarnation dies — its pending calls fail, its process or
task is killed, and it is restarted per its ``RestartPolicy`` or marked dead (``on_dead`` callbacks run).

Deaths are reported here by whoever notices them: the process watcher and the in-process server
(``incarnations``), the heartbeat monitor (``liveness``) and the handshake (a failed start).
Everything runs on the coordinator's event loop.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from rollart.actors.calls import PendingCalls
from rollart.actors.errors import ActorDeadError
from rollart.actors.record import LIVE_STATES, ActorRecord, settle
from rollart.actors.table import ActorTable

log = logging.getLogger("rollart.actors")


class Supervisor:
    def __init__(self, table: ActorTable, calls: PendingCalls,
                 relaunch: Callable[[ActorRecord], Awaitable[None]],
                 on_actor_dead: Callable[[str, str], Any] | None = None):
        """``relaunch(rec)`` starts a new incarnation of ``rec`` (raising if it fails to start);
        ``on_actor_dead(name, reason)`` runs for every actor that dies for good."""
        self._table = table
        self._calls = calls
        self._relaunch = relaunch
        self._on_actor_dead = on_actor_dead

    def declare_dead(self, rec: ActorRecord, reason: str, identity: bytes) -> None:
        """The incarnation ``identity`` is gone: fail its calls, kill it, restart or mark dead."""
        if rec.identity != identity or rec.state not in LIVE_STATES:
            return  # an older incarnation, or already handled / being stopped
        self._table.unbind(identity)
        exc = ActorDeadError(rec.name, reason)
        self._calls.fail_all(rec, exc)
        if rec.proc is not None and rec.proc.returncode is None:
            rec.proc.kill()
        if rec.task is not None and not rec.task.done():
            rec.task.cancel()
        loop = asyncio.get_running_loop()
        can_restart = (rec.started_once and not self._table.closing and rec.mode != "remote"
                       and rec.restarts < rec.restart.max_restarts)
        if can_restart:
            log.warning("actor %s died (%s); restart %d/%d", rec.name, reason, rec.restarts + 1,
                        rec.restart.max_restarts)
            rec.state = "restarting"
            rec.restarts += 1
            if rec.ready.done():
                rec.ready = loop.create_future()
            loop.create_task(self._restart(rec))
            self._tell(rec, rec.restart_callbacks, reason)
            return
        log.error("actor %s is dead: %s", rec.name, reason)
        rec.state = "dead"
        rec.dead_reason = reason
        settle(rec.ready, exc)
        self._tell(rec, [*rec.dead_callbacks, self._on_actor_dead], reason)

    @staticmethod
    def _tell(rec: ActorRecord, callbacks: list, reason: str) -> None:
        for cb in callbacks:
            if cb is None:
                continue
            try:
                res = cb(rec.name, reason)
                if asyncio.iscoroutine(res):
                    asyncio.get_running_loop().create_task(res)
            except Exception:
                log.exception("callback for %s (%s) raised", rec.name, reason)

    async def _restart(self, rec: ActorRecord) -> None:
        await asyncio.sleep(rec.restart.delay(rec.restarts))
        if self._table.closing or rec.state != "restarting":
            return
        try:
            await self._relaunch(rec)
        except Exception as e:  # the failed incarnation was already declared dead (maybe restarting again)
            log.warning("restart of actor %s failed: %s", rec.name, e)
