"""``Router``: the coordinator's one ROUTER socket, bound on a TCP endpoint for actor processes and on
an inproc endpoint for in-process actors. Sends typed messages to a peer identity, hands every incoming
multipart message to one callback, and answers malformed or unsolicited frames with REJECT.
"""
from __future__ import annotations

import asyncio
import logging
import secrets
from collections import Counter
from typing import Any, Callable

import zmq

from rollart.actors import messages as m
from rollart.actors.zsock import AsyncSocket

log = logging.getLogger("rollart.actors")


class Router:
    def __init__(self, bind: str, curve_dir: str | None, insecure: bool):
        self.bind = bind
        self.curve_dir = curve_dir
        self.insecure = insecure
        self.endpoint = ""
        """The bound TCP endpoint, e.g. ``tcp://127.0.0.1:41234`` (after open)."""
        self.inproc = f"inproc://rollart-{secrets.token_hex(6)}"
        self.rejected = 0
        """Frames rejected as malformed or unsolicited."""
        self.rejections: Counter[str] = Counter()
        """The rejected frames by what was wrong (a WireError's ``code``, ``unsolicited_reply``, ...)."""
        self._asock: AsyncSocket | None = None

    @property
    def is_open(self) -> bool:
        return self._asock is not None

    def open(self, ctx: zmq.Context, on_frames: Callable[[list], None], loop: asyncio.AbstractEventLoop) -> None:
        from rollart.actors.curve import configure_server, is_loopback  # zmq.auth: only where a router opens

        sock = ctx.socket(zmq.ROUTER)
        try:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer is an error, not a silent drop
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a peer that reconnects under its identity takes it over
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 100_000)
            sock.setsockopt(zmq.RCVHWM, 100_000)
            if self.curve_dir:
                configure_server(sock, self.curve_dir, ctx)
            elif not is_loopback(self.bind) and not self.insecure:
                raise ValueError(f"binding {self.bind} exposes actors beyond this host: pass curve_dir=DIR "
                                 "(make keys with `python tools/curve_keys.py DIR`) or insecure=True")
            sock.bind(self.bind)
            self.endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
            sock.bind(self.inproc)
        except BaseException:
            sock.close(linger=0)  # else terminating the context would wait for it forever
            raise
        self._asock = AsyncSocket(sock, on_frames, copy_frames=3, loop=loop)

    def send(self, identity: bytes, msg: Any, best_effort: bool = False) -> None:
        """Raises WireError for an unsendable payload, zmq.ZMQError for an unreachable peer."""
        frames = m.encode(msg)
        frames.insert(0, identity)
        self._asock.send(frames, key=identity, best_effort=best_effort)

    def reject(self, identity: bytes, code: str, reason: str, reply: bool = True) -> None:
        """Count a bad frame under ``code`` and, with ``reply``, tell its sender ``reason`` in a REJECT (best
        effort: a flooding peer is not waited for). No reply where the sender got another answer already, or
        where the frame was itself a REJECT."""
        self.rejected += 1
        self.rejections[code] += 1
        if self.rejected <= 10 or self.rejected % 1000 == 0:
            log.warning("rejected a frame from %r (%d so far): %s", identity[:64], self.rejected, reason)
        if not reply:
            return
        try:
            self.send(identity, m.Reject(reason[:500]), best_effort=True)
        except zmq.ZMQError:
            pass

    def drain(self) -> None:
        """Handle every frame that has arrived, now (before judging an actor on its silence)."""
        if self._asock is not None:
            self._asock.drain()

    def close(self) -> None:
        if self._asock is not None:
            self._asock.close()
