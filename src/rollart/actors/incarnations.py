"""``Incarnations``: starting and stopping one incarnation of an actor — a ``python -m
rollart.actors.serve`` process, or an ``ActorServer`` task on the coordinator's own loop (for tests) —
and noticing when it ends. How it dies is the ``Supervisor``'s business.
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from typing import Any

import zmq

from rollart.actors import messages as m
from rollart.actors.calls import PendingCalls
from rollart.actors.errors import ActorDeadError
from rollart.actors.launch import LaunchConfig, start_process
from rollart.actors.record import ActorRecord, settle
from rollart.actors.router import Router
from rollart.actors.server import ActorServer
from rollart.actors.supervision import Supervisor
from rollart.actors.table import ActorTable

log = logging.getLogger("rollart.actors")


class Incarnations:
    def __init__(self, table: ActorTable, router: Router, calls: PendingCalls, supervisor: Supervisor,
                 ctx: zmq.Context, launch_cfg: LaunchConfig, spawn_timeout: float):
        self._table = table
        self._router = router
        self._calls = calls
        self._supervisor = supervisor
        self._ctx = ctx
        self._launch_cfg = launch_cfg
        self._spawn_timeout = spawn_timeout

    async def start(self, rec: ActorRecord) -> None:
        """Start one incarnation and wait until it is ready; on failure declare it dead and raise."""
        loop = asyncio.get_running_loop()
        rec.incarnation += 1
        rec.identity = f"{rec.name}#{rec.incarnation}.{secrets.token_hex(3)}".encode()
        rec.state = "starting"
        rec.init_sent = False
        rec.last_seen = time.monotonic()
        if rec.ready is None or rec.ready.done():
            rec.ready = loop.create_future()
        ready = rec.ready
        self._table.bind(rec)
        identity = rec.identity
        try:
            if rec.mode == "process":
                launch = self._launch_cfg.launcher or start_process
                rec.proc = await launch(self._launch_cfg, rec.name, rec.cls_path, identity, rec.env)
                rec.pid = rec.proc.pid
                loop.create_task(self._watch_process(rec, rec.proc, identity))
            else:
                rec.pid = os.getpid()
                rec.task = loop.create_task(self._serve_inprocess(rec, identity))
            await asyncio.wait_for(asyncio.shield(ready), self._spawn_timeout)
        except asyncio.TimeoutError:
            exc = ActorDeadError(rec.name, f"did not become ready within spawn_timeout={self._spawn_timeout} s")
            self._supervisor.declare_dead(rec, exc.reason, identity)
            raise exc from None
        except BaseException as e:
            if rec.identity == identity and rec.state == "starting":
                self._supervisor.declare_dead(rec, f"start failed: {e}", identity)
            raise

    async def _watch_process(self, rec: ActorRecord, proc: Any, identity: bytes) -> None:
        rc = await proc.wait()
        if rec.identity == identity and not self._table.closing:
            await asyncio.sleep(0.05)  # let its last messages (e.g. a failed READY) arrive first
            self._router.drain()
        where = getattr(proc, "where", None) or f"process {proc.pid}"  # a remote process says where it ran
        self._supervisor.declare_dead(rec, f"{where} exited with code {rc}", identity)

    async def _serve_inprocess(self, rec: ActorRecord, identity: bytes) -> None:
        configure = None
        if self._launch_cfg.curve_dir:  # the ROUTER's CURVE applies to its inproc endpoint too
            from rollart.actors.curve import client_configurator

            configure = client_configurator(self._launch_cfg.curve_dir)
        server = ActorServer(self._ctx, self._router.inproc, rec.name, rec.cls_path, identity,
                             configure_socket=configure)
        try:
            await server.run()
        except Exception as e:
            log.exception("in-process actor %s crashed", rec.name)
            reason = f"in-process server crashed: {e}"
        else:
            reason = "in-process server exited"
        if not self._table.closing:
            self._router.drain()  # its last messages (e.g. a failed READY) first
        self._supervisor.declare_dead(rec, reason, identity)

    async def stop(self, rec: ActorRecord, timeout: float) -> None:
        """Ask the current incarnation to run on_stop() and exit; kill it after ``timeout``."""
        if rec.state in ("dead", "stopped", "stopping"):
            return
        rec.state = "stopping"
        identity = rec.identity
        exc = ActorDeadError(rec.name, "stopped")
        self._calls.fail_all(rec, exc)
        settle(rec.ready, exc)
        try:
            self._router.send(identity, m.Stop("stopped by the coordinator"))
        except zmq.ZMQError:
            pass
        try:
            if rec.proc is not None:
                await asyncio.wait_for(rec.proc.wait(), timeout)
            elif rec.task is not None:
                await asyncio.wait_for(asyncio.shield(rec.task), timeout)
        except asyncio.TimeoutError:
            log.warning("actor %s did not stop within %s s; killing it", rec.name, timeout)
            if rec.proc is not None and rec.proc.returncode is None:
                rec.proc.kill()
                await rec.proc.wait()
            if rec.task is not None:
                rec.task.cancel()
        self._table.unbind(identity)
        rec.state = "stopped"
        rec.dead_reason = "stopped"

    @staticmethod
    async def reap(rec: ActorRecord, timeout: float) -> None:
        """Kill and wait for the last process of ``rec``, whatever state it was left in."""
        if rec.proc is None:
            return
        if rec.proc.returncode is None:
            rec.proc.kill()
        try:
            await asyncio.wait_for(rec.proc.wait(), timeout)
        except asyncio.TimeoutError:
            log.error("actor %s process %d did not exit after SIGKILL", rec.name, rec.proc.pid)
