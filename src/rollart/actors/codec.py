"""Payload values on the wire: msgpack plus zero-copy buffers, never pickle.

Supported values: None, bool, int, float, str, bytes, list, tuple (kept a tuple), dict (any msgpack
key), numpy arrays and scalars, torch tensors (any strided dtype incl. bfloat16; CPU copies of
device tensors), and dataclasses.

Arrays/tensors of at least ``INLINE_LIMIT`` bytes travel as separate frames, sent and received
without copying; the decoded array/tensor is a writable view of the received frame. Smaller ones are
inlined (copied) — cheaper than an extra frame. ``bytes`` are always inlined: send bulk data as a
numpy array or tensor.

Dataclass rule (the only way a class is constructed from wire data): a dataclass is encoded by field
with its ``module:QualName`` path and decoded only if its class is

1. registered with :func:`wire_dataclass` in the receiving process, or
2. defined in a module under an allowed prefix, in which case the receiver imports that module. Only
   ``rollart.`` is allowed by default: the library knows no package that uses it. A package whose
   dataclasses cross the wire allows its own prefix once, at import, with
   ``rollart.actors.allow_dataclass_modules("mypackage")`` — in its ``__init__``, so that every process
   that imports any of its modules (an actor built from one, a coordinator that names one) allows it.

Decoding calls the class constructor with the init fields, so ``__post_init__`` validation runs.
"""
from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Any

import msgpack
import numpy as np

from rollart.actors.errors import WireError
from rollart.loader import LoadError, load

INLINE_LIMIT = 1024

# msgpack ext type codes (part of the wire format; see messages.VERSION)
EXT_NDARRAY = 1    # [dtype str, shape, frame index | inline bytes]
EXT_TENSOR = 2     # [torch dtype name, shape, frame index | inline bytes]
EXT_DATACLASS = 3  # [path "module:QualName", {field: value}]
EXT_TUPLE = 4      # packed list

_local = threading.local()
_registered: dict[str, type] = {}
_allowed_prefixes: list[str] = ["rollart"]


def wire_dataclass(cls: type) -> type:
    """Class decorator: allow this dataclass to be decoded from the wire (wherever it lives)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"@wire_dataclass expects a dataclass, got {cls!r}")
    _registered[_path(cls)] = cls
    return cls


def allow_dataclass_modules(*prefixes: str) -> None:
    """Allow dataclasses from modules under these prefixes (e.g. ``"envs"`` allows ``envs.swe.task``) to
    be encoded and decoded in this process. Idempotent; call it where the package is imported."""
    for p in prefixes:
        p = p.rstrip(".") if isinstance(p, str) else p
        if not isinstance(p, str) or not p or ":" in p:
            raise ValueError(f"allow_dataclass_modules expects module prefixes like 'mypackage', got {p!r}")
        if p not in _allowed_prefixes:
            _allowed_prefixes.append(p)


def allowed_dataclass_modules() -> tuple[str, ...]:
    """The module prefixes whose dataclasses may cross the wire in this process."""
    return tuple(_allowed_prefixes)


def wire_allowed(cls: type) -> bool:
    """Whether instances of the dataclass ``cls`` may be sent from (and decoded in) this process."""
    return _path(cls) in _registered or _module_allowed(cls.__module__)


def _path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _module_allowed(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in _allowed_prefixes)


def _rule() -> str:
    return (f"register it with @rollart.actors.wire_dataclass in a module both sides import, or define it "
            f"under an allowed module prefix {[p + '.' for p in _allowed_prefixes]}")


def _resolve_dataclass(path: str) -> type:
    cls = _registered.get(path)
    if cls is not None:
        return cls
    module, _, qualname = path.partition(":")
    if not module or not qualname or not _module_allowed(module):
        raise WireError(f"dataclass {path!r} is not allowed on the wire: {_rule()}")
    try:
        obj = load(path, "wire dataclass")
    except LoadError as e:
        raise WireError(str(e)) from None
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise WireError(f"{path!r} is not a dataclass; only dataclasses are decoded from the wire")
    return obj


class _Packer:
    """Encodes values, collecting out-of-band buffers while msgpack walks them.

    One per thread (msgpack Packers are reused — building one costs more than packing a small
    message — and are not thread-safe). Values nested inside an ext (tuples, dataclasses, array
    headers) are packed by a fresh packb, since the reused Packer is busy with the outer value.
    """

    def __init__(self) -> None:
        self.buffers: list = []
        self._packer = msgpack.Packer(default=self.default, use_bin_type=True, strict_types=True)

    def _frame(self, buf: Any) -> int:
        self.buffers.append(buf)
        return len(self.buffers) - 1

    def pack_top(self, obj: Any) -> tuple[bytes, list]:
        self.buffers = []
        try:
            return self._packer.pack(obj), self.buffers
        except BaseException:
            self._packer.reset()
            raise

    def pack(self, obj: Any) -> bytes:
        return msgpack.packb(obj, default=self.default, use_bin_type=True, strict_types=True)

    def default(self, obj: Any) -> Any:
        tp = type(obj)
        if tp is tuple:
            return msgpack.ExtType(EXT_TUPLE, self.pack(list(obj)))
        if tp is np.ndarray:
            return self._ndarray(obj)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return self._tensor(obj, torch)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return self._dataclass(obj)
        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj)
        # subclasses of plain types (IntEnum, OrderedDict, defaultdict, str enums, namedtuple)
        for base in (bool, int, float, str, dict, list):
            if isinstance(obj, base):
                return base(obj)
        if isinstance(obj, tuple):
            return msgpack.ExtType(EXT_TUPLE, self.pack(list(obj)))
        if isinstance(obj, np.ndarray):
            return self._ndarray(np.asarray(obj))
        raise WireError(f"cannot send a {tp.__module__}.{tp.__qualname__} to/from an actor: supported "
                        "are None/bool/int/float/str/bytes/list/tuple/dict, numpy arrays, torch tensors "
                        "and allowed dataclasses (convert it to one of these)")

    def _ndarray(self, arr: np.ndarray) -> msgpack.ExtType:
        if arr.dtype.hasobject or arr.dtype.fields is not None:
            raise WireError(f"numpy arrays of dtype {arr.dtype} cannot be sent (object/structured dtypes "
                            "would need pickle); send plain numeric arrays")
        shape = list(arr.shape)
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)  # note: turns 0-d into 1-d, hence shape taken above
        data = arr.tobytes() if arr.nbytes < INLINE_LIMIT else self._frame(arr.reshape(-1).view(np.uint8))
        return msgpack.ExtType(EXT_NDARRAY, self.pack([arr.dtype.str, shape, data]))

    def _tensor(self, t: Any, torch: Any) -> msgpack.ExtType:
        if t.layout != torch.strided:
            raise WireError(f"torch tensors with layout {t.layout} cannot be sent; call .to_dense() first")
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.resolve_conj().resolve_neg().contiguous()
        shape = list(t.shape)
        raw = t.reshape(-1).view(torch.uint8).numpy()  # (nbytes,) view of the tensor's memory
        data = raw.tobytes() if raw.nbytes < INLINE_LIMIT else self._frame(raw)
        return msgpack.ExtType(EXT_TENSOR, self.pack([str(t.dtype).removeprefix("torch."), shape, data]))

    def _dataclass(self, obj: Any) -> msgpack.ExtType:
        cls = type(obj)
        path = _path(cls)
        if path not in _registered and not _module_allowed(cls.__module__):
            raise WireError(f"dataclass {path!r} is not allowed on the wire: {_rule()}")
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return msgpack.ExtType(EXT_DATACLASS, self.pack([path, fields]))


def pack_value(obj: Any) -> tuple[bytes, list]:
    """Value -> (msgpack bytes, out-of-band buffers). Raises WireError for unsupported values."""
    p = getattr(_local, "packer", None)
    if p is None:
        p = _local.packer = _Packer()
    try:
        return p.pack_top(obj)
    except WireError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise WireError(f"cannot encode value for an actor call: {e}") from None


class _Unpacker:
    __slots__ = ("buffers",)

    def __init__(self, buffers: list) -> None:
        self.buffers = buffers

    def unpack(self, data: Any) -> Any:
        return msgpack.unpackb(data, ext_hook=self.ext_hook, raw=False, strict_map_key=False)

    def _buffer(self, ref: Any) -> Any:
        """A frame index -> writable memoryview of that frame; inline bytes -> writable copy."""
        if isinstance(ref, bytes):
            return bytearray(ref)
        if not isinstance(ref, int) or isinstance(ref, bool) or not 0 <= ref < len(self.buffers):
            raise WireError(f"buffer reference {ref!r} out of range ({len(self.buffers)} buffer frames)")
        frame = self.buffers[ref]
        return frame.buffer if hasattr(frame, "buffer") else memoryview(bytearray(frame))

    @staticmethod
    def _shape(shape: Any) -> tuple[int, ...]:
        if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in shape)):
            raise WireError(f"array shape must be a list of non-negative ints, got {shape!r}")
        return tuple(shape)

    def ext_hook(self, code: int, data: bytes) -> Any:
        if code == EXT_TUPLE:
            items = self.unpack(data)
            if not isinstance(items, list):
                raise WireError("tuple ext must hold a list")
            return tuple(items)
        if code == EXT_NDARRAY:
            dtype_str, shape, ref = self._fields(data, 3, "ndarray")
            try:
                dtype = np.dtype(dtype_str)
            except TypeError:
                raise WireError(f"unknown numpy dtype {dtype_str!r}") from None
            if dtype.hasobject or dtype.fields is not None:
                raise WireError(f"numpy dtype {dtype_str!r} is not allowed on the wire")
            shape, buf = self._array_frame(f"ndarray {dtype_str}", shape, ref, dtype.itemsize)
            return np.frombuffer(buf, dtype=dtype).reshape(shape)
        if code == EXT_TENSOR:
            return self._tensor(*self._fields(data, 3, "tensor"))
        if code == EXT_DATACLASS:
            path, fields = self._fields(data, 2, "dataclass")
            if not isinstance(path, str) or not isinstance(fields, dict):
                raise WireError("dataclass ext must be [path str, fields dict]")
            return _build_dataclass(_resolve_dataclass(path), path, fields)
        raise WireError(f"unknown ext type {code} in payload")

    def _fields(self, data: bytes, n: int, what: str) -> list:
        fields = self.unpack(data)
        if not isinstance(fields, list) or len(fields) != n:
            raise WireError(f"{what} ext must be a list of {n} fields")
        return fields

    def _array_frame(self, what: str, shape: Any, ref: Any, itemsize: int) -> tuple[tuple[int, ...], Any]:
        """The checked shape and the frame ``ref`` points to, which must hold exactly that many items."""
        shape = self._shape(shape)
        buf = self._buffer(ref)
        n = int(np.prod(shape, dtype=np.int64)) * itemsize
        if n != len(buf):
            raise WireError(f"{what}{list(shape)} needs {n} bytes, frame has {len(buf)}")
        return shape, buf

    def _tensor(self, dtype_name: Any, shape: Any, ref: Any) -> Any:
        import torch

        dtype = getattr(torch, dtype_name, None) if isinstance(dtype_name, str) else None
        if not isinstance(dtype, torch.dtype):
            raise WireError(f"unknown torch dtype {dtype_name!r}")
        shape, buf = self._array_frame(f"tensor {dtype_name}", shape, ref, dtype.itemsize)
        if len(buf) == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(shape)


def _build_dataclass(cls: type, path: str, fields: dict) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(fields) - set(known)
    if unknown:
        raise WireError(f"dataclass {path!r} has no fields {sorted(map(str, unknown))}; the peer runs a "
                        "different version of it")
    init = {k: v for k, v in fields.items() if known[k].init}
    try:
        obj = cls(**init)
    except Exception as e:
        raise WireError(f"could not construct {path!r} from the wire: {type(e).__name__}: {e}") from None
    for k, v in fields.items():
        if not known[k].init:
            object.__setattr__(obj, k, v)
    return obj


def unpack_value(data: Any, buffers: list) -> Any:
    """Inverse of :func:`pack_value`. ``data`` may be bytes or a zmq.Frame; raises WireError."""
    if type(data) is not bytes:
        data = data.bytes if hasattr(data, "bytes") else bytes(data)
    return (_Unpacker(buffers) if buffers else _NO_BUFFERS).unpack(data)


_NO_BUFFERS = _Unpacker([])
