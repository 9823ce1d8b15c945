"""Packed weight buckets: one contiguous byte buffer per bucket, described by a manifest.

A version is cut, in parameter order, into buckets of at most ``bucket_bytes`` (a larger tensor gets its own).
Each bucket is packed into one flat ``uint8`` buffer so that it crosses a socket as one zero-copy frame and
is checked with one CRC-32. The manifest (plain msgpack-able dict) says, per bucket, its size, its CRC and
where each named tensor lies in it; a receiver rebuilds the tensors as views of the frame it received.

    manifest = {"version": v, "bytes": total, "buckets": [{"nbytes": n,
                "tensors": [[name, dtype, shape, offset], ...]}, ...]}

A bucket's CRC is computed once where it is packed and travels with every copy of it (in the reply
header): a relay forwards the CRC it verified, so corruption at any hop is caught by the next one.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Iterable

import torch


class WeightTransferError(RuntimeError):
    """A weight version could not be moved intact (bucket lost or corrupt after every retry, source gone)."""


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def bucketize(named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> list[list[tuple[str, torch.Tensor]]]:
    """Split tensors, in order, into buckets of at most ``bucket_bytes`` (a larger tensor gets its own)."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    buckets: list[list[tuple[str, torch.Tensor]]] = []
    current: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in named_tensors:
        n = tensor_bytes(t)
        if current and size + n > bucket_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append((name, t))
        size += n
    if current:
        buckets.append(current)
    return buckets


def crc(buf: Any) -> int:
    """CRC-32 of a bytes-like buffer (zlib releases the GIL for large buffers)."""
    return zlib.crc32(memoryview(buf).cast("B")) & 0xFFFFFFFF


def digest(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, int]:
    """Name -> CRC-32 of each tensor's bytes (any device): compares weights across processes without moving them."""
    out = {}
    for name, t in named:
        flat = t.detach().contiguous().reshape(-1).view(torch.uint8).cpu()
        out[name] = crc(as_bytes_view(flat)) if flat.numel() else 0
    return out


def as_bytes_view(data: torch.Tensor) -> memoryview:
    """A flat CPU uint8 tensor as a memoryview (zero-copy, for a socket send or a CRC)."""
    return memoryview(data.numpy()).cast("B")


@dataclass
class PackedBucket:
    """One bucket: a flat uint8 buffer (CPU, pinned where CUDA is used, or a device buffer) and its layout."""
    data: torch.Tensor
    """(nbytes,) uint8."""
    tensors: list[list]
    """[[name, dtype name, shape, byte offset], ...] in load order."""
    crc: int = 0

    @property
    def nbytes(self) -> int:
        return int(self.data.numel())

    def entry(self) -> dict:
        return {"nbytes": self.nbytes, "tensors": self.tensors}


def layout(named: list[tuple[str, torch.Tensor]]) -> tuple[list[list], int]:
    """Where each tensor of one bucket lies in its flat buffer (8-byte aligned offsets) and the total size."""
    specs, off = [], 0
    for name, t in named:
        off = (off + 7) // 8 * 8
        specs.append([name, str(t.dtype).removeprefix("torch."), list(t.shape), off])
        off += tensor_bytes(t)
    return specs, off


def pack(named: list[tuple[str, torch.Tensor]], *, pin: bool = False, non_blocking: bool = False,
         with_crc: bool = True) -> PackedBucket:
    """Copy one bucket's tensors (any device) into a new flat host buffer (pinned when ``pin``).

    With ``non_blocking`` device tensors are copied asynchronously on the current stream; the caller must
    synchronise before reading the buffer (``with_crc`` is then ignored: compute the CRC afterwards)."""
    specs, total = layout(named)
    data = torch.empty(total, dtype=torch.uint8, pin_memory=pin)
    for (name, _, _, off), (_, t) in zip(specs, named):
        src = t.detach().contiguous().reshape(-1).view(torch.uint8)
        data[off:off + src.numel()].copy_(src, non_blocking=non_blocking)
    bucket = PackedBucket(data, specs)
    if with_crc and not non_blocking:
        bucket.crc = crc(as_bytes_view(data))
    return bucket


def views(data: torch.Tensor, specs: list[list]) -> list[tuple[str, torch.Tensor]]:
    """The named tensors of one bucket as views of its flat uint8 buffer (any device; no copy)."""
    out = []
    for name, dtype_name, shape, off in specs:
        dtype = getattr(torch, dtype_name, None)
        if not isinstance(dtype, torch.dtype):
            raise WeightTransferError(f"manifest names unknown dtype {dtype_name!r} for {name!r}")
        n = 1
        for d in shape:
            n *= int(d)
        nbytes = n * dtype.itemsize
        if off + nbytes > data.numel():
            raise WeightTransferError(f"manifest puts {name!r} at bytes {off}..{off + nbytes}, past the "
                                      f"bucket's {data.numel()} bytes")
        out.append((name, data[off:off + nbytes].view(dtype).view(tuple(shape))))
    return out


def manifest(version: int, entries: list[dict]) -> dict:
    """A version's manifest from its buckets' entries ({"nbytes", "tensors"})."""
    return {"version": int(version), "bytes": sum(e["nbytes"] for e in entries), "buckets": list(entries)}


def check_manifest(m: Any, version: int) -> dict:
    """A manifest from the wire, checked for shape; raises WeightTransferError naming what is wrong."""
    ok = (isinstance(m, dict) and m.get("version") == version and isinstance(m.get("buckets"), list)
          and all(isinstance(b, dict) and isinstance(b.get("nbytes"), int) and isinstance(b.get("tensors"), list) for b in m["buckets"]))
    if not ok:
        raise WeightTransferError(f"malformed manifest for weight version {version}")
    return m
