"""WeightSource: the trainer's end of the weight plane — snapshot a version into buckets and serve it.

``publish(version, named_tensors, bucket_bytes)`` announces the version's manifest first, then packs it
bucket by bucket in a thread (one copy: the trainer keeps training on its live parameters afterwards) and
makes each bucket servable the moment it is packed, so the weight store pulls bucket k while k+1 is being
copied. On a GPU every bucket is copied device -> pinned host asynchronously on a side stream and served
once its copy event has fired. With ``ipc=True`` (a CUDA trainer) a device copy of each bucket is kept as
well and exported as a CUDA IPC handle for inference workers on the same node.
"""
from __future__ import annotations

import asyncio
from typing import Any

import torch

from rollart.weightplane.buckets import as_bytes_view, bucketize, crc, layout, manifest, pack
from rollart.weightplane.net import PlaneNet
from rollart.weightplane.server import BucketServer


class WeightSource:
    def __init__(self, bind: str | None = None, net: PlaneNet | None = None):
        """``bind``/``net``: see ``BucketServer`` (default: this actor process's host and keys, any port)."""
        self.server = BucketServer(bind, keep_versions=1, net=net)
        self._device_copies: dict[int, list[torch.Tensor]] = {}

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> str:
        return await self.server.start()

    async def close(self) -> None:
        await self.server.close()

    async def publish(self, version: int, named: list[tuple[str, torch.Tensor]], bucket_bytes: int,
                      ipc: bool = False) -> dict:
        """Snapshot and serve ``version``; returns once it is fully packed (the live weights may change then)."""
        groups = bucketize(named, bucket_bytes)
        entries = []
        for g in groups:
            specs, total = layout(g)
            entries.append({"nbytes": total, "tensors": specs})
        m = manifest(version, entries)
        self.server.begin(version, m)
        loop = asyncio.get_running_loop()
        on_device = any(t.is_cuda for _, t in named)

        def put(k: int, data: torch.Tensor) -> None:
            view = as_bytes_view(data)
            loop.call_soon_threadsafe(self.server.put, version, k, view, crc(view))

        def snapshot() -> list[Any]:
            if not on_device:
                for k, g in enumerate(groups):
                    put(k, pack(g, with_crc=False).data)
                return []
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())  # the last optimizer step has landed
            packed, events = [], []
            with torch.cuda.stream(stream):
                for g in groups:  # queue every device -> pinned copy, then serve each as its copy lands
                    packed.append(pack(g, pin=True, non_blocking=True))
                    ev = torch.cuda.Event()
                    ev.record(stream)
                    events.append(ev)
            for k, (b, ev) in enumerate(zip(packed, events)):
                ev.synchronize()
                put(k, b.data)
            if not ipc:
                return []
            device = next(t.device for _, t in named if t.is_cuda)
            copies = []
            with torch.cuda.stream(stream):
                for g, e in zip(groups, entries):
                    dev = torch.empty(e["nbytes"], dtype=torch.uint8, device=device)
                    for (name, _, _, off), (_, t) in zip(e["tensors"], g):
                        src = t.detach().contiguous().reshape(-1).view(torch.uint8).to(device)
                        dev[off:off + src.numel()].copy_(src, non_blocking=True)
                    copies.append(dev)
            stream.synchronize()
            return copies

        copies = await asyncio.to_thread(snapshot)
        await asyncio.sleep(0)  # let the queued puts run before completing
        if copies:
            from rollart.weightplane.cuda import export_ipc
            self._device_copies = {version: copies}  # the previous version's device copy is released
            self.server.set_ipc(version, [export_ipc(c) for c in copies])
        self.server.complete(version)
        return {"version": version, "num_buckets": len(groups), "bytes": m["bytes"], "address": self.address}
