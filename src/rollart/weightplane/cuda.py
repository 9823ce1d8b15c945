"""The GPU side of the weight plane: device -> pinned host buckets -> frames -> device, and CUDA IPC.

* ``DeviceStager`` (receiver): each verified bucket frame is copied into one of two pinned host buffers
  and from there, asynchronously on a side stream, into a device buffer; while bucket k's DMA runs, bucket
  k+1 is received and copied into the other pinned buffer. ``finish()`` waits for the stream. The staged
  version costs one model-size of device memory until it is installed (the engine copies device to device),
  which keeps a half-received version off the live weights.
* ``export_ipc`` / ``import_ipc``: where trainer and inference worker share a node, the trainer exports a
  CUDA IPC handle per device bucket (``torch.multiprocessing.reductions.reduce_tensor``) and the worker
  opens it and copies device to device: no host copy, no frames. The handle crosses the wire as plain
  msgpack values (no pickle); the device travels by UUID, since ``CUDA_VISIBLE_DEVICES`` may number the
  GPUs differently in the two processes. Whoever cannot open it logs one line and falls back to frames.
"""
from __future__ import annotations

import socket
from typing import Any

import torch

from rollart.weightplane.buckets import WeightTransferError

_STORAGE_CLASSES = {"TypedStorage": lambda: torch.storage.TypedStorage,
                    "UntypedStorage": lambda: torch.UntypedStorage}


def node_id() -> str:
    """Which machine this process runs on (IPC is possible only between processes of one node)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def cuda_usable() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def _uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid)


def export_ipc(data: torch.Tensor) -> dict:
    """A CUDA IPC descriptor of a flat device buffer, as msgpack-able values."""
    from torch.multiprocessing.reductions import reduce_tensor

    if data.device.type != "cuda":
        raise ValueError("export_ipc needs a CUDA tensor")
    _, args = reduce_tensor(data)
    (_, size, stride, offset, storage_cls, dtype, device, handle, size_bytes, offset_bytes, _,
     ref_handle, ref_offset, event_handle, event_sync) = args
    return {"size": list(size), "stride": list(stride), "offset": int(offset),
            "storage": storage_cls.__name__, "dtype": str(dtype).removeprefix("torch."),
            "uuid": _uuid(int(device)), "handle": bytes(handle), "size_bytes": int(size_bytes),
            "offset_bytes": int(offset_bytes), "ref_handle": bytes(ref_handle) if ref_handle else None,
            "ref_offset": int(ref_offset), "event": bytes(event_handle) if event_handle else None,
            "event_sync": bool(event_sync)}


def import_ipc(desc: dict) -> torch.Tensor:
    """Open a descriptor from ``export_ipc`` in this process; WeightTransferError when it cannot be."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    if not cuda_usable():
        raise WeightTransferError("no CUDA device visible here")
    local = {_uuid(i): i for i in range(torch.cuda.device_count())}
    if desc.get("uuid") not in local:
        raise WeightTransferError(f"the trainer's GPU {desc.get('uuid')} is not visible in this process")
    storage_cls = _STORAGE_CLASSES.get(desc.get("storage"))
    dtype = getattr(torch, str(desc.get("dtype")), None)
    if storage_cls is None or not isinstance(dtype, torch.dtype):
        raise WeightTransferError(f"unusable CUDA IPC descriptor (storage {desc.get('storage')!r}, "
                                  f"dtype {desc.get('dtype')!r})")
    return rebuild_cuda_tensor(torch.Tensor, torch.Size(desc["size"]), tuple(desc["stride"]), desc["offset"],
                               storage_cls(), dtype, local[desc["uuid"]], desc["handle"], desc["size_bytes"],
                               desc["offset_bytes"], False, desc["ref_handle"], desc["ref_offset"],
                               desc["event"], desc["event_sync"])


class DeviceStager:
    """Frames -> pinned host (double buffered) -> device buffers on a side stream (see module docstring)."""

    def __init__(self, device: torch.device, max_bucket_bytes: int):
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.pinned = [torch.empty(max_bucket_bytes, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.done: list[Any] = [None, None]
        """The CUDA event after which each pinned buffer may be reused."""
        self.turn = 0

    def stage(self, host: torch.Tensor) -> torch.Tensor:
        """Copy one bucket (flat uint8 CPU tensor) to a new device buffer; returns at once after the DMA
        is queued (the pinned copy is done by then). Call from one thread at a time."""
        i, n = self.turn, host.numel()
        self.turn ^= 1
        if n > self.pinned[i].numel():
            self.pinned[i] = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        if self.done[i] is not None:
            self.done[i].synchronize()  # the DMA that last read this pinned buffer has finished
        buf = self.pinned[i][:n]
        buf.copy_(host)
        with torch.cuda.stream(self.stream):
            dev = torch.empty(n, dtype=torch.uint8, device=self.device)
            dev.copy_(buf, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self.done[i] = event
        return dev

    def finish(self) -> None:
        """Wait until every queued copy has landed on the device."""
        self.stream.synchronize()
