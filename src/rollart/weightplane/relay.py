"""WeightRelay: one hop of the weight plane — pull a version from a parent, hold it, serve it on, stage it.

The weight store and every inference worker own one. ``pull(version, sources)`` starts a background pull
(rollout goes on meanwhile); each verified bucket is at once servable to this hop's children (so a chain
store -> w0 -> w1 -> ... moves a version in a pipeline: w1 receives bucket k while w0 receives bucket k+1)
and, on an inference worker, staged where the engine's weights live (views of the received frame on the
CPU; ``DeviceStager`` on a GPU). ``take(version)`` returns the complete version only: a pull that failed
raises and nothing of it is installed. Each hop keeps the frames of its newest version (one host copy of the
model) to serve its children and any worker that asks again; an older version is dropped when a newer completes.

With ``ipc_source`` (the trainer's address, same node, both on CUDA) the worker opens the trainer's CUDA IPC
buckets instead of pulling frames; where that fails it says so in one log line and pulls frames from then
on. A version received over IPC is not relayed: this hop's children are told at once to ask the store.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import torch

from rollart.types import WeightBucket
from rollart.weightplane.buckets import WeightTransferError, views
from rollart.weightplane.client import BucketClient, PullStats, pull_version
from rollart.weightplane.frames import Kind
from rollart.weightplane.net import PlaneNet
from rollart.weightplane.server import BucketServer

log = logging.getLogger("rollart.weightplane")


class WeightRelay:
    def __init__(self, *, bind: str | None = None, keep_versions: int = 1, stage: bool = True,
                 device: torch.device | str | None = None, timeout_s: float = 30.0, retries: int = 3,
                 window: int = 2, cuda_ipc: bool = True, net: PlaneNet | None = None):
        """``bind``/``net``: see ``BucketServer`` (default: this actor process's host and keys, any port)."""
        self.server = BucketServer(bind, keep_versions=keep_versions, wait_s=max(timeout_s, 1.0), net=net)
        self.net = self.server.net
        self.stage = stage
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.timeout_s = timeout_s
        self.retries = retries
        self.window = window
        self.cuda_ipc = cuda_ipc
        self._tasks: dict[int, asyncio.Task] = {}

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> str:
        return await self.server.start()

    async def close(self) -> None:
        for t in self._tasks.values():
            t.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        await self.server.close()

    def latest(self) -> int:
        return self.server.latest()

    def pull(self, version: int, sources: list[str], *, ipc_source: str = "", link_bytes_per_s: float = 0.0,
             timeout_s: float | None = None, retries: int | None = None, names: dict[str, str] | None = None) -> None:
        """Start pulling ``version`` in the background (no-op when it is held or being pulled; an older pull
        still running is cancelled). ``names``: address -> who serves there, for error lines."""
        if version in self._tasks or self.server.held(version):
            return
        for old in [v for v in self._tasks if v < version]:
            self._tasks.pop(old).cancel()
        task = asyncio.get_running_loop().create_task(
            self._pull(version, list(sources), ipc_source, link_bytes_per_s,
                       self.timeout_s if timeout_s is None else timeout_s, self.retries if retries is None else retries,
                       names or {}),
            name=f"pull-weights-v{version}")
        task.add_done_callback(mark_retrieved)
        self._tasks[version] = task

    def forget(self, first: int) -> list[int]:
        """Drop every version >= ``first`` held or being pulled here (see ``BucketServer.forget``)."""
        for v in [v for v in self._tasks if v >= first]:
            self._tasks.pop(v).cancel()
        return self.server.forget(first)

    def pulling(self, version: int) -> bool:
        return version in self._tasks

    async def wait(self, version: int) -> PullStats:
        """Wait until the started pull of ``version`` has every bucket (raises as the pull did); its stats."""
        task = self._tasks.get(version)
        if task is None:
            raise WeightTransferError(f"weight version {version} is not being pulled here")
        return (await asyncio.shield(task))[1]

    async def take(self, version: int, sources: list[str] = (),
                   names: dict[str, str] | None = None) -> tuple[WeightBucket | None, PullStats]:
        """The complete ``version`` (staged tensors; None when this relay does not stage) and its pull stats,
        waiting for what is left; starts a pull from ``sources`` when none was started. Raises
        WeightTransferError when it could not be pulled intact (then a later take pulls it again)."""
        failed = self._tasks.get(version)
        if failed is not None and failed.done() and sources and (failed.cancelled() or failed.exception() is not None):
            del self._tasks[version]  # the background pull failed: try again, from the given sources
        if version not in self._tasks:
            if not sources:
                raise WeightTransferError(f"weight version {version} was never pulled here and no source was named")
            self.pull(version, sources, names=names)
        task = self._tasks.get(version)
        if task is None:
            raise WeightTransferError(f"weight version {version} was already taken from this relay")
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._tasks.pop(version, None)  # the staged tensors go to the caller alone

    async def _pull(self, version: int, sources: list[str], ipc_source: str, link_bytes_per_s: float,
                    timeout_s: float, retries: int, names: dict[str, str]) -> tuple[WeightBucket | None, PullStats]:
        if ipc_source and self.cuda_ipc and self.stage and self.device.type == "cuda":
            try:
                got = await self._pull_ipc(version, ipc_source, timeout_s)
                self.server.fail(version, f"weight version {version} came over CUDA IPC here: pull it from the store")
                return got
            except Exception as e:  # noqa: BLE001 - any IPC failure falls back to frames, said once
                self.cuda_ipc = False
                log.warning("weights.cuda_ipc: cannot use CUDA IPC from %s (%s: %s); copying through host "
                            "frames from now on", ipc_source, type(e).__name__, e)
        staged: dict[int, list[tuple[str, Any]]] = {}
        stager = None

        def on_manifest(m: dict) -> None:
            nonlocal stager
            self.server.begin(version, m)
            if self.stage and self.device.type == "cuda":
                from rollart.weightplane.cuda import DeviceStager
                stager = DeviceStager(self.device, max((b["nbytes"] for b in m["buckets"]), default=0))

        async def on_bucket(k: int, entry: dict, frame: Any, crc: int) -> None:
            buf = frame.buffer
            self.server.put(version, k, buf, crc)  # children may fetch it from now on
            if not self.stage:
                return
            host = torch.frombuffer(buf, dtype=torch.uint8) if entry["nbytes"] else torch.empty(0, dtype=torch.uint8)
            if stager is not None:
                host = await asyncio.to_thread(stager.stage, host)  # pinned copy here, DMA queued on a side stream
            staged[k] = views(host, entry["tensors"])

        try:
            manifest, stats = await pull_version(version, sources, on_bucket, on_manifest=on_manifest,
                                                 window=self.window, timeout_s=timeout_s, retries=retries,
                                                 link_bytes_per_s=link_bytes_per_s, names=names, net=self.net)
            if stager is not None:
                await asyncio.to_thread(stager.finish)
            self.server.complete(version)
        except BaseException as e:
            self.server.fail(version, f"weight version {version} failed upstream: {e}")
            raise
        if not self.stage:
            return None, stats
        return WeightBucket(version, {n: t for k in range(len(manifest["buckets"])) for n, t in staged[k]}), stats

    async def _pull_ipc(self, version: int, address: str, timeout_s: float) -> tuple[WeightBucket, PullStats]:
        import time

        from rollart.weightplane.cuda import import_ipc
        t0 = time.perf_counter()
        client = BucketClient(address, net=self.net)
        try:
            descriptors, _ = await client.request(Kind.IPC, version, timeout=timeout_s)
            manifest, _ = await client.request(Kind.MANIFEST, version, timeout=timeout_s)
        finally:
            await client.close()
        entries = manifest["buckets"]
        if not isinstance(descriptors, list) or len(descriptors) != len(entries):
            raise WeightTransferError(f"{len(descriptors)} IPC buckets for a manifest of {len(entries)}")
        tensors: dict[str, Any] = {}
        for entry, desc in zip(entries, descriptors):
            dev = import_ipc(desc).to(self.device)  # same device: no copy; the engine copies at install
            tensors.update(views(dev, entry["tensors"]))
        stats = PullStats(version, num_buckets=len(entries), bytes=manifest["bytes"],
                          seconds=time.perf_counter() - t0, by_source={f"ipc:{address}": manifest["bytes"]})
        return WeightBucket(version, tensors), stats


def mark_retrieved(task: asyncio.Task) -> None:
    """Done callback of a background pull whose failure is handled where it is awaited later (take(), or the
    coordinator's update), or never if the run ends first: asyncio must not log 'exception never retrieved'."""
    if not task.cancelled():
        task.exception()
