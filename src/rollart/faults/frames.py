"""Malformed ZeroMQ frames, and a rogue peer that sends them to a live actor-system socket.

    python -m rollart.faults.frames tcp://127.0.0.1:PORT --count 10000 --seed 0

connects a DEALER to the coordinator's socket (the one every actor of the run talks to) and sends ``count``
multipart messages, each broken in one way: random bytes, an unknown kind or wire version, a right header over
a junk or mistyped body, a payload that does not decode, forged replies (RESULT, ERROR, ITEM, END) to call ids
the run may have in flight, stray buffer frames, messages only a coordinator sends. It prints ``sent N`` every
500 and ``done N`` at the end (``stuck N`` if the socket stopped taking frames for 30 s).
"""
from __future__ import annotations

import argparse
import random
import sys

import msgpack

from rollart.actors import messages as m


def malformed(rng: random.Random) -> list[bytes]:
    """One multipart message that no well-behaved peer sends."""
    def junk(n: int = 48) -> bytes:
        return rng.randbytes(rng.randint(0, n))

    header = bytes((rng.choice(list(m.Kind)), m.VERSION))
    kind = rng.randrange(10)
    if kind == 0:
        return [junk() for _ in range(rng.randint(1, 4))]
    if kind == 1:  # unknown kind, or a known kind at a wrong wire version
        return [bytes((rng.randint(16, 255), m.VERSION)), junk()] if rng.random() < 0.5 else \
            [bytes((rng.choice(list(m.Kind)), rng.randint(m.VERSION + 1, 255))), junk()]
    if kind == 2:  # a header with a junk body, or no body at all
        return [header, junk()] if rng.random() < 0.7 else [header]
    if kind == 3:  # a body of the wrong length and types
        return [header, msgpack.packb([rng.random(), "x", None, b"\x00", [1, 2]][:rng.randint(0, 5)])]
    if kind == 4:  # a forged RESULT / ITEM whose payload does not decode
        return [bytes((rng.choice([m.Kind.RESULT, m.Kind.ITEM]), m.VERSION)),
                msgpack.packb([rng.randint(1, 64), junk(64)])]
    if kind == 5:  # a forged ext type standing for a tensor with an impossible shape or buffer
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


def flood(endpoint: str, count: int, seed: int, stall_s: float = 30.0) -> int:
    """Send ``count`` malformed messages to ``endpoint``; returns how many went out."""
    import zmq

    rng = random.Random(seed)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDTIMEO, int(stall_s * 1000))  # a socket that stops taking frames: report, not hang
    sock.setsockopt(zmq.IDENTITY, b"rogue-" + rng.randbytes(4).hex().encode())
    sock.connect(endpoint)
    sent = 0
    try:
        while sent < count:
            try:
                sock.send_multipart(malformed(rng))
            except zmq.Again:
                print(f"stuck {sent}", flush=True)
                return sent
            sent += 1
            if sent % 500 == 0:
                print(f"sent {sent}", flush=True)
        print(f"done {sent}", flush=True)
        return sent
    finally:
        sock.close(linger=0)
        ctx.term()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("endpoint", help="tcp://host:port of a coordinator socket")
    p.add_argument("--count", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if not a.endpoint.startswith("tcp://") or a.count < 1:
        raise SystemExit("error: give a tcp://host:port endpoint and --count >= 1")
    flood(a.endpoint, a.count, a.seed)


if __name__ == "__main__":
    main(sys.argv[1:])
