"""``LivenessMonitor``: the coordinator's judge of heartbeats. A ready actor silent for longer than
``heartbeat_timeout`` is reported dead to the ``Supervisor`` — unless it is a local process that is
visibly busy (see ``busy_not_hung``). In-process actors share the coordinator's loop and are not judged.
"""
from __future__ import annotations

import asyncio
import logging
import time

from rollart.actors.record import ActorRecord
from rollart.actors.router import Router
from rollart.actors.supervision import Supervisor
from rollart.actors.table import ActorTable

log = logging.getLogger("rollart.actors")

BUSY_GRACE = 5
"""A silent local actor process that keeps using CPU gets up to this many heartbeat timeouts."""


class LivenessMonitor:
    def __init__(self, table: ActorTable, router: Router, supervisor: Supervisor,
                 heartbeat_interval: float, heartbeat_timeout: float):
        self._table = table
        self._router = router
        self._supervisor = supervisor
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval / 2)
            self._router.drain()  # judge on everything that arrived, even if the loop was busy
            now = time.monotonic()
            for rec in self._table:
                # only ready actors: a starting one is bounded by spawn_timeout and its process watcher
                if rec.mode == "inprocess" or rec.state != "ready":
                    continue
                silent = now - rec.last_seen
                if silent <= self.heartbeat_timeout:
                    rec.cpu_sample = None
                elif not busy_not_hung(rec, silent, self.heartbeat_timeout):
                    self._supervisor.declare_dead(rec, f"no heartbeat for {silent:.1f} s "
                                                       f"(heartbeat_timeout_s={self.heartbeat_timeout:g})",
                                                  rec.identity)


def busy_not_hung(rec: ActorRecord, silent: float, heartbeat_timeout: float) -> bool:
    """A local child that keeps using CPU while silent is starving its heartbeat thread of the GIL
    (a first ``import torch`` can hold it for seconds on a loaded machine), not hung: it gets up to
    BUSY_GRACE x heartbeat_timeout. A stopped process dies at once; one that uses no CPU for a whole
    heartbeat_timeout (deadlocked, blocked) dies then. Updates ``rec.cpu_sample``."""
    if rec.proc is None or rec.pid is None or silent > BUSY_GRACE * heartbeat_timeout:
        return False
    if not getattr(rec.proc, "on_this_host", True):  # a process on another host (Ray): its /proc is not ours
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
    return now - rec.cpu_sample[1] < heartbeat_timeout
