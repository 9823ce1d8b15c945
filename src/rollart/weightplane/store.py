"""The weight store: the CPU-resident root of the weight plane (RollArt §6.3 / Table 4).

The data path per policy version v (``rollart.weightplane`` has the design)::

    trainer (WeightSource) --fetch(v)--> WeightStore --relay tree--> inference workers
            packed once                  pulled bucket by bucket;   each worker pulls from its parent and
                                         serves every worker        serves its children; a restarted one
                                         that asks                  pulls the latest from the store itself

* ``WeightStore`` is a plain class run as an actor, answering the store's requests of ``rollart.messages``. Its
  weights never pass through the coordinator: ``FetchVersion(v, trainer_address)`` pulls the version straight
  from the trainer's weight source over ZeroMQ frames, verified bucket by bucket; it is visible (``GetVersion``)
  only once every bucket arrived. It keeps ``keep_versions`` versions and serves them on its own address
  (``WeightAddress``).
* ``PutBucket`` / ``PublishVersion`` (with ``push_weights``) remain for a trainer that serves no weight plane
  (the shared training service): whoever pushes then carries the version once, to the store only.
* ``WeightSyncStats`` reports each version's cost: ``push_s`` (trainer -> store), ``pull_accum_s`` (the
  slowest worker's whole pull), ``pull_exposed_s`` (what the update point actually waited for).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from rollart.actors import handles
from rollart.messages import FetchVersion, GetVersion, PublishVersion, PutBucket, RewindVersions, WeightAddress
from rollart.types import WeightBucket
from rollart.weightplane import WeightRelay, WeightTransferError, bucketize, tensor_bytes
from rollart.weightplane.buckets import as_bytes_view, crc, manifest, pack, views

__all__ = ["WeightStore", "WeightSyncStats", "push_weights", "bucketize", "tensor_bytes", "WeightTransferError"]


class WeightStore:
    """CPU-resident store of published weight versions, served bucket by bucket (runs as an actor)."""

    def __init__(self, keep_versions: int = 2, bind: str | None = None, timeout_s: float = 30.0,
                 retries: int = 3):
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        self.keep_versions = keep_versions
        self.relay = WeightRelay(bind=bind, keep_versions=keep_versions, stage=False, timeout_s=timeout_s,
                                 retries=retries)
        self._pending: dict[int, dict[int, WeightBucket]] = {}

    async def on_start(self) -> None:
        await self.relay.start()

    async def on_stop(self) -> None:
        await self.relay.close()

    @handles(WeightAddress)
    async def weight_address(self, msg: WeightAddress) -> str:
        """Where workers pull from (the store's BucketServer)."""
        return await self.relay.start()

    @handles(FetchVersion)
    async def fetch(self, msg: FetchVersion) -> dict:
        """Pull ``msg.version`` from ``msg.source`` (the trainer's weight source) and publish it; its stats."""
        await self.relay.start()
        version = msg.version
        if version <= self.latest_version():
            raise ValueError(f"version {version} is not newer than the latest published {self.latest_version()}; "
                             "versions must increase")
        self.relay.pull(version, [msg.source], timeout_s=msg.timeout_s, retries=msg.retries,
                        link_bytes_per_s=msg.link_bytes_per_s, names={msg.source: "the trainer"})
        _, stats = await self.relay.take(version)
        return {"version": version, "num_buckets": stats.num_buckets, "bytes": stats.bytes, "seconds": stats.seconds,
                "retries": stats.retries}

    def bytes_served(self) -> int:
        """Bucket bytes this store has sent to workers (its egress)."""
        return self.relay.server.bytes_sent

    # ------------------------------------------------------------------ push path (no weight source)
    @handles(PutBucket)
    def put_bucket(self, msg: PutBucket) -> int:
        """Receive one bucket of its version; returns its size in bytes."""
        bucket = msg.bucket
        version = bucket.version
        if version <= self.latest_version():
            raise ValueError(f"version {version} is not newer than the latest published "
                             f"{self.latest_version()}; versions must increase")
        self._pending.setdefault(version, {})[bucket.index] = bucket
        return bucket.nbytes

    @handles(PublishVersion)
    def publish(self, msg: PublishVersion) -> None:
        """Make a pushed version visible once all its buckets arrived; drops old versions."""
        version, num_buckets = msg.version, msg.num_buckets
        got = self._pending.get(version, {})
        missing = [i for i in range(num_buckets) if i not in got]
        if missing:
            raise ValueError(f"cannot publish version {version}: buckets {missing[:5]} of {num_buckets} "
                             "never arrived; push them before publish")
        packed = [pack(list(got[i].named_tensors())) for i in range(num_buckets)]
        server = self.relay.server
        server.begin(version, manifest(version, [b.entry() for b in packed]))
        for i, b in enumerate(packed):
            view = as_bytes_view(b.data)
            server.put(version, i, view, crc(view))
        server.complete(version)
        for stale in [v for v in self._pending if v <= version]:
            del self._pending[stale]

    @handles(RewindVersions)
    def rewind(self, msg: RewindVersions) -> int:
        """Forget every version >= ``msg.version`` (the trainer went back to a checkpoint and publishes it
        again); returns how many published versions were dropped."""
        version = msg.version
        for v in [v for v in self._pending if v >= version]:
            del self._pending[v]
        held = set(self.relay.server.versions())
        return len(held & set(self.relay.forget(version)))

    # ------------------------------------------------------------------ reading
    def latest_version(self) -> int:
        """Newest published version, or -1 when nothing is published yet."""
        return self.relay.latest()

    @handles(GetVersion)
    def get_version(self, msg: GetVersion) -> int:
        return self.latest_version()

    def manifest(self, version: int) -> dict:
        m = self._get(version)
        return {"version": version, "num_buckets": len(m["buckets"]), "bytes": m["bytes"],
                "names": [t[0] for b in m["buckets"] for t in b["tensors"]]}

    def get_bucket(self, version: int, index: int) -> WeightBucket:
        """One bucket as tensors (a copy; for inspection: workers pull over the weight plane)."""
        m = self._get(version)
        if not 0 <= index < len(m["buckets"]):
            raise IndexError(f"version {version} has {len(m['buckets'])} buckets; no bucket {index}")
        payload, _ = self.relay.server.bucket(version, index)
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        return WeightBucket(version, dict(views(data, m["buckets"][index]["tensors"])), index)

    def _get(self, version: int) -> dict:
        if not self.relay.server.held(version):
            raise KeyError(f"weight version {version} is not published (available: {self.relay.server.versions()}); "
                           "pull only versions announced after fetch or publish returned")
        return self.relay.server.manifest(version)


@dataclass
class WeightSyncStats:
    """Cost of moving one weight version (seconds), as in RollArt Table 4."""
    version: int
    num_buckets: int = 0
    bytes: int = 0
    push_s: float = 0.0
    """Trainer -> store, every bucket, until the version is published."""
    pull_accum_s: float = 0.0
    """Store -> workers: the slowest worker's whole pull, whether hidden behind rollout or not."""
    pull_exposed_s: float = 0.0
    """Time the update point waited for pulls not yet finished (not hidden by rollout)."""

    def as_metrics(self) -> dict[str, float]:
        return {"system/weight_push_s": self.push_s, "system/weight_pull_accum_s": self.pull_accum_s,
                "system/weight_pull_exposed_s": self.pull_exposed_s, "system/weight_bytes": float(self.bytes)}


async def push_weights(store: Any, buckets: Sequence[Sequence[tuple[str, torch.Tensor]]], version: int,
                       link_bytes_per_s: float = 0.0) -> WeightSyncStats:
    """Send every bucket of ``version`` to the store, then publish it (the path for a
    trainer that serves no weight plane: the caller carries the version once). ``link_bytes_per_s`` > 0
    EMULATES a slower link (each bucket takes at least its bytes over this rate)."""
    t0 = time.perf_counter()
    total = 0
    for i, named in enumerate(buckets):
        sent = time.perf_counter()
        nbytes = await store.send(PutBucket(WeightBucket(version, {n: t.detach().contiguous() for n, t in named}, i)))
        total += nbytes
        await asyncio.sleep(max(0.0, nbytes / link_bytes_per_s - (time.perf_counter() - sent))
                            if link_bytes_per_s > 0 else 0)
    await store.send(PublishVersion(version, len(buckets)))
    return WeightSyncStats(version=version, num_buckets=len(buckets), bytes=total, push_s=time.perf_counter() - t0)

