"""``Inbox``: every frame that reaches the coordinator, decoded and handed on — replies to
``PendingCalls``, HELLO/READY to the ``Handshake``; heartbeat pings are answered here.

A malformed or unsolicited frame is counted by what was wrong and answered with REJECT (``Router.reject``), never
raised. Every frame from a peer that is no actor (no incarnation bound to its identity) is either a HELLO that
joins, or counted as rejected: so a stranger's frames add up.
"""
from __future__ import annotations

import logging
import time

import zmq

from rollart.actors import messages as m
from rollart.actors.calls import PendingCalls
from rollart.actors.errors import WireError
from rollart.actors.handshake import Handshake
from rollart.actors.heartbeat import HEARTBEAT_SUFFIX
from rollart.actors.record import LIVE_STATES
from rollart.actors.router import Router
from rollart.actors.table import ActorTable

log = logging.getLogger("rollart.actors")

_REPLIES = (m.Result, m.Item, m.End, m.Error)


class Inbox:
    def __init__(self, table: ActorTable, router: Router, calls: PendingCalls, handshake: Handshake):
        self._table = table
        self._router = router
        self._calls = calls
        self._handshake = handshake

    def on_frames(self, frames: list) -> None:
        identity = frames[0]
        try:
            msg = m.decode(frames[1:])
        except m.PayloadError as e:
            if not self._calls.on_undecodable_reply(identity, e):
                self._router.reject(identity, e.code, str(e))
            return
        except WireError as e:
            self._router.reject(identity, e.code, str(e))
            return
        kind = type(msg)
        rec = self._table.by_identity(identity)
        if rec is not None:
            rec.last_seen = time.monotonic()
        if kind in _REPLIES:
            if rec is None:  # an actor's late reply (to a call cancelled or timed out) is ignored, not counted
                self._router.reject(identity, "unsolicited_reply",
                                    f"{kind.__name__} for call {msg.call_id} from a peer that is no actor")
            else:
                self._calls.on_reply(rec, msg)
        elif kind is m.Ping:
            self._on_ping(identity, msg)
        elif kind is m.Hello:
            self._handshake.on_hello(identity, rec, msg)
        elif kind is m.Ready:
            self._handshake.on_ready(identity, rec, msg)
        elif kind is m.Reject:
            if rec is None:  # never answered: two peers must not trade REJECTs
                self._router.reject(identity, "stranger_reject", f"REJECT from a peer that is no actor: "
                                    f"{msg.reason[:200]}", reply=False)
            else:
                log.warning("actor %s rejected a message: %s", rec.name, msg.reason)
        else:
            self._router.reject(identity, "unexpected_kind",
                                f"unexpected {kind.__name__} message sent to the coordinator")

    def _on_ping(self, identity: bytes, msg: m.Ping) -> None:
        """Pings come from an actor's heartbeat socket, ``<actor identity>/hb``; the PONG says whether
        that actor is still known, so an actor declared dead exits instead of lingering."""
        main = identity[: -len(HEARTBEAT_SUFFIX)] if identity.endswith(HEARTBEAT_SUFFIX) else None
        rec = self._table.by_identity(main) if main else None
        known = rec is not None and rec.state in (*LIVE_STATES, "stopping")
        if known:
            rec.last_seen = time.monotonic()
        try:
            self._router.send(identity, m.Pong(msg.seq, known), best_effort=True)
        except zmq.ZMQError:
            pass
        if rec is None:  # no actor's heartbeat (or a replaced incarnation's): answered "unknown", counted
            self._router.reject(identity, "unknown_heartbeat", "PING from a peer that is no actor's heartbeat",
                                reply=False)
