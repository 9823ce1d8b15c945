"""Every message that crosses an actor socket, declared once.

Frames of one message (a ROUTER prepends/strips the peer identity)::

    frame 0   header   2 bytes: message kind, wire version
    frame 1   body     msgpack array: the kind's meta fields (ids, names, flags — plain types), then,
                       for kinds that carry user values, the payload as one msgpack ``bin``
    frame 2+  buffers  raw bytes of numpy arrays / torch tensors, sent zero-copy

The payload is packed separately (and nested as bytes) so that a payload that fails to decode — say,
a dataclass the receiver does not allow — is still attributable to its call id and answered with an
error, not dropped. Two frames per small message, like a bare DEALER/ROUTER echo, keep the hot path
short. Decoding validates the header, the body's field count and types; anything else raises
``WireError`` with what was wrong. No pickle anywhere. How user values inside a payload are encoded
(msgpack ext codes for arrays, tensors, tuples and allowed dataclasses) is declared in ``codec.py``.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

import msgpack

from rollart.actors.codec import pack_value, unpack_value
from rollart.actors.errors import WireError

VERSION = 2
"""Wire version in header byte 1. Bump when a meta layout changes or a kind is added; peers reject other
versions (2: SEND)."""

STREAM_WINDOW = 64
"""Stream ITEMs an actor may send ahead of the caller's consumption; the caller returns CREDIT for them."""


class Kind(IntEnum):
    HELLO = 1    # actor -> coordinator: who I am (first message on a connection)
    INIT = 2     # coordinator -> actor: constructor arguments
    READY = 3    # actor -> coordinator: constructed, on_start() done; or failed
    CALL = 4     # coordinator -> actor: invoke a method (or open a stream)
    RESULT = 5   # actor -> coordinator: the return value of a call
    ERROR = 6    # actor -> coordinator: the call raised / was rejected
    ITEM = 7     # actor -> coordinator: one item of a stream
    END = 8      # actor -> coordinator: the stream finished
    CANCEL = 9   # coordinator -> actor: cancel a call or stream (idempotent)
    CREDIT = 10  # coordinator -> actor: the caller consumed n stream items (flow control)
    PING = 11    # actor heartbeat socket -> coordinator
    PONG = 12    # coordinator -> actor heartbeat socket
    STOP = 13    # coordinator -> actor: run on_stop() and exit
    REJECT = 14  # either way: an unsolicited frame was malformed and dropped (for the sender's log)
    SEND = 15    # coordinator -> actor: a typed request message, run by the method that handles its class


@dataclass(slots=True)
class Hello:
    KIND: ClassVar[Kind] = Kind.HELLO
    META: ClassVar[tuple] = (("name", str), ("cls", str), ("pid", int), ("host", str))
    PAYLOAD: ClassVar[tuple] = ("args", "kwargs")
    name: str
    cls: str
    pid: int
    host: str
    args: list = dataclasses.field(default_factory=list)
    """Constructor args a joining (remote) actor offers; ignored for actors the coordinator spawned."""
    kwargs: dict = dataclasses.field(default_factory=dict)


@dataclass(slots=True)
class Init:
    KIND: ClassVar[Kind] = Kind.INIT
    META: ClassVar[tuple] = (("cls", str),)
    PAYLOAD: ClassVar[tuple] = ("args", "kwargs")
    cls: str
    args: list = dataclasses.field(default_factory=list)
    kwargs: dict = dataclasses.field(default_factory=dict)


@dataclass(slots=True)
class Ready:
    KIND: ClassVar[Kind] = Kind.READY
    META: ClassVar[tuple] = (("ok", bool), ("methods", list), ("error_type", str), ("error", str),
                             ("traceback", str))
    PAYLOAD: ClassVar[tuple] = ()
    ok: bool
    methods: list
    error_type: str = ""
    error: str = ""
    traceback: str = ""


@dataclass(slots=True)
class Call:
    KIND: ClassVar[Kind] = Kind.CALL
    META: ClassVar[tuple] = (("call_id", int), ("method", str), ("stream", bool))
    PAYLOAD: ClassVar[tuple] = ("args", "kwargs")
    call_id: int
    method: str
    stream: bool
    args: list = dataclasses.field(default_factory=list)
    kwargs: dict = dataclasses.field(default_factory=dict)


@dataclass(slots=True)
class Send:
    """Answered like a CALL (RESULT or ERROR, CANCEL applies); the payload is one wire dataclass."""
    KIND: ClassVar[Kind] = Kind.SEND
    META: ClassVar[tuple] = (("call_id", int),)
    PAYLOAD: ClassVar[tuple] = ("value",)
    call_id: int
    value: Any = None


@dataclass(slots=True)
class Result:
    KIND: ClassVar[Kind] = Kind.RESULT
    META: ClassVar[tuple] = (("call_id", int),)
    PAYLOAD: ClassVar[tuple] = ("value",)
    call_id: int
    value: Any = None


@dataclass(slots=True)
class Error:
    KIND: ClassVar[Kind] = Kind.ERROR
    META: ClassVar[tuple] = (("call_id", int), ("type", str), ("message", str), ("traceback", str),
                             ("mro", list))
    PAYLOAD: ClassVar[tuple] = ()
    call_id: int
    type: str
    message: str
    traceback: str = ""
    mro: list = dataclasses.field(default_factory=list)


@dataclass(slots=True)
class Item:
    KIND: ClassVar[Kind] = Kind.ITEM
    META: ClassVar[tuple] = (("call_id", int),)
    PAYLOAD: ClassVar[tuple] = ("value",)
    call_id: int
    value: Any = None


@dataclass(slots=True)
class End:
    KIND: ClassVar[Kind] = Kind.END
    META: ClassVar[tuple] = (("call_id", int),)
    PAYLOAD: ClassVar[tuple] = ()
    call_id: int


@dataclass(slots=True)
class Cancel:
    KIND: ClassVar[Kind] = Kind.CANCEL
    META: ClassVar[tuple] = (("call_id", int),)
    PAYLOAD: ClassVar[tuple] = ()
    call_id: int


@dataclass(slots=True)
class Credit:
    KIND: ClassVar[Kind] = Kind.CREDIT
    META: ClassVar[tuple] = (("call_id", int), ("n", int))
    PAYLOAD: ClassVar[tuple] = ()
    call_id: int
    n: int


@dataclass(slots=True)
class Ping:
    KIND: ClassVar[Kind] = Kind.PING
    META: ClassVar[tuple] = (("seq", int),)
    PAYLOAD: ClassVar[tuple] = ()
    seq: int


@dataclass(slots=True)
class Pong:
    KIND: ClassVar[Kind] = Kind.PONG
    META: ClassVar[tuple] = (("seq", int), ("known", bool))
    PAYLOAD: ClassVar[tuple] = ()
    seq: int
    known: bool
    """False: the coordinator does not know this actor (any more); the actor process should exit."""


@dataclass(slots=True)
class Stop:
    KIND: ClassVar[Kind] = Kind.STOP
    META: ClassVar[tuple] = (("reason", str),)
    PAYLOAD: ClassVar[tuple] = ()
    reason: str


@dataclass(slots=True)
class Reject:
    KIND: ClassVar[Kind] = Kind.REJECT
    META: ClassVar[tuple] = (("reason", str),)
    PAYLOAD: ClassVar[tuple] = ()
    reason: str


MESSAGE_TYPES: dict[int, type] = {cls.KIND: cls for cls in
                                  (Hello, Init, Ready, Call, Send, Result, Error, Item, End, Cancel,
                                   Credit, Ping, Pong, Stop, Reject)}
_EMPTY = b""
_NO_FRAMES: list = []
_BY_HEADER: dict[bytes, type] = {}
for _cls in MESSAGE_TYPES.values():
    _cls.HEADER = bytes((_cls.KIND, VERSION))
    _cls.META_NAMES = tuple(name for name, _ in _cls.META)
    _cls.META_TYPES = tuple(tp for _, tp in _cls.META)
    _cls.HAS_ARGS = "args" in _cls.PAYLOAD
    _cls.BODY_LEN = len(_cls.META) + (1 if _cls.PAYLOAD else 0)
    _BY_HEADER[_cls.HEADER] = _cls


class PayloadError(WireError):
    """The header and meta decoded but the payload did not; ``message`` has its meta fields set."""

    def __init__(self, message: Any, reason: str):
        super().__init__(reason, code="bad_payload")
        self.message = message


def encode(msg: Any) -> list:
    """Message -> frames ``[header, body, *buffers]``. Raises WireError for unsendable values."""
    cls = type(msg)
    fields = [getattr(msg, name) for name in cls.META_NAMES]
    if not cls.PAYLOAD:
        return [cls.HEADER, _packb(fields)]
    if len(cls.PAYLOAD) == 1:
        payload, buffers = pack_value(getattr(msg, cls.PAYLOAD[0]))
    else:
        payload, buffers = pack_value([getattr(msg, name) for name in cls.PAYLOAD])
    fields.append(payload)
    if buffers:
        return [cls.HEADER, _packb(fields), *buffers]
    return [cls.HEADER, _packb(fields)]


_meta_local = threading.local()


def _packb(obj: Any) -> bytes:
    """Meta fields are plain types: a reused per-thread Packer (much cheaper than packb)."""
    packer = getattr(_meta_local, "packer", None)
    if packer is None:
        packer = _meta_local.packer = msgpack.Packer(use_bin_type=True)
    try:
        return packer.pack(obj)
    except BaseException:
        packer.reset()
        raise


def _frame_bytes(frame: Any) -> bytes:
    return frame.bytes if hasattr(frame, "bytes") else bytes(frame)


def _bad_header(header: bytes) -> None:
    if len(header) != 2:
        raise WireError(f"header frame must be 2 bytes (kind, version), got {len(header)} bytes", code="bad_header")
    kind, version = header[0], header[1]
    if version != VERSION:
        raise WireError(f"wire version {version} not supported (this side speaks version {VERSION}); "
                        "run the same rollart version on both ends", code="wire_version")
    raise WireError(f"unknown message kind {kind}; known: {sorted(int(k) for k in MESSAGE_TYPES)}",
                    code="unknown_kind")


def decode(frames: list) -> Any:
    """Frames (bytes or zmq.Frame) -> message. Raises WireError naming what was malformed."""
    if len(frames) < 2:
        raise WireError(f"expected >= 2 frames (header, body), got {len(frames)}", code="too_few_frames")
    header = frames[0] if type(frames[0]) is bytes else _frame_bytes(frames[0])
    cls = _BY_HEADER.get(header)
    if cls is None:
        _bad_header(header)
    try:
        body = msgpack.unpackb(frames[1] if type(frames[1]) is bytes else _frame_bytes(frames[1]), raw=False)
    except Exception as e:
        raise WireError(f"{cls.__name__}: body frame is not valid msgpack ({type(e).__name__}: {e})",
                        code="bad_body") from None
    if type(body) is not list or len(body) != cls.BODY_LEN:
        raise WireError(f"{cls.__name__}: body must be a list of {cls.BODY_LEN} fields "
                        f"{list(cls.META_NAMES) + (['payload'] if cls.PAYLOAD else [])}, "
                        f"got {type(body).__name__} {str(body)[:80]}", code="bad_body")
    meta = body[:-1] if cls.PAYLOAD else body
    if tuple(map(type, meta)) != cls.META_TYPES:  # msgpack yields exact types; keeps bool out of int fields
        for i, (value, tp) in enumerate(zip(meta, cls.META_TYPES)):
            if type(value) is not tp:
                raise WireError(f"{cls.__name__}.{cls.META_NAMES[i]} must be {tp.__name__}, "
                                f"got {type(value).__name__}", code="mistyped_field")
    msg = cls(*meta)
    if cls.PAYLOAD:
        payload = body[-1]
        if type(payload) is not bytes:
            raise PayloadError(msg, f"{cls.__name__} payload must be msgpack bin, got {type(payload).__name__}")
        try:
            values = unpack_value(payload, frames[2:] if len(frames) > 2 else _NO_FRAMES)
        except WireError as e:
            raise PayloadError(msg, f"{cls.__name__} payload: {e}") from None
        except Exception as e:
            raise PayloadError(msg, f"{cls.__name__} payload is not valid msgpack "
                                    f"({type(e).__name__}: {e})") from None
        if len(cls.PAYLOAD) == 1:
            setattr(msg, cls.PAYLOAD[0], values)
        else:
            if not isinstance(values, list) or len(values) != len(cls.PAYLOAD):
                raise PayloadError(msg, f"{cls.__name__} payload must be a list {list(cls.PAYLOAD)}")
            for name, value in zip(cls.PAYLOAD, values):
                setattr(msg, name, value)
            if cls.HAS_ARGS and not (type(msg.args) is list and type(msg.kwargs) is dict
                                     and (not msg.kwargs or all(type(k) is str for k in msg.kwargs))):
                raise PayloadError(msg, f"{cls.__name__}: args must be a list and kwargs a dict with str keys")
    elif len(frames) > 2:
        raise WireError(f"{cls.__name__} carries no payload but {len(frames) - 2} extra frames came with it",
                        code="extra_frames")
    return msg
