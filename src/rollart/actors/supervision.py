"""Supervision from the coordinator's side: process exits, heartbeats, death, restarts.

Mixed into ``ActorSystem``; everything here runs on the coordinator's event loop. A dead incarnation
fails its pending calls, is killed, and is restarted per its ``RestartPolicy`` or marked dead (the
``on_dead`` callbacks run).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from rollart.actors.errors import ActorDeadError
from rollart.actors.record import _ActorRecord, _settle

log = logging.getLogger("rollart.actors")

BUSY_GRACE = 5
"""A silent local actor process that keeps using CPU gets up to this many heartbeat timeouts."""


class Supervision:
    _actors: dict
    _by_identity: dict
    _calls: dict
    _loop: Any
    _asock: Any
    _closing: bool
    heartbeat_interval: float
    heartbeat_timeout: float
    on_actor_dead: Any

    async def _watch_process(self, rec: _ActorRecord, proc: Any, identity: bytes) -> None:
        rc = await proc.wait()
        if rec.identity == identity and not self._closing:
            await asyncio.sleep(0.05)  # let its last messages (e.g. a failed READY) arrive first
            self._asock.drain()
        self._declare_dead(rec, f"process {proc.pid} exited with code {rc}", identity)

    async def _watch_heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval / 2)
            self._asock.drain()  # judge on everything that arrived, even if the loop was busy
            now = time.monotonic()
            for rec in list(self._actors.values()):
                # only ready actors: a starting one is bounded by spawn_timeout and its process watcher
                if rec.mode == "inprocess" or rec.state != "ready":
                    continue
                silent = now - rec.last_seen
                if silent <= self.heartbeat_timeout:
                    rec.cpu_sample = None
                elif not self._busy_not_hung(rec, silent):
                    self._declare_dead(rec, f"no heartbeat for {silent:.1f} s "
                                            f"(heartbeat_timeout={self.heartbeat_timeout} s)", rec.identity)

    def _busy_not_hung(self, rec: _ActorRecord, silent: float) -> bool:
        """A local child that keeps using CPU while silent is starving its heartbeat thread of the GIL
        (a first ``import torch`` can hold it for seconds on a loaded machine), not hung: it gets up to
        BUSY_GRACE x heartbeat_timeout. A stopped process dies at once; one that uses no CPU for a whole
        heartbeat_timeout (deadlocked, blocked) dies then."""
        if rec.proc is None or rec.pid is None or silent > BUSY_GRACE * self.heartbeat_timeout:
            return False
        try:
            with open(f"/proc/{rec.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return False
        if fields[0] in ("T", "t", "Z", "X"):  # stopped, traced, zombie, dead
            return False
        cpu, now = int(fields[11]) + int(fields[12]), time.monotonic()
        if rec.cpu_sample is None or cpu > rec.cpu_sample[0]:
            rec.cpu_sample = (cpu, now)  # progress (or first look): keep waiting
            log.debug("actor %s silent for %.1f s but using CPU; waiting", rec.name, silent)
            return True
        return now - rec.cpu_sample[1] < self.heartbeat_timeout

    def _declare_dead(self, rec: _ActorRecord, reason: str, identity: bytes) -> None:
        """The incarnation ``identity`` is gone: fail its calls, kill it, restart or mark dead."""
        if rec.identity != identity or rec.state not in ("starting", "setup", "ready"):
            return  # an older incarnation, or already handled / being stopped
        self._by_identity.pop(identity, None)
        exc = ActorDeadError(rec.name, reason)
        for cid, p in list(self._calls.items()):
            if p.rec is rec:
                del self._calls[cid]
                p.fail(exc)
        if rec.proc is not None and rec.proc.returncode is None:
            rec.proc.kill()
        if rec.task is not None and not rec.task.done():
            rec.task.cancel()
        can_restart = (rec.started_once and not self._closing and rec.mode != "remote"
                       and rec.restarts < rec.restart.max_restarts)
        if can_restart:
            log.warning("actor %s died (%s); restart %d/%d", rec.name, reason, rec.restarts + 1,
                        rec.restart.max_restarts)
            rec.state = "restarting"
            rec.restarts += 1
            if rec.ready.done():
                rec.ready = self._loop.create_future()
            self._loop.create_task(self._restart(rec))
            return
        log.error("actor %s is dead: %s", rec.name, reason)
        rec.state = "dead"
        rec.dead_reason = reason
        _settle(rec.ready, exc)
        for cb in [*rec.dead_callbacks, self.on_actor_dead]:
            if cb is None:
                continue
            try:
                res = cb(rec.name, reason)
                if asyncio.iscoroutine(res):
                    self._loop.create_task(res)
            except Exception:
                log.exception("on_dead callback for %s raised", rec.name)

    async def _restart(self, rec: _ActorRecord) -> None:
        await asyncio.sleep(rec.restart.delay(rec.restarts))
        if self._closing or rec.state != "restarting":
            return
        try:
            await self._launch(rec)
        except Exception as e:  # _launch already declared this incarnation dead (maybe restarting again)
            log.warning("restart of actor %s failed: %s", rec.name, e)
