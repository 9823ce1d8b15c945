"""The weight plane's wire, declared once: a request a DEALER sends a BucketServer, and the reply.

    request  [b"rw1", kind, msgpack([req_id, *args])]
    reply    [b"rw1", kind, msgpack([req_id, payload])] (+ [bucket bytes] for BUCKET, sent zero-copy)

(a ROUTER prepends the peer's identity to what it receives and strips it from what it sends). A malformed
message parses to None: the server ignores it, the client lets the request it might answer time out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

PROTO = b"rw1"


class Kind:
    """What a request asks for (the reply answers with the same kind, or ERROR)."""
    MANIFEST = b"M"
    """args: version -> the version's manifest (its buckets' sizes and tensor layout)."""
    BUCKET = b"B"
    """args: version, index -> {"version", "index", "nbytes", "crc"} and the bucket as one more frame."""
    LATEST = b"L"
    """no args -> {"version": the newest complete version, or -1}."""
    IPC = b"I"
    """args: version -> CUDA IPC descriptors of the version's device buckets (same node only)."""
    ERROR = b"E"
    """reply only: the version is not held, failed upstream, or the request was bad."""


@dataclass
class Request:
    peer: bytes
    """The ROUTER's identity of the asking DEALER (where the reply goes)."""
    kind: bytes
    req_id: Any
    args: list

    @classmethod
    def parse(cls, frames: list[bytes]) -> Request | None:
        if len(frames) != 4 or frames[1] != PROTO:
            return None
        try:
            body = msgpack.unpackb(frames[3], raw=False)
        except Exception:  # noqa: BLE001 - any undecodable body is malformed
            return None
        if not isinstance(body, list) or not body:
            return None
        return cls(frames[0], frames[2], body[0], body[1:])


@dataclass
class Reply:
    kind: bytes
    req_id: Any
    payload: Any
    data: Any = None
    """The bucket's bytes (BUCKET replies)."""

    @classmethod
    def parse(cls, frames: list[Any]) -> Reply | None:
        """From a DEALER's frames (``zmq.Frame`` objects, received without copying)."""
        if len(frames) < 3 or frames[0].bytes != PROTO:
            return None
        try:
            req_id, payload = msgpack.unpackb(frames[2].bytes, raw=False)
        except Exception:  # noqa: BLE001 - a garbled reply is as good as a lost one
            return None
        return cls(frames[1].bytes, req_id, payload, frames[3] if len(frames) > 3 else None)


def request_frames(kind: bytes, req_id: int, args: tuple) -> list[bytes]:
    return [PROTO, kind, msgpack.packb([req_id, *args], use_bin_type=True)]


def reply_frames(peer: bytes, reply: Reply) -> list[Any]:
    frames = [peer, PROTO, reply.kind, msgpack.packb([reply.req_id, reply.payload], use_bin_type=True)]
    return frames if reply.data is None else [*frames, reply.data]
