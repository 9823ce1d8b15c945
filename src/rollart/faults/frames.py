"""Malformed ZeroMQ frames, and a rogue peer that sends them to a live actor-system socket.

    python -m rollart.faults.frames tcp://127.0.0.1:PORT --count 10000 --seed 0

connects a DEALER to the coordinator's socket (the one every actor of the run talks to) and sends ``count``
multipart messages, each broken in one way: random bytes, an unknown kind or wire version, a right header over
a junk or mistyped body, a payload that does not decode, forged replies (RESULT, ERROR, ITEM, END) to call ids
the run may have in flight, stray buffer frames, messages only a coordinator sends (``--kind`` picks one of
``KINDS``). It prints ``sent N`` every 500, then ``kinds {"junk": n, ...}`` (how many of each kind went out) and
``done N`` at the end (``stuck N`` if the socket stopped taking frames for 30 s).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter

import msgpack

from rollart.actors import messages as m


KINDS = ("junk", "bad_header", "header_only_or_junk_body", "mistyped_body", "undecodable_payload",
         "forged_ext", "forged_reply", "mistyped_hello", "coordinator_message", "stray_buffer")
"""The ways :func:`malformed` breaks a message, in the order of its ``kind`` argument."""


def malformed(rng: random.Random, kind: int | None = None) -> list[bytes]:
    """One multipart message that no well-behaved peer sends, broken in way ``kind`` (an index of KINDS;
    drawn at random when None)."""
    def junk(n: int = 48) -> bytes:
        return rng.randbytes(rng.randint(0, n))

    header = bytes((rng.choice(list(m.Kind)), m.VERSION))
    kind = rng.randrange(len(KINDS)) if kind is None else kind
    if kind == 0:
        return [junk() for _ in range(rng.randint(1, 4))]
    if kind == 1:  # unknown kind, or a known kind at a wrong wire version
        return [bytes((rng.randint(16, 255), m.VERSION)), junk()] if rng.random() < 0.5 else \
            [bytes((rng.choice(list(m.Kind)), rng.randint(m.VERSION + 1, 255))), junk()]
    if kind == 2:  # a header with a junk body, or no body at all
        return [header, junk()] if rng.random() < 0.7 else [header]
    if kind == 3:  # a body of the wrong length and types
        return [header, msgpack.packb([rng.random(), "x", None, b"\x00", [1, 2]][:rng.randint(0, 5)])]
    if kind == 4:  # a forged RESULT / ITEM whose payload does not decode (a few junk payloads do, by chance)
        return [bytes((rng.choice([m.Kind.RESULT, m.Kind.ITEM]), m.VERSION)),
                msgpack.packb([rng.randint(1, 64), junk(64)])]
    if kind == 5:  # a forged ext type standing for a tensor with an impossible shape or buffer (or a tuple)
        ext = msgpack.ExtType(rng.choice([1, 2, 3, 4, 99]), msgpack.packb(["<f4", [rng.randint(-1, 10**9)], 7]))
        return [bytes((m.Kind.RESULT, m.VERSION)), msgpack.packb([rng.randint(1, 64), msgpack.packb(ext)])]
    if kind == 6:  # well-formed replies to call ids the run may have in flight, from a stranger
        return m.encode(rng.choice([m.Result(rng.randint(1, 64), "forged"), m.End(rng.randint(1, 64)),
                                    m.Error(rng.randint(1, 64), "RuntimeError", "forged"),
                                    m.Item(rng.randint(1, 64), "forged")]))
    if kind == 7:  # a HELLO with mistyped fields
        return [bytes((m.Kind.HELLO, m.VERSION)), msgpack.packb([rng.random(), 7, "pid", None, junk(8)])]
    if kind == 8:  # messages only a coordinator sends
        return m.encode(rng.choice([m.Init("x:Y", [], {}), m.Call(1, "train_step", False, [], {}),
                                    m.Stop("forged"), m.Pong(1, False), m.Cancel(1)]))
    return [*m.encode(m.Ping(rng.randint(0, 10**6))), junk(32)]  # a stray buffer frame after a valid message


def flood(endpoint: str, count: int, seed: int, stall_s: float = 30.0, kind: int | None = None) -> Counter:
    """Send ``count`` malformed messages to ``endpoint`` (all of one ``kind`` if given); returns how many of
    each kind went out."""
    import zmq

    rng = random.Random(seed)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDTIMEO, int(stall_s * 1000))  # a socket that stops taking frames: report, not hang
    sock.setsockopt(zmq.IDENTITY, b"rogue-" + rng.randbytes(4).hex().encode())
    sock.connect(endpoint)
    sent: Counter = Counter()
    stuck = False
    try:
        while sent.total() < count:
            pick = rng.randrange(len(KINDS)) if kind is None else kind
            try:
                sock.send_multipart(malformed(rng, pick))
            except zmq.Again:
                stuck = True
                break
            sent[KINDS[pick]] += 1
            if sent.total() % 500 == 0:
                print(f"sent {sent.total()}", flush=True)
    finally:  # "sent" means delivered: let the frames still queued here go out (linger 0 would drop them)
        sock.close(linger=int(stall_s * 1000))
        ctx.term()
    print(f"kinds {json.dumps(dict(sent))}\n{'stuck' if stuck else 'done'} {sent.total()}", flush=True)
    return sent


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("endpoint", help="tcp://host:port of a coordinator socket")
    p.add_argument("--count", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kind", choices=KINDS, help="send only frames broken this way (default: every way, at random)")
    a = p.parse_args(argv)
    if not a.endpoint.startswith("tcp://") or a.count < 1:
        raise SystemExit("error: give a tcp://host:port endpoint and --count >= 1")
    flood(a.endpoint, a.count, a.seed, kind=KINDS.index(a.kind) if a.kind else None)


if __name__ == "__main__":
    main(sys.argv[1:])
