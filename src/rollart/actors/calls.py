"""``PendingCalls``: calls, typed messages and streams from the coordinator's side — ids, pending
futures, timeouts, cancels, stream credits.

A call is one ``Pending`` keyed by its id. The inbox hands replies here (a reply counts only if it
came from the callee's current incarnation), a timer expires a call, and a death fails every call
pending on the dead actor. Everything runs on the coordinator's event loop.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any, AsyncIterator

import zmq

from rollart.actors import messages as m
from rollart.actors.errors import ActorDeadError, ActorTimeoutError, RemoteError, WireError
from rollart.actors.record import ActorRecord
from rollart.actors.router import Router

_ERR = object()  # stream queue marker: (an exception follows)
_END = object()


class Pending:
    __slots__ = ("rec", "method", "fut", "timer", "queue")

    def __init__(self, rec: ActorRecord, method: str, fut: Any = None, queue: Any = None):
        self.rec = rec
        self.method = method
        """What the caller asked for, for error messages: a method name or a message class name."""
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


class PendingCalls:
    def __init__(self, router: Router):
        self._router = router
        self._pending: dict[int, Pending] = {}
        self._ids = itertools.count(1)

    # -- starting calls ----------------------------------------------------------------------------
    async def call(self, rec: ActorRecord, method: str, args: Any, kwargs: dict, timeout: float | None,
                   setup: bool = False) -> Any:
        """``method(*args, **kwargs)`` on the actor; ``setup`` calls go out before it is ready."""
        if rec.state != "ready" and not setup:
            await _wait_ready(rec, timeout)
        cid = next(self._ids)
        return await self._request(rec, method, m.Call(cid, method, False, list(args), kwargs), timeout)

    async def send(self, rec: ActorRecord, message: Any, timeout: float | None) -> Any:
        """A typed request message; the actor dispatches it by its class."""
        if not dataclasses.is_dataclass(message) or isinstance(message, type):
            raise TypeError(f"send() takes a request message (a wire dataclass instance), got {message!r}")
        if rec.state != "ready":
            await _wait_ready(rec, timeout)
        cid = next(self._ids)
        return await self._request(rec, type(message).__qualname__, m.Send(cid, message), timeout)

    async def _request(self, rec: ActorRecord, label: str, msg: Any, timeout: float | None) -> Any:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        p = Pending(rec, label, fut)
        self._begin(rec, msg, p)
        if timeout is not None:
            p.timer = loop.call_later(timeout, self._expire, msg.call_id, timeout)
        try:
            return await fut
        except asyncio.CancelledError:
            self._cancel_remote(msg.call_id)
            raise

    async def stream(self, rec: ActorRecord, method: str, args: Any, kwargs: dict,
                     timeout: float | None) -> AsyncIterator:
        """Items of a generator method; ``timeout`` bounds the wait for each item."""
        if rec.state != "ready":
            await _wait_ready(rec, timeout)
        queue: asyncio.Queue = asyncio.Queue()
        cid = next(self._ids)
        self._begin(rec, m.Call(cid, method, True, list(args), kwargs), Pending(rec, method, queue=queue))
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
                if consumed >= m.STREAM_WINDOW // 2 and cid in self._pending:
                    self._router.send(rec.identity, m.Credit(cid, consumed))
                    consumed = 0
        finally:
            self._cancel_remote(cid)  # no-op if the stream ended

    def _begin(self, rec: ActorRecord, msg: Any, pending: Pending) -> None:
        try:
            self._router.send(rec.identity, msg)  # WireError -> caller
        except zmq.ZMQError as e:
            raise ActorDeadError(rec.name, f"no connection to the actor ({e})") from None
        self._pending[msg.call_id] = pending

    def _cancel_remote(self, cid: int) -> None:
        p = self._pending.pop(cid, None)
        if p is None:
            return
        if p.timer is not None:
            p.timer.cancel()
        try:
            self._router.send(p.rec.identity, m.Cancel(cid))
        except zmq.ZMQError:
            pass

    def _expire(self, cid: int, timeout: float) -> None:
        p = self._pending.get(cid)
        if p is None:
            return
        p.timer = None
        self._cancel_remote(cid)
        p.fail(ActorTimeoutError(p.rec.name, p.method, timeout))

    # -- replies and deaths ------------------------------------------------------------------------
    def on_reply(self, rec: ActorRecord | None, msg: Any) -> None:
        """A RESULT, ITEM, END or ERROR from ``rec``; one for a call it was not asked is ignored
        (a forged reply, or a late one to a cancelled or timed-out call)."""
        p = self._pending.get(msg.call_id)
        if p is None or p.rec is not rec:
            return
        kind = type(msg)
        if kind is m.Item:
            p.queue.put_nowait((None, msg.value))
            return
        del self._pending[msg.call_id]
        if kind is m.Result:
            if p.timer is not None:
                p.timer.cancel()
            if not p.fut.done():
                p.fut.set_result(msg.value)
        elif kind is m.End:
            p.queue.put_nowait((_END, None))
        else:
            p.fail(RemoteError(rec.name, p.method, msg.type, msg.message, msg.traceback, tuple(msg.mro)))

    def on_undecodable_reply(self, identity: bytes, error: m.PayloadError) -> bool:
        """Fail the call whose reply from ``identity`` could not be decoded; False if it was no reply."""
        msg = error.message
        p = self._pending.get(getattr(msg, "call_id", -1))
        if p is None or p.rec.identity != identity or not isinstance(msg, (m.Result, m.Item)):
            return False
        del self._pending[msg.call_id]
        p.fail(WireError(f"reply from {p.rec.name}.{p.method}() could not be decoded: {error}"))
        return True

    def fail_all(self, rec: ActorRecord, exc: BaseException) -> None:
        """Fail every call pending on ``rec`` (it died or is being stopped)."""
        for cid, p in list(self._pending.items()):
            if p.rec is rec:
                del self._pending[cid]
                p.fail(ActorDeadError(exc.actor, exc.reason, p.method) if type(exc) is ActorDeadError else exc)


async def _wait_ready(rec: ActorRecord, timeout: float | None) -> None:
    if rec.state in ("dead", "stopped", "stopping"):
        raise ActorDeadError(rec.name, rec.dead_reason or rec.state)
    try:
        await asyncio.wait_for(asyncio.shield(rec.ready), timeout)
    except asyncio.TimeoutError:
        raise ActorTimeoutError(rec.name, "<waiting for the actor to (re)start>", timeout) from None
