"""The coordinator side: one ROUTER socket, every actor's lifecycle, every pending call.

``ActorSystem`` spawns actors (a ``python -m rollart.actors.serve`` process each, or an in-process
server on the same event loop for tests), accepts actors that join from other hosts, routes calls and
replies, watches heartbeats and process exits, and restarts dead actors per their ``RestartPolicy``.

One actor's lifecycle::

    spawn -> starting --HELLO/INIT/READY--> setup (setup_calls) -> ready --death--> restarting -> starting ...
                                              \\--restarts exhausted--> dead (callbacks run)
                                              \\--stop()--> stopping -> stopped
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import zmq

from rollart.actors import messages as m
from rollart.actors.errors import ActorDeadError, RemoteError, WireError
from rollart.actors.calls import _END, CallRouter, _Pending
from rollart.actors.handle import ActorHandle, RestartPolicy
from rollart.actors.heartbeat import HEARTBEAT_SUFFIX
from rollart.actors.launch import LaunchConfig, class_path, start_process
from rollart.actors.server import ActorServer
from rollart.actors.zsock import AsyncSocket

log = logging.getLogger("rollart.actors")

BUSY_GRACE = 5
"""A silent local actor process that keeps using CPU gets up to this many heartbeat timeouts."""

@dataclass(eq=False)
class _ActorRecord:
    name: str
    cls_path: str
    args: list
    kwargs: dict
    mode: str  # process | inprocess | remote
    restart: RestartPolicy
    env: dict
    state: str = "starting"
    identity: bytes = b""
    incarnation: int = 0
    ready: asyncio.Future | None = None
    proc: Any = None
    task: asyncio.Task | None = None
    pid: int | None = None
    host: str = ""
    methods: list = field(default_factory=list)
    restarts: int = 0
    started_once: bool = False
    init_sent: bool = False
    last_seen: float = 0.0
    cpu_sample: tuple | None = None
    """(cpu ticks, when) of a silent process, to tell busy from hung."""
    dead_reason: str = ""
    dead_callbacks: list = field(default_factory=list)
    setup_calls: list = field(default_factory=list)
    handle: ActorHandle | None = None


def _settle(fut: asyncio.Future | None, exc: BaseException | None = None) -> None:
    if fut is None or fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)
        fut.exception()  # mark retrieved: nobody may be waiting on it


class ActorSystem(CallRouter):
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

    # -- incoming --------------------------------------------------------------------------------
    def _reject(self, identity: bytes, reason: str) -> None:
        self.rejected += 1
        if self.rejected <= 10 or self.rejected % 1000 == 0:
            log.warning("rejected a frame from %r (%d so far): %s", identity[:64], self.rejected, reason)
        try:
            self._send(identity, m.Reject(reason[:500]), best_effort=True)
        except zmq.ZMQError:
            pass

    def _on_frames(self, frames: list) -> None:
        identity = frames[0]
        try:
            msg = m.decode(frames[1:])
        except m.PayloadError as e:
            p = self._calls.get(getattr(e.message, "call_id", -1))
            if p is not None and p.rec.identity == identity and isinstance(e.message, (m.Result, m.Item)):
                del self._calls[e.message.call_id]
                p.fail(WireError(f"reply from {p.rec.name}.{p.method}() could not be decoded: {e}"))
            else:
                self._reject(identity, str(e))
            return
        except WireError as e:
            self._reject(identity, str(e))
            return
        kind = type(msg)
        rec = self._by_identity.get(identity)
        if rec is not None:
            rec.last_seen = time.monotonic()
        if kind is m.Result:
            p = self._calls.get(msg.call_id)
            if p is not None and p.rec is rec:  # only the callee can answer (forged/late replies ignored)
                del self._calls[msg.call_id]
                if p.timer is not None:
                    p.timer.cancel()
                if not p.fut.done():
                    p.fut.set_result(msg.value)
        elif kind is m.Item or kind is m.End or kind is m.Error:
            self._on_reply(rec, msg)
        elif kind is m.Ping:
            self._on_ping(identity, msg)
        elif kind is m.Hello:
            self._on_hello(identity, rec, msg)
        elif kind is m.Ready:
            self._on_ready(rec, msg, identity)
        elif kind is m.Reject:
            log.warning("actor %s rejected a message: %s", rec.name if rec else identity, msg.reason)
        else:
            self._reject(identity, f"unexpected {kind.__name__} message sent to the coordinator")

    def _on_reply(self, rec: _ActorRecord | None, msg: Any) -> None:
        p = self._calls.get(msg.call_id)
        if p is None or p.rec is not rec:
            return  # late reply to a cancelled / timed-out call
        if type(msg) is m.Item:
            p.queue.put_nowait((None, msg.value))
            return
        del self._calls[msg.call_id]
        if type(msg) is m.End:
            p.queue.put_nowait((_END, None))
        else:
            p.fail(RemoteError(rec.name, p.method, msg.type, msg.message, msg.traceback, tuple(msg.mro)))

    def _on_ping(self, identity: bytes, msg: m.Ping) -> None:
        main = identity[: -len(HEARTBEAT_SUFFIX)] if identity.endswith(HEARTBEAT_SUFFIX) else None
        rec = self._by_identity.get(main) if main else None
        known = rec is not None and rec.state in ("starting", "setup", "ready", "stopping")
        if known:
            rec.last_seen = time.monotonic()
        try:
            self._send(identity, m.Pong(msg.seq, known), best_effort=True)
        except zmq.ZMQError:
            pass

    def _on_hello(self, identity: bytes, rec: _ActorRecord | None, msg: m.Hello) -> None:
        if rec is None:
            rec = self._accept_join(identity, msg)
            if rec is None:
                return
        if rec.state != "starting" or rec.init_sent:
            self._reject(identity, "HELLO received twice")
            return
        rec.pid, rec.host = msg.pid, msg.host
        rec.init_sent = True
        rec.last_seen = time.monotonic()
        self._send(identity, m.Init(rec.cls_path, rec.args, rec.kwargs))

    def _accept_join(self, identity: bytes, msg: m.Hello) -> _ActorRecord | None:
        """An actor we did not spawn (``python -m rollart.actors.serve`` on another host) joins."""
        old = self._actors.get(msg.name)
        if self._closing or (old is not None and old.state not in ("dead", "stopped")):
            why = "the coordinator is shutting down" if self._closing else f"an actor named {msg.name!r} is running"
            log.warning("refused actor joining as %r from %s: %s", msg.name, msg.host, why)
            self._send(identity, m.Stop(f"join refused: {why}"))
            return None
        rec = _ActorRecord(msg.name, msg.cls, msg.args, msg.kwargs, "remote", RestartPolicy(), {})
        rec.identity = identity
        rec.incarnation = 1
        rec.handle = ActorHandle(self, rec)
        rec.ready = self._loop.create_future()
        self._actors[msg.name] = rec
        self._by_identity[identity] = rec
        log.info("actor %s (%s) joined from %s pid %d", msg.name, msg.cls, msg.host, msg.pid)
        return rec

    def _mark_ready(self, rec: _ActorRecord) -> None:
        rec.state = "ready"
        rec.last_seen = time.monotonic()
        rec.started_once = True
        _settle(rec.ready)
        _settle(self._joined.pop(rec.name, None))

    async def _run_setup(self, rec: _ActorRecord, identity: bytes) -> None:
        try:
            for method, args, kwargs in rec.setup_calls:
                await self._call(rec, method, args, kwargs, self.spawn_timeout, setup=True)
        except Exception as e:
            if rec.identity == identity and rec.state == "setup":
                _settle(rec.ready, e if isinstance(e, RemoteError) else ActorDeadError(rec.name, str(e)))
                self._declare_dead(rec, f"setup call failed: {e}", identity)
            return
        if rec.identity == identity and rec.state == "setup":
            self._mark_ready(rec)

    def _on_ready(self, rec: _ActorRecord | None, msg: m.Ready, identity: bytes) -> None:
        if rec is None or rec.state != "starting":
            self._reject(identity, "READY from an actor that is not starting")
            return
        if msg.ok:
            rec.methods = msg.methods
            if rec.setup_calls:
                rec.state = "setup"
                self._loop.create_task(self._run_setup(rec, identity))
            else:
                self._mark_ready(rec)
            return
        exc = RemoteError(rec.name, "__init__", msg.error_type, msg.error, msg.traceback)
        _settle(rec.ready, exc)
        self._declare_dead(rec, f"constructor or on_start() raised {msg.error_type}: {msg.error}", identity)
