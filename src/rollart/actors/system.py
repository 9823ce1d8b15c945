"""The coordinator side: ``ActorSystem`` spawns actors, accepts actors that join from other hosts,
routes calls and replies, watches heartbeats and process exits, and restarts dead actors per their
``RestartPolicy``.

One actor's lifecycle::

    spawn -> starting --HELLO/INIT/READY--> setup (setup_calls) -> ready --death--> restarting -> starting ...
                                              \\--restarts exhausted--> dead (callbacks run)
                                              \\--stop()--> stopping -> stopped

``ActorSystem`` owns and wires its parts, each handed what it needs: the ``ActorTable`` (every actor),
the ``Router`` (the socket), ``PendingCalls`` (calls in flight), the ``Supervisor`` (deaths and
restarts), ``Incarnations`` (start/stop one incarnation), the ``Handshake`` (starting -> ready), the
``Inbox`` (incoming frames) and the ``LivenessMonitor`` (heartbeats).
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

import zmq

from rollart.actors.calls import PendingCalls
from rollart.actors.handle import ActorHandle
from rollart.actors.handshake import Handshake
from rollart.actors.inbox import Inbox
from rollart.actors.incarnations import Incarnations
from rollart.actors.launch import LaunchConfig, Launcher, class_path
from rollart.actors.liveness import LivenessMonitor
from rollart.actors.record import ActorRecord
from rollart.actors.restart import RestartPolicy
from rollart.actors.router import Router
from rollart.actors.supervision import Supervisor
from rollart.actors.table import ActorTable


class ActorSystem:
    """Coordinator of a set of actors. Use ``async with ActorSystem() as system:`` or start()/shutdown().

    ``bind``: ZeroMQ endpoint for actors to connect to (port 0 = pick a free one; see ``endpoint``).
    ``heartbeat_interval``/``heartbeat_timeout``: actors ping every interval; one silent for longer than
    the timeout is declared dead (a local actor process that exits is noticed at once).
    ``curve_dir``: directory made by ``python tools/curve_keys.py DIR``; turns on CURVE authentication.
    A non-loopback ``bind`` requires it unless ``insecure=True``.
    ``launcher``: how actor processes start (``rollart.actors.launch.Launcher``; default: local children).
    The settings are handed to the parts at construction: read them here, do not change them afterwards.
    """

    def __init__(self, bind: str = "tcp://127.0.0.1:0", heartbeat_interval: float = 0.5,
                 heartbeat_timeout: float = 3.0, *, spawn_timeout: float = 60.0, torch_threads: int = 1,
                 curve_dir: str | None = None, insecure: bool = False, launcher: Launcher | None = None,
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
        self.launcher = launcher
        self.endpoint = ""
        """The bound TCP endpoint actors connect to, e.g. ``tcp://127.0.0.1:41234`` (after start)."""
        self._table = ActorTable()
        self._router = Router(bind, curve_dir, insecure)
        self._calls = PendingCalls(self._router)
        self._supervisor = Supervisor(self._table, self._calls, self._relaunch, on_actor_dead)
        self._handshake = Handshake(self._table, self._router, self._calls, self._supervisor,
                                    self._make_handle, spawn_timeout)
        self._inbox = Inbox(self._table, self._router, self._calls, self._handshake)
        self._liveness = LivenessMonitor(self._table, self._router, self._supervisor, heartbeat_interval,
                                         heartbeat_timeout)
        # built in start(): they need the zmq context and the bound endpoint
        self._incarnations: Incarnations | None = None
        self._ctx: zmq.Context | None = None
        self._monitor: asyncio.Task | None = None

    @property
    def rejected(self) -> int:
        """Frames this coordinator rejected as malformed or unsolicited."""
        return self._router.rejected

    @property
    def rejections(self) -> dict[str, int]:
        """The rejected frames by what was wrong: ``bad_header``, ``unknown_kind``, ``unsolicited_reply``, ... (the
        codes of ``rollart.actors.messages.decode`` and of ``Inbox``); they sum to ``rejected``."""
        return dict(self._router.rejections)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> "ActorSystem":
        loop = asyncio.get_running_loop()
        self._ctx = zmq.Context()
        try:
            self._router.open(self._ctx, self._inbox.on_frames, loop)
        except BaseException:
            from rollart.actors.curve import stop_authenticator

            stop_authenticator(self._ctx)
            self._ctx.destroy(linger=0)
            raise
        self.endpoint = self._router.endpoint
        launch_cfg = LaunchConfig(self.endpoint, self.heartbeat_interval, self.heartbeat_timeout,
                                  self.torch_threads, self.curve_dir, self.launcher)
        self._incarnations = Incarnations(self._table, self._router, self._calls, self._supervisor, self._ctx,
                                          launch_cfg, self.spawn_timeout)
        self._monitor = loop.create_task(self._liveness.run())
        return self

    async def __aenter__(self) -> "ActorSystem":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.shutdown()

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every actor (on_stop runs), then close the socket. Idempotent."""
        if self._table.closing:
            return
        self._table.closing = True
        await asyncio.gather(*(self._stop_actor(rec, timeout) for rec in self._table), return_exceptions=True)
        for rec in self._table:  # reap processes of dead incarnations too
            await Incarnations.reap(rec, timeout)
        if self._monitor is not None:
            self._monitor.cancel()
        self._router.close()
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
        if not self._router.is_open or self._table.closing:
            raise RuntimeError("ActorSystem is not running: call `await system.start()` first")
        if mode not in ("process", "inprocess"):
            raise ValueError(f"mode must be 'process' or 'inprocess', got {mode!r}")
        path = class_path(cls, for_process=mode == "process")
        name = name or f"{path.rsplit(':', 1)[-1]}-{len(self._table)}"
        running = self._table.running_state(name)
        if running is not None:
            raise ValueError(f"an actor named {name!r} is already {running}; pick another name")
        rec = ActorRecord(name, path, list(args), kwargs, mode, restart or RestartPolicy(), dict(env or {}))
        if on_dead is not None:
            rec.dead_callbacks.append(on_dead)
        rec.setup_calls = list(setup_calls or [])
        rec.handle = self._make_handle(rec)
        rec.ready = asyncio.get_running_loop().create_future()
        self._table.add(rec)
        await self._incarnations.start(rec)
        return rec.handle

    def handle(self, name: str) -> ActorHandle:
        rec = self._table.get(name)
        if rec is None:
            raise KeyError(f"no actor named {name!r}; known: {self._table.names()}")
        return rec.handle

    async def wait_for_actor(self, name: str, timeout: float | None = None) -> ActorHandle:
        """Wait until an actor named ``name`` (e.g. one joining from another host) is ready."""
        return (await self._table.wait_ready(name, timeout)).handle

    @property
    def actors(self) -> dict[str, ActorHandle]:
        return {rec.name: rec.handle for rec in self._table}

    # -- wiring: what the parts call back -----------------------------------------------------------
    def _make_handle(self, rec: ActorRecord) -> ActorHandle:
        return ActorHandle(rec, self._calls, self._stop_actor)

    async def _relaunch(self, rec: ActorRecord) -> None:
        await self._incarnations.start(rec)

    async def _stop_actor(self, rec: ActorRecord, timeout: float) -> None:
        await self._incarnations.stop(rec, timeout)
