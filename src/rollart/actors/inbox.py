"""Incoming frames at the coordinator: replies to calls, pings, and the HELLO/INIT/READY handshake
(with setup calls) that brings an actor incarnation to ``ready``; remote actors join here too.

Mixed into ``ActorSystem``; everything here runs on the coordinator's event loop. A malformed or
unsolicited frame is counted in ``rejected`` and answered with REJECT, never raised.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import zmq

from rollart.actors import messages as m
from rollart.actors.calls import _END
from rollart.actors.errors import ActorDeadError, RemoteError, WireError
from rollart.actors.handle import ActorHandle, RestartPolicy
from rollart.actors.heartbeat import HEARTBEAT_SUFFIX
from rollart.actors.record import _ActorRecord, _settle

log = logging.getLogger("rollart.actors")


class Inbox:
    rejected: int
    spawn_timeout: float
    _actors: dict
    _by_identity: dict
    _calls: dict
    _joined: dict
    _loop: Any
    _closing: bool

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
