"""ZeroMQ CURVE authentication for actors on other hosts.

Key directory layout, made by ``python tools/curve_keys.py DIR``::

    DIR/server.key  DIR/server.key_secret     the coordinator's keypair
    DIR/client.key  DIR/client.key_secret     a keypair for actors (copy DIR minus server.key_secret to them)
    DIR/authorized/*.key                      public keys of actors the coordinator accepts
    DIR/weights.key DIR/weights.key_secret    the keypair of every weight-plane server (rollart.weightplane)

The coordinator runs a ZAP authenticator that accepts only clients whose public key is in
``DIR/authorized``; the traffic is encrypted. Loopback endpoints need none of this. An actor process
started with ``--curve-dir`` finds its coordinator and key directory in ``COORDINATOR_VAR`` / ``CURVE_DIR_VAR``
(so the sockets it opens itself, e.g. the weight plane's, use the same keys).
"""
from __future__ import annotations

import ipaddress
import os
import socket
from typing import Callable

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

_authenticators: dict[int, ThreadAuthenticator] = {}

COORDINATOR_VAR = "ROLLART_COORDINATOR"
"""Set in an actor process: the coordinator endpoint it serves."""
CURVE_DIR_VAR = "ROLLART_CURVE_DIR"
"""Set in an actor process started with CURVE keys: their directory."""
SERVER_PAIRS = ("server", "weights")
"""Server keypairs of a run: the coordinator's, and the one weight-plane servers share (actors never get the
coordinator's secret)."""


def is_loopback(endpoint: str) -> bool:
    if endpoint.startswith(("inproc://", "ipc://")):
        return True
    host = endpoint.split("://", 1)[-1].rpartition(":")[0].strip("[]")
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except (OSError, ValueError):
            return False


def _require(path: str, what: str) -> str:
    if not os.path.exists(path):
        raise FileNotFoundError(f"CURVE {what} not found at {path}; make keys with `python tools/curve_keys.py DIR`")
    return path


def configure_server(sock: zmq.Socket, keys_dir: str, ctx: zmq.Context, pair: str = "server") -> None:
    """Make ``sock`` a CURVE server (keypair ``pair``) that accepts only the public keys in ``keys_dir/authorized``."""
    public, secret = zmq.auth.load_certificate(_require(os.path.join(keys_dir, f"{pair}.key_secret"),
                                                        f"{pair} secret key"))
    authorized = _require(os.path.join(keys_dir, "authorized"), "authorized-clients directory")
    auth = _authenticators.get(id(ctx))
    if auth is None:
        auth = ThreadAuthenticator(ctx)
        auth.start()
        _authenticators[id(ctx)] = auth
    auth.configure_curve(domain="*", location=authorized)
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)


def stop_authenticator(ctx: zmq.Context) -> None:
    auth = _authenticators.pop(id(ctx), None)
    if auth is not None:
        auth.stop()


def client_configurator(keys_dir: str, server: str = "server") -> Callable[[zmq.Socket], None]:
    """A function that makes a socket a CURVE client of the coordinator (or of the servers of keypair
    ``server``) whose keys are in ``keys_dir``."""
    server_public, _ = zmq.auth.load_certificate(_require(os.path.join(keys_dir, f"{server}.key"),
                                                          f"{server} public key"))
    public, secret = zmq.auth.load_certificate(_require(os.path.join(keys_dir, "client.key_secret"),
                                                        "client secret key"))

    def configure(sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.CURVE_SERVERKEY, server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, secret)

    return configure
