"""The actor side of the runtime: serves one plain logic object over a DEALER socket.

``ActorServer`` owns the socket; the logic object knows nothing about it. Dispatch rules:

* ``async def`` methods run as one asyncio task per call on the actor's event loop, so several
  calls run concurrently and can await futures resolved by a background task the object started in
  its optional ``async def on_start(self)``. A ``Cancel`` cancels the task (CancelledError is raised
  at its current ``await``); cancelling a finished call is a no-op, and a call cancelled before its
  task first ran never runs at all (its coroutine is made inside the task, so none is left unawaited).
* async generator methods (and plain generators) serve ``handle.stream()``, one item per message,
  with credit-based flow control so a fast producer cannot flood the caller.
* plain ``def`` methods run **inline** on the event loop (fast, and never racing the object's async
  code); mark a long-running one ``@blocking`` to run it in a worker thread instead, so the actor
  keeps answering other calls and cancels meanwhile (the thread itself cannot be interrupted).
* methods starting with ``_`` and the ``on_start``/``on_stop`` hooks are not callable remotely.
* a typed request message (``handle.send(msg)``) runs the method marked ``@handles(type(msg))``, like a
  call with ``msg`` as its one argument; a type the actor does not handle is a per-call TypeError.

Heartbeats are sent by a separate thread (see ``heartbeat.py``), so a method that holds the event loop
for a long time does not make the actor look dead.
"""
from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import inspect
import logging
import os
import socket
import sys
import traceback
from typing import Any, Callable, Iterator

import zmq

from rollart.actors import messages as m
from rollart.actors.dispatch import import_class, message_table, method_table
from rollart.actors.errors import WireError
from rollart.actors.zsock import AsyncSocket, connect_dealer

log = logging.getLogger("rollart.actors")
_NOT_STARTED = object()  # a call whose method raised before returning its coroutine (error already sent)


def error_message(call_id: int, exc: BaseException, tb: str | None = None) -> m.Error:
    tp = type(exc)
    mro = [f"{c.__module__}.{c.__qualname__}" for c in tp.__mro__ if c not in (object, BaseException)]
    if tb is None:
        tb = "".join(traceback.format_exception(tp, exc, exc.__traceback__))
    return m.Error(call_id, f"{tp.__module__}.{tp.__qualname__}", str(exc), tb, mro)


class ActorServer:
    """Connects to a coordinator, receives its constructor args, builds the object, serves calls."""

    def __init__(self, ctx: zmq.Context, endpoint: str, name: str, cls_path: str, identity: bytes, *,
                 offer_args: list | None = None, offer_kwargs: dict | None = None,
                 configure_socket: Callable[[zmq.Socket], None] | None = None,
                 on_init: Callable[[], None] | None = None, init_timeout: float | None = None):
        self.ctx = ctx
        self.endpoint = endpoint
        self.name = name
        self.cls_path = cls_path
        self.identity = identity
        self.offer_args = offer_args or []
        self.offer_kwargs = offer_kwargs or {}
        self.configure_socket = configure_socket
        self.on_init = on_init
        self.init_timeout = init_timeout
        """Give up (exit code 3) if the coordinator does not send INIT within this many seconds."""
        self.obj: Any = None
        self._methods: dict[str, tuple[Callable, str]] = {}
        self._handlers: dict[type, str] = {}  # request message type -> method name
        self._tasks: dict[int, asyncio.Task] = {}
        self._credits: dict[int, list] = {}  # call_id -> [credit, asyncio.Event]
        self._init: asyncio.Future | None = None
        self._stopped: asyncio.Future | None = None
        self._rejections = 0
        self.asock: AsyncSocket | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def run(self) -> int:
        """Serve until STOP. Returns a process exit code (0 = clean stop)."""
        loop = asyncio.get_running_loop()
        self._init = loop.create_future()
        self._stopped = loop.create_future()
        sock = connect_dealer(self.ctx, self.endpoint, self.identity, self.configure_socket)
        self.asock = AsyncSocket(sock, self._on_frames, copy_frames=2, loop=loop)
        try:
            self._send(m.Hello(self.name, self.cls_path, os.getpid(), socket.gethostname(),
                               self.offer_args, self.offer_kwargs))
            done, _ = await asyncio.wait([self._init, self._stopped], timeout=self.init_timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                log.error("actor %s: no answer from the coordinator at %s within %g s (wrong endpoint, "
                          "coordinator down, or CURVE keys it does not accept?)", self.name, self.endpoint,
                          self.init_timeout)
                return 3
            if self._stopped in done:
                return 0
            init: m.Init = self._init.result()
            if self.on_init:
                self.on_init()
            if not await self._construct(init):
                return 1
            await self._stopped
            return 0
        finally:
            await self._shutdown()

    async def _construct(self, init: m.Init) -> bool:
        try:
            cls = import_class(init.cls or self.cls_path)
            self._handlers = message_table(cls)  # a bad @handles mark fails the start, clearly
            self.obj = cls(*init.args, **init.kwargs)
            on_start = getattr(self.obj, "on_start", None)
            if on_start is not None:
                res = on_start()
                if inspect.isawaitable(res):
                    await res
        except Exception as e:
            log.exception("actor %s failed to start", self.name)
            err = error_message(0, e)
            self._send(m.Ready(False, [], err.type, err.message, err.traceback))
            return False
        self._methods = {name: (getattr(self.obj, name), kind) for name, kind in method_table(cls).items()}
        self._send(m.Ready(True, sorted(self._methods)))
        return True

    async def _shutdown(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        on_stop = getattr(self.obj, "on_stop", None) if self.obj is not None else None
        if on_stop is not None:
            try:
                res = on_stop()
                if inspect.isawaitable(res):
                    await res
            except Exception:
                log.exception("actor %s: on_stop() raised", self.name)
        if self.asock is not None:
            self.asock.close()

    # -- wire ------------------------------------------------------------------------------------
    def _send(self, msg: Any, best_effort: bool = False) -> None:
        try:
            frames = m.encode(msg)
        except WireError as e:
            call_id = getattr(msg, "call_id", 0)
            frames = m.encode(m.Error(call_id, "rollart.actors.errors.WireError",
                                      f"actor {self.name!r} could not send its reply: {e}", "", []))
        self.asock.send(frames, best_effort=best_effort)

    def _reject(self, reason: str) -> None:
        self._rejections += 1
        n = self._rejections
        if n <= 10 or n % 1000 == 0:
            log.warning("actor %s rejected a frame (%d so far): %s", self.name, n, reason)
        self._send(m.Reject(reason[:500]), best_effort=True)

    def _on_frames(self, frames: list) -> None:
        try:
            msg = m.decode(frames)
        except m.PayloadError as e:
            if isinstance(e.message, (m.Call, m.Send)):
                self._send(m.Error(e.message.call_id, "rollart.actors.errors.WireError", str(e), "", []))
            else:
                self._reject(str(e))
            return
        except WireError as e:
            self._reject(str(e))
            return
        kind = type(msg)
        if kind is m.Call:
            self._on_call(msg)
        elif kind is m.Send:
            self._on_send(msg)
        elif kind is m.Cancel:
            task = self._tasks.get(msg.call_id)
            if task is not None:
                task.cancel()
        elif kind is m.Credit:
            credit = self._credits.get(msg.call_id)
            if credit is not None:
                credit[0] += msg.n
                credit[1].set()
        elif kind is m.Init:
            if not self._init.done():
                self._init.set_result(msg)
            else:
                self._reject("INIT received twice")
        elif kind is m.Stop:
            if not self._stopped.done():
                log.info("actor %s stopping: %s", self.name, msg.reason)
                self._stopped.set_result(msg.reason)
        elif kind is m.Reject:
            log.warning("coordinator rejected a message from actor %s: %s", self.name, msg.reason)
        else:
            self._reject(f"unexpected {kind.__name__} message sent to an actor")

    # -- calls -----------------------------------------------------------------------------------
    def _on_call(self, msg: m.Call) -> None:
        cid = msg.call_id
        entry = self._methods.get(msg.method)
        if entry is None:
            self._send(self._unknown_method(msg))
            return
        fn, kind = entry
        if cid in self._tasks:
            self._send(m.Error(cid, "builtins.ValueError", f"call id {cid} is already running", "", []))
            return
        if msg.stream != (kind in ("agen", "gen")):
            hint = "use handle.stream()" if not msg.stream else "use handle.call()"
            what = "a generator" if kind in ("agen", "gen") else "not a generator"
            self._send(m.Error(cid, "builtins.TypeError",
                               f"{self.name}.{msg.method} is {what} method: {hint}", "", []))
            return
        if kind == "sync":
            try:
                value = fn(*msg.args, **msg.kwargs)
            except Exception as e:
                self._send(self._call_error(cid, msg, fn, e))
                return
            self._send(m.Result(cid, value))
            return
        # The method's coroutine (generator, thread job) is made by the task that runs it, not here: a
        # Cancel in the same drain as this Call (or a shutdown) may cancel the task before its first
        # step, and a coroutine made here would then be dropped unawaited ("coroutine ... was never
        # awaited") - and a thread job would run for nobody.
        loop = self.asock.loop
        if msg.stream:
            credit = self._credits[cid] = [m.STREAM_WINDOW, asyncio.Event()]
            task = loop.create_task(self._run_stream(cid, msg, fn, kind, credit))
        else:
            task = loop.create_task(self._run_call(cid, msg, fn, kind))
        self._tasks[cid] = task
        task.add_done_callback(functools.partial(self._forget_call, cid))

    def _on_send(self, msg: m.Send) -> None:
        method = self._handlers.get(type(msg.value))
        if method is None:
            self._send(self._unhandled_message(msg))
            return
        self._on_call(m.Call(msg.call_id, method, False, [msg.value], {}))

    def _forget_call(self, cid: int, task: asyncio.Task) -> None:
        """Drop a finished call's bookkeeping (also for a task cancelled before it ever ran)."""
        if self._tasks.get(cid) is task:
            del self._tasks[cid]
            self._credits.pop(cid, None)

    def _start_work(self, cid: int, msg: m.Call, fn: Callable, kind: str) -> Any:
        """The call's awaitable (or generator); _NOT_STARTED after replying with the error if it fails."""
        try:
            if kind == "thread":
                inspect.signature(fn).bind(*msg.args, **msg.kwargs)
                return self.asock.loop.run_in_executor(None, functools.partial(fn, *msg.args, **msg.kwargs))
            return fn(*msg.args, **msg.kwargs)
        except Exception as e:
            self._send(self._call_error(cid, msg, fn, e))
            return _NOT_STARTED

    async def _run_call(self, cid: int, msg: m.Call, fn: Callable, kind: str) -> None:
        work = self._start_work(cid, msg, fn, kind)
        if work is _NOT_STARTED:
            return
        with self._failure_reported(cid):
            self._send(m.Result(cid, await work))

    async def _run_stream(self, cid: int, msg: m.Call, fn: Callable, kind: str, credit: list) -> None:
        gen = self._start_work(cid, msg, fn, kind)
        if gen is _NOT_STARTED:
            return
        try:
            with self._failure_reported(cid):
                if kind == "agen":
                    async for item in gen:
                        await self._spend_credit(credit)
                        self._send(m.Item(cid, item))
                else:
                    for item in gen:
                        await self._spend_credit(credit)
                        self._send(m.Item(cid, item))
                self._send(m.End(cid))
        finally:
            if kind == "agen":
                await gen.aclose()
            else:
                gen.close()

    @contextlib.contextmanager
    def _failure_reported(self, cid: int) -> Iterator[None]:
        """Answer call ``cid`` with an Error if the work inside fails or is cancelled (the cancel still propagates)."""
        try:
            yield
        except asyncio.CancelledError:
            self._send(m.Error(cid, "asyncio.exceptions.CancelledError", "cancelled", "", []))
            raise
        except Exception as e:
            self._send(error_message(cid, e))

    @staticmethod
    async def _spend_credit(credit: list) -> None:
        while credit[0] <= 0:
            credit[1].clear()
            await credit[1].wait()
        credit[0] -= 1

    def _unknown_method(self, msg: m.Call) -> m.Error:
        close = difflib.get_close_matches(msg.method, list(self._methods), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return m.Error(msg.call_id, "builtins.AttributeError",
                       f"actor {self.name!r} ({self.cls_path}) has no public method {msg.method!r}{hint} "
                       f"available: {sorted(self._methods)}", "", [])

    def _unhandled_message(self, msg: m.Send) -> m.Error:
        tp = type(msg.value)
        handled = sorted(f"{t.__module__}.{t.__qualname__}" for t in self._handlers)
        return m.Error(msg.call_id, "builtins.TypeError",
                       f"actor {self.name!r} ({self.cls_path}) handles no {tp.__module__}.{tp.__qualname__} "
                       f"messages; it handles {handled or 'none'} (mark a method @handles(...))", "", [])

    def _call_error(self, cid: int, msg: m.Call, fn: Callable, exc: Exception) -> m.Error:
        """A TypeError from a call whose arguments don't bind gets a message naming the signature."""
        if isinstance(exc, TypeError):
            try:
                sig = inspect.signature(fn)
                sig.bind(*msg.args, **msg.kwargs)
            except TypeError as bind_error:
                return m.Error(cid, "builtins.TypeError",
                               f"bad arguments for {self.name}.{msg.method}{sig}: {bind_error}", "", [])
            except ValueError:
                pass
        return error_message(cid, exc)


def set_torch_threads(n: int) -> None:
    """Cap intra-op threads in this process (2-core machines run several actors)."""
    if n > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
