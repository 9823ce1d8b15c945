"""Actor-side heartbeat thread: pings the coordinator on its own socket, exits if it is gone.

It runs in a thread with its own DEALER socket (identity ``<actor identity>/hb``) so that a method
holding the actor's event loop (a long engine step, a sync training step) never delays a heartbeat:
heartbeats say "this process is alive", not "this process is idle".

If the coordinator stops answering for ``coordinator_timeout`` seconds, or answers that it no longer
knows this actor (it was declared dead and replaced), the process exits so no orphan keeps running.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

import zmq

from rollart.actors import messages as m
from rollart.actors.errors import WireError
from rollart.actors.zsock import connect_dealer

log = logging.getLogger("rollart.actors")

HEARTBEAT_SUFFIX = b"/hb"


class HeartbeatThread(threading.Thread):
    def __init__(self, ctx: zmq.Context, endpoint: str, identity: bytes, interval: float,
                 coordinator_timeout: float, configure_socket: Callable[[zmq.Socket], None] | None = None,
                 on_lost: Callable[[str], None] | None = None):
        super().__init__(name="rollart-heartbeat", daemon=True)
        self.ctx = ctx
        self.endpoint = endpoint
        self.identity = identity + HEARTBEAT_SUFFIX
        self.interval = interval
        self.coordinator_timeout = coordinator_timeout
        self.configure_socket = configure_socket
        self.on_lost = on_lost or _exit_process
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        sock = connect_dealer(self.ctx, self.endpoint, self.identity, self.configure_socket)
        seq = 0
        last_reply = time.monotonic()
        try:
            while not self._stop_event.is_set():
                sock.send_multipart(m.encode(m.Ping(seq)))
                seq += 1
                deadline = time.monotonic() + self.interval
                while (left := deadline - time.monotonic()) > 0 and not self._stop_event.is_set():
                    if not sock.poll(int(left * 1000) + 1):
                        continue
                    try:
                        msg = m.decode(sock.recv_multipart())
                    except WireError as e:
                        log.warning("heartbeat: bad frame from coordinator: %s", e)
                        continue
                    if isinstance(msg, m.Pong):
                        if not msg.known:
                            self.on_lost("the coordinator no longer knows this actor (declared dead or stopped)")
                            return
                        last_reply = time.monotonic()
                if time.monotonic() - last_reply > self.coordinator_timeout:
                    self.on_lost(f"no heartbeat reply from the coordinator for {self.coordinator_timeout:g} s")
                    return
        finally:
            sock.close(linger=0)


def _exit_process(reason: str) -> None:
    log.error("actor process %d exiting: %s", os.getpid(), reason)
    os._exit(75)
