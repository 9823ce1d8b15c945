"""A ZeroMQ socket driven by the asyncio event loop without a task or future per message.

zmq exposes one edge-triggered file descriptor per socket: it becomes readable when the socket's
``EVENTS`` *may* have changed, and re-arms only after ``EVENTS`` is read. So every socket operation
must be followed by an ``EVENTS`` check before the loop waits on the fd again — done here after each
send and at the end of each drain. Incoming messages are handed to a plain callback (which resolves
futures or starts tasks); sends never block: when the peer's queue is full (zmq.Again) frames wait in
an outbox that the next drain flushes in order.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Callable

import zmq

log = logging.getLogger("rollart.actors")

_MAX_PER_DRAIN = 512  # messages handled before yielding to other loop callbacks


class AsyncSocket:
    def __init__(self, sock: zmq.Socket, on_message: Callable[[list], None], *, copy_frames: int,
                 loop: asyncio.AbstractEventLoop | None = None):
        """``copy_frames``: leading frames received as bytes (envelope, header, meta, payload); the rest
        arrive as zero-copy ``zmq.Frame`` objects."""
        self.sock = sock
        self.on_message = on_message
        self.copy_frames = copy_frames
        self.loop = loop or asyncio.get_running_loop()
        self._outbox: deque = deque()
        self._drain_pending = False
        self._closed = False
        self._fd = sock.FD
        self.loop.add_reader(self._fd, self._drain)

    # -- sending ---------------------------------------------------------------------------------
    def send(self, frames: list) -> None:
        """Queue-or-send one multipart message. Raises zmq.ZMQError (e.g. EHOSTUNREACH) at once."""
        if self._closed:
            raise zmq.ZMQError(zmq.ENOTSOCK, "socket closed")
        if self._outbox:
            self._outbox.append(frames)
        else:
            try:
                self.sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
            except zmq.Again:
                self._outbox.append(frames)
        if not self._drain_pending and (self._outbox or self.sock.EVENTS & zmq.POLLIN):
            self._drain_pending = True
            self.loop.call_soon(self._drain)

    def _flush(self) -> bool:
        sent = False
        while self._outbox:
            try:
                self.sock.send_multipart(self._outbox[0], zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            except zmq.ZMQError as e:  # peer vanished while queued: drop, the caller's timeout/death applies
                log.warning("dropping a queued message: %s", e)
            self._outbox.popleft()
            sent = True
        return sent

    # -- receiving -------------------------------------------------------------------------------
    def _recv(self) -> list:
        sock = self.sock
        frames = [sock.recv(zmq.NOBLOCK)]
        i = 1
        while sock.RCVMORE:
            frames.append(sock.recv(copy=i < self.copy_frames))
            i += 1
        return frames

    def drain(self) -> None:
        """Handle everything readable now (also used by the heartbeat monitor before it judges)."""
        self._drain()

    def _drain(self) -> None:
        self._drain_pending = False
        if self._closed:
            return
        handled = 0
        try:
            while True:
                events = self.sock.EVENTS
                progressed = bool(self._outbox) and bool(events & zmq.POLLOUT) and self._flush()
                if events & zmq.POLLIN:
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

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.loop.remove_reader(self._fd)
        except Exception:
            pass
        self.sock.close(linger=0)
