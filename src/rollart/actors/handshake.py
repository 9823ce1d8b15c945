"""``Handshake``: brings an actor incarnation from ``starting`` to ``ready`` — HELLO from the actor,
INIT (constructor arguments) back, READY from the actor, then the actor's setup calls. An actor that
the coordinator did not spawn (``python -m rollart.actors.serve`` on another host) joins here too.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from rollart.actors import messages as m
from rollart.actors.calls import PendingCalls
from rollart.actors.errors import ActorDeadError, RemoteError
from rollart.actors.record import ActorRecord, settle
from rollart.actors.restart import RestartPolicy
from rollart.actors.router import Router
from rollart.actors.supervision import Supervisor
from rollart.actors.table import ActorTable

log = logging.getLogger("rollart.actors")


class Handshake:
    def __init__(self, table: ActorTable, router: Router, calls: PendingCalls, supervisor: Supervisor,
                 make_handle: Callable[[ActorRecord], Any], spawn_timeout: float):
        """``make_handle(rec)`` builds the handle callers get for a joining actor;
        ``spawn_timeout`` bounds each setup call."""
        self._table = table
        self._router = router
        self._calls = calls
        self._supervisor = supervisor
        self._make_handle = make_handle
        self._spawn_timeout = spawn_timeout

    def on_hello(self, identity: bytes, rec: ActorRecord | None, msg: m.Hello) -> None:
        if rec is None:
            rec = self._accept_join(identity, msg)
            if rec is None:
                return
        if rec.state != "starting" or rec.init_sent:
            self._router.reject(identity, "hello_twice", "HELLO received twice")
            return
        rec.pid, rec.host = msg.pid, msg.host
        rec.init_sent = True
        rec.last_seen = time.monotonic()
        self._router.send(identity, m.Init(rec.cls_path, rec.args, rec.kwargs))

    def _accept_join(self, identity: bytes, msg: m.Hello) -> ActorRecord | None:
        running = self._table.running_state(msg.name)
        if self._table.closing or running is not None:
            why = "the coordinator is shutting down" if self._table.closing else f"an actor named {msg.name!r} is running"
            log.warning("refused actor joining as %r from %s: %s", msg.name, msg.host, why)
            self._router.send(identity, m.Stop(f"join refused: {why}"))
            self._router.reject(identity, "join_refused", f"join refused: {why}", reply=False)  # STOP said why
            return None
        rec = ActorRecord(msg.name, msg.cls, msg.args, msg.kwargs, "remote", RestartPolicy(), {})
        rec.identity = identity
        rec.incarnation = 1
        rec.handle = self._make_handle(rec)
        rec.ready = asyncio.get_running_loop().create_future()
        self._table.add(rec)
        self._table.bind(rec)
        log.info("actor %s (%s) joined from %s pid %d", msg.name, msg.cls, msg.host, msg.pid)
        return rec

    def on_ready(self, identity: bytes, rec: ActorRecord | None, msg: m.Ready) -> None:
        if rec is None or rec.state != "starting":
            self._router.reject(identity, "ready_out_of_turn", "READY from an actor that is not starting")
            return
        if msg.ok:
            rec.methods = msg.methods
            if rec.setup_calls:
                rec.state = "setup"
                asyncio.get_running_loop().create_task(self._run_setup(rec, identity))
            else:
                self._mark_ready(rec)
            return
        exc = RemoteError(rec.name, "__init__", msg.error_type, msg.error, msg.traceback)
        settle(rec.ready, exc)
        self._supervisor.declare_dead(rec, f"constructor or on_start() raised {msg.error_type}: {msg.error}",
                                      identity)

    async def _run_setup(self, rec: ActorRecord, identity: bytes) -> None:
        try:
            for method, args, kwargs in rec.setup_calls:
                await self._calls.call(rec, method, args, kwargs, self._spawn_timeout, setup=True)
        except Exception as e:
            if rec.identity == identity and rec.state == "setup":
                settle(rec.ready, e if isinstance(e, RemoteError) else ActorDeadError(rec.name, str(e)))
                self._supervisor.declare_dead(rec, f"setup call failed: {e}", identity)
            return
        if rec.identity == identity and rec.state == "setup":
            self._mark_ready(rec)

    def _mark_ready(self, rec: ActorRecord) -> None:
        rec.state = "ready"
        rec.last_seen = time.monotonic()
        rec.started_once = True
        settle(rec.ready)
        self._table.announce_ready(rec)
