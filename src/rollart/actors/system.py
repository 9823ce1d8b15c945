"""The coordinator side: one ROUTER socket, every actor's lifecycle, every pending call.

``ActorSystem`` spawns actors (a ``python -m rollart.actors.serve`` process each, or an in-process
server on the same event loop for tests), accepts actors that join from other hosts, routes calls and
replies, watches heartbeats and process exits, and restarts dead actors per their ``RestartPolicy``.

One actor's lifecycle::

    spawn -> starting --HELLO/INIT/READY--> setup (setup_calls) -> ready --death--> restarting -> starting ...
                                              \\--restarts exhausted--> dead (callbacks run)
                                              \\--stop()--> stopping -> stopped

This module holds the socket, spawning and stopping; the rest is mixed in: ``inbox`` (incoming frames
and the handshake), ``supervision`` (exits, heartbeats, death, restarts), ``calls`` (pending calls and
streams); ``record`` is the per-actor bookkeeping they share.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import time
from typing import Any, Callable

import zmq

from rollart.actors import messages as m
from rollart.actors.calls import CallRouter, _Pending
from rollart.actors.errors import ActorDeadError
from rollart.actors.handle import ActorHandle, RestartPolicy
from rollart.actors.inbox import Inbox
from rollart.actors.launch import LaunchConfig, class_path, start_process
from rollart.actors.record import _ActorRecord, _settle
from rollart.actors.server import ActorServer
from rollart.actors.supervision import Supervision
from rollart.actors.zsock import AsyncSocket

log = logging.getLogger("rollart.actors")


class ActorSystem(Inbox, Supervision, CallRouter):
    """Coordinator of a set of actors. Use ``async with ActorSystem() as system:`` or start()/shutdown().

    ``bind``: ZeroMQ endpoint for actors to connect to (port 0 = pick a free one; see ``endpoint``).
    ``heartbeat_interval``/``heartbeat_timeout``: actors ping every interval; one silent for longer than
    the timeout is declared dead (a local actor process that exits is noticed at once).
    ``curve_dir``: directory made by ``python tools/curve_keys.py DIR``; turns on CURVE authentication.
    A non-loopback ``bind`` requires it unless ``insecure=True``.
    """

    def __init__(self, bind: str = "tcp://127.0.0.1:0", heartbeat_interval: float = 0.5,
                 heartbeat_timeout: float = 3.0, *, spawn_timeout: float = 60.0, torch_threads: int = 1,
                 curve_dir: str | None = None, insecure: bool = False,
                 on_actor_dead: Callable[[str, str], Any] | None = None):
        if not 0 < heartbeat_interval < heartbeat_timeout:
            raise ValueError(f"need 0 < heartbeat_interval < heartbeat_timeout, got {heartbeat_interval}, "
                             f"{heartbeat_timeout}")
        self.bind = bind
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.spawn_timeout = spawn_timeout
        self.torch_threads = torch_threads
        self.curve_dir = curve_dir
        self.insecure = insecure
        self.on_actor_dead = on_actor_dead
        self.endpoint = ""
        """The bound TCP endpoint actors connect to, e.g. ``tcp://127.0.0.1:41234`` (after start)."""
        self.rejected = 0
        """Frames this coordinator rejected as malformed or unsolicited."""
        self._actors: dict[str, _ActorRecord] = {}
        self._by_identity: dict[bytes, _ActorRecord] = {}
        self._calls: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._joined: dict[str, asyncio.Future] = {}
        self._ctx: zmq.Context | None = None
        self._asock: AsyncSocket | None = None
        self._monitor: asyncio.Task | None = None
        self._inproc = f"inproc://rollart-{secrets.token_hex(6)}"
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._launch_cfg: LaunchConfig | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> "ActorSystem":
        from rollart.actors.curve import configure_server, is_loopback

        self._loop = asyncio.get_running_loop()
        self._ctx = zmq.Context()
        router = self._ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.SNDHWM, 100_000)
        router.setsockopt(zmq.RCVHWM, 100_000)
        if self.curve_dir:
            configure_server(router, self.curve_dir, self._ctx)
        elif not is_loopback(self.bind) and not self.insecure:
            router.close(linger=0)
            self._ctx.term()
            raise ValueError(f"binding {self.bind} exposes actors beyond this host: pass "
                             "curve_dir=DIR (make keys with `python tools/curve_keys.py DIR`) or insecure=True")
        router.bind(self.bind)
        self.endpoint = router.getsockopt(zmq.LAST_ENDPOINT).decode()
        router.bind(self._inproc)
        self._asock = AsyncSocket(router, self._on_frames, copy_frames=3, loop=self._loop)
        self._launch_cfg = LaunchConfig(self.endpoint, self.heartbeat_interval, self.heartbeat_timeout,
                                        self.torch_threads, self.curve_dir)
        self._monitor = self._loop.create_task(self._watch_heartbeats())
        return self

    async def __aenter__(self) -> "ActorSystem":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every actor (on_stop runs), then close the socket. Idempotent."""
        if self._closing:
            return
        self._closing = True
        await asyncio.gather(*(self._stop_actor(r, timeout) for r in list(self._actors.values())),
                             return_exceptions=True)
        for rec in self._actors.values():  # reap processes of dead incarnations too
            if rec.proc is not None:
                if rec.proc.returncode is None:
                    rec.proc.kill()
                try:
                    await asyncio.wait_for(rec.proc.wait(), timeout)
                except asyncio.TimeoutError:
                    log.error("actor %s process %d did not exit after SIGKILL", rec.name, rec.proc.pid)
        if self._monitor is not None:
            self._monitor.cancel()
        if self._asock is not None:
            self._asock.close()
        if self._ctx is not None:
            from rollart.actors.curve import stop_authenticator

            stop_authenticator(self._ctx)
            self._ctx.destroy(linger=0)

    # -- actors ----------------------------------------------------------------------------------
    async def spawn(self, cls: type | str, *args: Any, name: str | None = None, mode: str = "process",
                    restart: RestartPolicy | None = None, env: dict | None = None,
                    on_dead: Callable[[str, str], Any] | None = None, setup_calls: list | None = None,
                    **kwargs: Any) -> ActorHandle:
        """Start ``cls(*args, **kwargs)`` as an actor and wait until it is ready (constructor and
        ``on_start()`` done). Keywords ``name``, ``mode``, ``restart``, ``env``, ``on_dead`` and
        ``setup_calls`` belong to spawn; every other keyword goes to the constructor. ``setup_calls``:
        ``[(method, args, kwargs), ...]`` made on every incarnation (first start and each restart) before
        any other call reaches it. A failing constructor or setup call raises RemoteError."""
        if self._asock is None or self._closing:
            raise RuntimeError("ActorSystem is not running: call `await system.start()` first")
        if mode not in ("process", "inprocess"):
            raise ValueError(f"mode must be 'process' or 'inprocess', got {mode!r}")
        path = class_path(cls, for_process=mode == "process")
        name = name or f"{path.rsplit(':', 1)[-1]}-{len(self._actors)}"
        old = self._actors.get(name)
        if old is not None and old.state not in ("dead", "stopped"):
            raise ValueError(f"an actor named {name!r} is already {old.state}; pick another name")
        rec = _ActorRecord(name, path, list(args), kwargs, mode, restart or RestartPolicy(), dict(env or {}))
        if on_dead is not None:
            rec.dead_callbacks.append(on_dead)
        rec.setup_calls = list(setup_calls or [])
        rec.handle = ActorHandle(self, rec)
        rec.ready = self._loop.create_future()
        self._actors[name] = rec
        await self._launch(rec)
        return rec.handle

    def handle(self, name: str) -> ActorHandle:
        rec = self._actors.get(name)
        if rec is None:
            raise KeyError(f"no actor named {name!r}; known: {sorted(self._actors)}")
        return rec.handle

    async def wait_for_actor(self, name: str, timeout: float | None = None) -> ActorHandle:
        """Wait until an actor named ``name`` (e.g. one joining from another host) is ready."""
        rec = self._actors.get(name)
        if rec is None or rec.state in ("dead", "stopped"):
            fut = self._joined.setdefault(name, self._loop.create_future())
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            rec = self._actors[name]
        if rec.state != "ready":
            await asyncio.wait_for(asyncio.shield(rec.ready), timeout)
        return rec.handle

    @property
    def actors(self) -> dict[str, ActorHandle]:
        return {name: rec.handle for name, rec in self._actors.items()}

    async def _launch(self, rec: _ActorRecord) -> None:
        """Start one incarnation and wait for READY; on failure declare it dead and raise."""
        rec.incarnation += 1
        rec.identity = f"{rec.name}#{rec.incarnation}.{secrets.token_hex(3)}".encode()
        rec.state = "starting"
        rec.init_sent = False
        rec.last_seen = time.monotonic()
        if rec.ready is None or rec.ready.done():
            rec.ready = self._loop.create_future()
        ready = rec.ready
        self._by_identity[rec.identity] = rec
        identity = rec.identity
        try:
            if rec.mode == "process":
                rec.proc = await start_process(self._launch_cfg, rec.name, rec.cls_path, identity, rec.env)
                rec.pid = rec.proc.pid
                self._loop.create_task(self._watch_process(rec, rec.proc, identity))
            else:
                rec.pid = os.getpid()
                rec.task = self._loop.create_task(self._serve_inprocess(rec, identity))
            await asyncio.wait_for(asyncio.shield(ready), self.spawn_timeout)
        except asyncio.TimeoutError:
            exc = ActorDeadError(rec.name, f"did not become ready within spawn_timeout={self.spawn_timeout} s")
            self._declare_dead(rec, exc.reason, identity)
            raise exc from None
        except BaseException as e:
            if rec.identity == identity and rec.state == "starting":
                self._declare_dead(rec, f"start failed: {e}", identity)
            raise

    async def _serve_inprocess(self, rec: _ActorRecord, identity: bytes) -> None:
        configure = None
        if self.curve_dir:  # the ROUTER's CURVE applies to its inproc endpoint too
            from rollart.actors.curve import client_configurator

            configure = client_configurator(self.curve_dir)
        server = ActorServer(self._ctx, self._inproc, rec.name, rec.cls_path, identity, configure_socket=configure)
        try:
            await server.run()
        except Exception as e:
            log.exception("in-process actor %s crashed", rec.name)
            reason = f"in-process server crashed: {e}"
        else:
            reason = "in-process server exited"
        if not self._closing:
            self._asock.drain()  # its last messages (e.g. a failed READY) first
        self._declare_dead(rec, reason, identity)

    async def _stop_actor(self, rec: _ActorRecord, timeout: float) -> None:
        if rec.state in ("dead", "stopped", "stopping"):
            return
        rec.state = "stopping"
        identity = rec.identity
        exc = ActorDeadError(rec.name, "stopped")
        for cid, p in list(self._calls.items()):
            if p.rec is rec:
                del self._calls[cid]
                p.fail(exc)
        _settle(rec.ready, exc)
        try:
            self._send(identity, m.Stop("stopped by the coordinator"))
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
        self._by_identity.pop(identity, None)
        rec.state = "stopped"
        rec.dead_reason = "stopped"
