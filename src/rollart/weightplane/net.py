"""PlaneNet: where the weight plane's sockets bind and how they are secured — taken from the actor system.

There is no setting of its own to keep in step: an actor process knows its coordinator's endpoint and its
CURVE key directory (``rollart.actors.curve.COORDINATOR_VAR`` / ``CURVE_DIR_VAR``, set by
``python -m rollart.actors.serve``). A coordinator on loopback means one machine: bind 127.0.0.1, plain
TCP. Otherwise bind this node's IP on the route to the coordinator (what other nodes reach it by) and use
CURVE with the run's keys, as the actor runtime does: servers the ``weights`` keypair and the run's
authorized clients, clients their client keypair and the weight servers' public key.
"""
from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

import zmq
import zmq.asyncio

from rollart.actors.curve import (COORDINATOR_VAR, CURVE_DIR_VAR, client_configurator, configure_server,
                                  is_loopback)

LOOPBACK = "127.0.0.1"
PAIR = "weights"
"""The CURVE keypair weight-plane servers use (in the run's key directory)."""


@dataclass(frozen=True)
class PlaneNet:
    host: str = LOOPBACK
    """IP the weight plane's servers bind and advertise."""
    curve_dir: str | None = None
    """The run's CURVE key directory; required when ``host`` is not loopback."""

    def __post_init__(self) -> None:
        if self.curve_dir is None and not is_loopback(f"tcp://{self.host}:0"):
            raise ValueError(f"the weight plane on {self.host} would serve weights beyond this host unencrypted: "
                             "give it the run's CURVE key directory (made by `python tools/curve_keys.py DIR`)")

    @property
    def bind(self) -> str:
        return f"tcp://{self.host}:0"

    def secure_server(self, sock: zmq.Socket, ctx: zmq.Context, bind: str) -> None:
        """Make ``sock`` (about to bind ``bind``) a CURVE server unless ``bind`` is loopback."""
        if self.curve_dir and not is_loopback(bind):
            configure_server(sock, self.curve_dir, _sync(ctx), pair=PAIR)

    def secure_client(self, sock: zmq.Socket, address: str) -> None:
        """Make ``sock`` (about to connect to ``address``) a CURVE client unless ``address`` is loopback."""
        if self.curve_dir and not is_loopback(address):
            client_configurator(self.curve_dir, server=PAIR)(sock)


def route_ip(endpoint: str) -> str:
    """This machine's IP on the route to ``endpoint``'s host (no packet is sent)."""
    host = endpoint.split("://", 1)[-1].rpartition(":")[0].strip("[]")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))
        return s.getsockname()[0]


def plane_net() -> PlaneNet:
    """This process's PlaneNet, from its actor runtime (loopback and plain outside an actor process)."""
    endpoint = os.environ.get(COORDINATOR_VAR, "")
    if not endpoint or is_loopback(endpoint):
        return PlaneNet()
    curve_dir = os.environ.get(CURVE_DIR_VAR) or None
    if curve_dir is None:  # an insecure coordinator (ActorSystem(insecure=True)): the plane stays on this host
        return PlaneNet()
    return PlaneNet(route_ip(endpoint), curve_dir)


_shadows: dict[int, zmq.Context] = {}
_lock = threading.Lock()


def _sync(ctx: zmq.Context) -> zmq.Context:
    """A plain (blocking) view of ``ctx`` for the ZAP authenticator's thread, one per context."""
    if not isinstance(ctx, zmq.asyncio.Context):
        return ctx
    with _lock:
        if id(ctx) not in _shadows:
            _shadows[id(ctx)] = zmq.Context.shadow(ctx.underlying)
        return _shadows[id(ctx)]
