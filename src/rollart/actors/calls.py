"""Calls and streams from the coordinator's side: ids, pending futures, timeouts, cancels, credits.

Mixed into ``ActorSystem``; everything here runs on the coordinator's event loop. A call is one
future in ``_calls`` keyed by its id; the reply handler in ``inbox.py`` resolves it (only if it came
from the callee's current incarnation), a timer expires it, a death fails it.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import zmq

from rollart.actors import messages as m
from rollart.actors.errors import ActorDeadError, ActorTimeoutError
from rollart.actors.server import STREAM_WINDOW

if TYPE_CHECKING:
    from rollart.actors.record import _ActorRecord

_ERR = object()  # stream queue marker: (an exception follows)
_END = object()


class _Pending:
    __slots__ = ("rec", "method", "fut", "timer", "queue")

    def __init__(self, rec: _ActorRecord, method: str, fut: Any = None, queue: Any = None):
        self.rec = rec
        self.method = method
        self.fut = fut
        self.timer = None
        self.queue = queue

    def fail(self, exc: BaseException) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.queue is not None:
            self.queue.put_nowait((_ERR, exc))
        elif not self.fut.done():
            self.fut.set_exception(exc)



class CallRouter:
    _calls: dict
    _loop: Any
    _asock: Any
    _ids: Any

    # -- calls -----------------------------------------------------------------------------------
    def _send(self, identity: bytes, msg: Any, best_effort: bool = False) -> None:
        frames = m.encode(msg)
        frames.insert(0, identity)
        self._asock.send(frames, key=identity, best_effort=best_effort)

    async def _wait_ready(self, rec: _ActorRecord, timeout: float | None) -> None:
        if rec.state in ("dead", "stopped", "stopping"):
            raise ActorDeadError(rec.name, rec.dead_reason or rec.state)
        try:
            await asyncio.wait_for(asyncio.shield(rec.ready), timeout)
        except asyncio.TimeoutError:
            raise ActorTimeoutError(rec.name, "<waiting for the actor to (re)start>", timeout) from None

    def _begin(self, rec: _ActorRecord, method: str, args: Any, kwargs: dict, stream: bool,
               pending: _Pending) -> int:
        cid = next(self._ids)
        frames = m.encode(m.Call(cid, method, stream, list(args), kwargs))  # WireError -> caller
        frames.insert(0, rec.identity)
        try:
            self._asock.send(frames, key=rec.identity)
        except zmq.ZMQError as e:
            raise ActorDeadError(rec.name, f"no connection to the actor ({e})") from None
        self._calls[cid] = pending
        return cid

    def _cancel_remote(self, cid: int) -> None:
        p = self._calls.pop(cid, None)
        if p is None:
            return
        if p.timer is not None:
            p.timer.cancel()
        try:
            self._send(p.rec.identity, m.Cancel(cid))
        except zmq.ZMQError:
            pass

    async def _call(self, rec: _ActorRecord, method: str, args: Any, kwargs: dict,
                    timeout: float | None, setup: bool = False) -> Any:
        if rec.state != "ready" and not setup:
            await self._wait_ready(rec, timeout)
        fut = self._loop.create_future()
        p = _Pending(rec, method, fut)
        cid = self._begin(rec, method, args, kwargs, False, p)
        if timeout is not None:
            p.timer = self._loop.call_later(timeout, self._expire, cid, timeout)
        try:
            return await fut
        except asyncio.CancelledError:
            self._cancel_remote(cid)
            raise

    def _expire(self, cid: int, timeout: float) -> None:
        p = self._calls.get(cid)
        if p is None:
            return
        p.timer = None
        self._cancel_remote(cid)
        p.fail(ActorTimeoutError(p.rec.name, p.method, timeout))

    async def _stream(self, rec: _ActorRecord, method: str, args: Any, kwargs: dict,
                      timeout: float | None) -> Any:
        if rec.state != "ready":
            await self._wait_ready(rec, timeout)
        queue: asyncio.Queue = asyncio.Queue()
        cid = self._begin(rec, method, args, kwargs, True, _Pending(rec, method, queue=queue))
        consumed = 0
        try:
            while True:
                if timeout is None:
                    tag, value = await queue.get()
                else:
                    try:
                        tag, value = await asyncio.wait_for(queue.get(), timeout)
                    except asyncio.TimeoutError:
                        raise ActorTimeoutError(rec.name, method, timeout) from None
                if tag is _END:
                    return
                if tag is _ERR:
                    raise value
                yield value
                consumed += 1
                if consumed >= STREAM_WINDOW // 2 and cid in self._calls:
                    self._send(rec.identity, m.Credit(cid, consumed))
                    consumed = 0
        finally:
            self._cancel_remote(cid)  # no-op if the stream ended

