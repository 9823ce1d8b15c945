"""A ZeroMQ socket driven by the asyncio event loop without a task or future per message.

zmq exposes one edge-triggered file descriptor per socket: it becomes readable when the socket's
``EVENTS`` *may* have changed, and re-arms only after ``EVENTS`` is read. So every socket operation
must be followed by an ``EVENTS`` check before the loop waits on the fd again — done here after each
send and at the end of each drain. Incoming messages are handed to a plain callback (which resolves
futures or starts tasks); sends never block: when a peer's queue is full (zmq.Again) its frames wait
in that peer's own outbox (so one slow or hostile peer never delays messages to the others) and are
retried in order on the next drain or retry timer; best-effort messages (rejections, heartbeat replies)
to a full peer are dropped instead.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Callable

import zmq

log = logging.getLogger("rollart.actors")

# plain ints: pyzmq's constants are enums, and enum arithmetic costs microseconds per message
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)
_EVENTS = int(zmq.EVENTS)
_RCVMORE = int(zmq.RCVMORE)
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)
_COPY_BELOW = 65536  # smaller parts are copied into zmq (cheaper than tracking a zero-copy buffer)

_MAX_PER_DRAIN = 512  # messages handled before yielding to other loop callbacks
_RETRY_DELAY = 0.005  # seconds between retries of a full peer's outbox


def connect_dealer(ctx: zmq.Context, endpoint: str, identity: bytes,
                   configure: Callable[[zmq.Socket], None] | None = None) -> zmq.Socket:
    """A DEALER socket with ``identity``, no linger on close, ``configure`` applied, connected to ``endpoint``."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 0)
    if configure:
        configure(sock)
    sock.connect(endpoint)
    return sock


class AsyncSocket:
    def __init__(self, sock: zmq.Socket, on_message: Callable[[list], None], *, copy_frames: int,
                 loop: asyncio.AbstractEventLoop | None = None):
        """``copy_frames``: leading frames received as bytes (envelope, header, body); the rest (array
        buffers) arrive as zero-copy ``zmq.Frame`` objects."""
        self.sock = sock
        self.on_message = on_message
        self.copy_frames = copy_frames
        self.loop = loop or asyncio.get_running_loop()
        self._outbox: dict[bytes | None, deque] = {}
        self._retry: asyncio.TimerHandle | None = None
        self._drain_pending = False
        self._in_drain = False
        self._closed = False
        self._fd = sock.FD
        self.loop.add_reader(self._fd, self._drain)

    # -- sending ---------------------------------------------------------------------------------
    def send(self, frames: list, *, key: bytes | None = None, best_effort: bool = False) -> None:
        """Send one multipart message now, or queue it behind earlier ones for the same peer ``key``
        (a ROUTER's peer identity; None for a DEALER). Raises zmq.ZMQError (e.g. EHOSTUNREACH) at once."""
        if self._closed:
            raise zmq.ZMQError(zmq.ENOTSOCK, "socket closed")
        queue = self._outbox.get(key)
        if queue:
            if not best_effort:
                queue.append(frames)
        else:
            try:
                self._send_now(frames)
            except zmq.Again:
                if best_effort:
                    log.debug("dropping a best-effort message to a full peer %r", key)
                else:
                    self._outbox.setdefault(key, deque()).append(frames)
                    self._schedule_retry()
        # a send can swallow the fd's edge for messages that arrived meanwhile: look once more, unless
        # we are inside a drain, which re-reads EVENTS before it returns anyway
        if not self._in_drain and not self._drain_pending and self.sock.getsockopt(_EVENTS) & _POLLIN:
            self._drain_pending = True
            self.loop.call_soon(self._drain)

    def _send_now(self, frames: list) -> None:
        """One multipart message, non-blocking (zmq.Again only before the first part goes out)."""
        send = self.sock.send
        last = len(frames) - 1
        for i, part in enumerate(frames):
            flags = _NOBLOCK if i == last else _NOBLOCK | _SNDMORE
            send(part, flags, copy=type(part) is bytes and len(part) < _COPY_BELOW)

    def _schedule_retry(self) -> None:
        if self._retry is None and not self._closed:
            self._retry = self.loop.call_later(_RETRY_DELAY, self._retry_flush)

    def _retry_flush(self) -> None:
        self._retry = None
        self._flush()
        if not self._drain_pending:
            self._drain_pending = True
            self.loop.call_soon(self._drain)

    def _flush(self) -> bool:
        """Send what the full peers can take now; True if anything went out."""
        sent = False
        for key in list(self._outbox):
            queue = self._outbox[key]
            while queue:
                try:
                    self._send_now(queue[0])
                except zmq.Again:
                    break
                except zmq.ZMQError as e:  # peer vanished while queued: its calls fail by death/timeout
                    log.warning("dropping %d queued message(s) to %r: %s", len(queue), key, e)
                    queue.clear()
                    break
                queue.popleft()
                sent = True
            if not queue:
                del self._outbox[key]
        if self._outbox:
            self._schedule_retry()
        return sent

    # -- receiving -------------------------------------------------------------------------------
    def _recv(self) -> list:
        sock = self.sock
        # zero-copy receive tells "more parts follow" without a getsockopt(RCVMORE) per part
        frame = sock.recv(_NOBLOCK, False)
        frames = [frame.bytes]
        recv, n_copy = sock.recv, self.copy_frames
        while frame.more:
            frame = recv(0, False)
            frames.append(frame.bytes if len(frames) < n_copy else frame)
        return frames

    def drain(self) -> None:
        """Handle everything readable now (also used by the heartbeat monitor before it judges)."""
        self._drain()

    def _drain(self) -> None:
        self._drain_pending = False
        if self._closed:
            return
        handled = 0
        self._in_drain = True
        try:
            while True:
                events = self.sock.getsockopt(_EVENTS)
                progressed = bool(self._outbox) and bool(events & _POLLOUT) and self._flush()
                if events & _POLLIN:
                    try:
                        frames = self._recv()
                    except zmq.Again:
                        frames = None
                    if frames is not None:
                        progressed = True
                        handled += 1
                        try:
                            self.on_message(frames)
                        except Exception:  # a handler bug must never stop the socket
                            log.exception("error handling an incoming message")
                if not progressed:
                    return
                if handled >= _MAX_PER_DRAIN:
                    self._drain_pending = True
                    self.loop.call_soon(self._drain)
                    return
        except zmq.ZMQError as e:
            if not self._closed:
                log.error("socket error: %s", e)
        finally:
            self._in_drain = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        try:
            self.loop.remove_reader(self._fd)
        except Exception:
            pass
        self.sock.close(linger=0)
