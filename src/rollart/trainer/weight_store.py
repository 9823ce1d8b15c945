"""Bucketed weight store: the trainer publishes each version once; inference pulls it in the background.

RollArt §6.3 / Table 4. The data path per policy version v:

    trainer --push_weights()--> WeightStore (CPU-resident, an actor) --WeightPuller--> inference worker
            buckets of ~bucket_bytes, once              pulled bucket by bucket while rollout runs;
                                                        take() hands the complete set for update_weights

* ``WeightStore`` is a plain class (run it as an actor). A version becomes visible only when every one
  of its buckets has arrived and ``publish`` was called, so a puller never sees half a version.
* ``WeightPuller`` lives next to whoever updates the inference workers. ``start(v)`` begins fetching in an
  asyncio task (each bucket is one awaited call, so rollout keeps running between buckets); ``take(v)``
  waits for the rest and returns the whole version as one ``WeightBucket`` plus its stats.
* Every bucket is a ``rollart.types.WeightBucket`` (version, index, name -> tensor); on the actor wire its
  tensors travel as zero-copy frames.
* Stats per version (Table 4): ``push_s`` (trainer -> store), ``pull_accum_s`` (sum of all bucket pulls),
  ``pull_exposed_s`` (time the caller of ``take`` actually waited — the pull not hidden by rollout).

Store handles: anything with ``await handle.call(method, *args)`` — an actor handle from
``rollart.actors``, or :class:`LocalHandle` around an in-process object (it copies tensors both ways, as a
wire would, so a published version can never alias the trainer's live parameters).
``link_bytes_per_s`` optionally *simulates* a slower link (sleeps bytes / rate per bucket) for
benchmarks on one machine; it is off by default and must be labelled simulated wherever reported.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

from rollart.types import WeightBucket


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


class WeightStore:
    """CPU-resident store of published weight versions, bucket by bucket (runs as an actor)."""

    def __init__(self, keep_versions: int = 2):
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        self.keep_versions = keep_versions
        self._pending: dict[int, dict[int, WeightBucket]] = {}
        self._published: dict[int, list[WeightBucket]] = {}

    def put_bucket(self, bucket: WeightBucket) -> int:
        """Receive one bucket of its version; returns its size in bytes."""
        version = bucket.version
        if self._published and version <= max(self._published):
            raise ValueError(f"version {version} is not newer than the latest published "
                             f"{max(self._published)}; versions must increase")
        self._pending.setdefault(version, {})[bucket.index] = bucket
        return bucket.nbytes

    def publish(self, version: int, num_buckets: int) -> None:
        """Make ``version`` visible once all ``num_buckets`` buckets arrived; drops old versions."""
        got = self._pending.get(version, {})
        missing = [i for i in range(num_buckets) if i not in got]
        if missing:
            raise ValueError(f"cannot publish version {version}: buckets {missing[:5]} of {num_buckets} "
                             "never arrived; push them before publish")
        self._published[version] = [got[i] for i in range(num_buckets)]
        del self._pending[version]
        for old in sorted(self._published)[:-self.keep_versions]:
            del self._published[old]
        for stale in [v for v in self._pending if v < version]:  # an abandoned, older push
            del self._pending[stale]

    def rewind(self, version: int) -> int:
        """Forget every version >= ``version`` (the trainer went back to a checkpoint and publishes it
        again); returns how many published versions were dropped."""
        dropped = [v for v in self._published if v >= version]
        for v in dropped:
            del self._published[v]
        for v in [v for v in self._pending if v >= version]:
            del self._pending[v]
        return len(dropped)

    def latest_version(self) -> int:
        """Newest published version, or -1 when nothing is published yet."""
        return max(self._published) if self._published else -1

    def manifest(self, version: int) -> dict:
        buckets = self._get(version)
        return {"version": version, "num_buckets": len(buckets),
                "bytes": sum(b.nbytes for b in buckets),
                "names": [n for b in buckets for n in b.tensors]}

    def get_bucket(self, version: int, index: int) -> WeightBucket:
        buckets = self._get(version)
        if not 0 <= index < len(buckets):
            raise IndexError(f"version {version} has {len(buckets)} buckets; no bucket {index}")
        return buckets[index]

    def _get(self, version: int) -> list[WeightBucket]:
        if version not in self._published:
            raise KeyError(f"weight version {version} is not published (available: {sorted(self._published)}); "
                           "pull only versions announced after push_weights returned")
        return self._published[version]


class LocalHandle:
    """``await handle.call(method, *args)`` on an in-process object, copying tensors like a wire would."""

    def __init__(self, obj: Any):
        self.obj = obj

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.obj, method)(*_copy_tensors(args), **_copy_tensors(kwargs))
        if asyncio.iscoroutine(result):
            result = await result
        return _copy_tensors(result)


def _copy_tensors(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_copy_tensors(v) for v in x)
    if isinstance(x, dict):
        return {k: _copy_tensors(v) for k, v in x.items()}
    if isinstance(x, WeightBucket):
        return WeightBucket(x.version, _copy_tensors(x.tensors), x.index)
    return x


@dataclass
class WeightSyncStats:
    """Cost of moving one weight version (seconds), as in RollArt Table 4."""
    version: int
    num_buckets: int = 0
    bytes: int = 0
    push_s: float = 0.0
    """Trainer -> store, all buckets plus publish."""
    pull_accum_s: float = 0.0
    """Sum of every bucket pull (store -> inference side), whether hidden or not."""
    pull_exposed_s: float = 0.0
    """Time the update point waited in take() for buckets not yet pulled (not hidden by rollout)."""

    def as_metrics(self) -> dict[str, float]:
        return {"system/weight_push_s": self.push_s, "system/weight_pull_accum_s": self.pull_accum_s,
                "system/weight_pull_exposed_s": self.pull_exposed_s, "system/weight_bytes": float(self.bytes)}


async def _simulated_link(nbytes: int, link_bytes_per_s: float | None) -> None:
    if link_bytes_per_s:
        await asyncio.sleep(nbytes / link_bytes_per_s)


async def push_weights(store: Any, buckets: Sequence[Sequence[tuple[str, torch.Tensor]]], version: int,
                       link_bytes_per_s: float | None = None) -> WeightSyncStats:
    """Send every bucket of ``version`` to the store once, then publish it; returns push stats."""
    t0 = time.perf_counter()
    total = 0
    for i, named in enumerate(buckets):
        bucket = WeightBucket(version, {n: t.detach().contiguous() for n, t in named}, i)
        total += await store.call("put_bucket", bucket)
        await _simulated_link(bucket.nbytes, link_bytes_per_s)
    await store.call("publish", version, len(buckets))
    return WeightSyncStats(version=version, num_buckets=len(buckets), bytes=total,
                           push_s=time.perf_counter() - t0)


class WeightPuller:
    """Fetch a published version bucket by bucket in the background; hand it over complete."""

    def __init__(self, store: Any, link_bytes_per_s: float | None = None):
        self.store = store
        self.link_bytes_per_s = link_bytes_per_s
        self._task: asyncio.Task | None = None
        self._version: int | None = None
        self._pull_accum = 0.0
        self._bytes = 0
        self._num_buckets = 0

    @property
    def pulling(self) -> int | None:
        """The version being (or last) pulled."""
        return self._version

    def done(self) -> bool:
        """True when the started pull has fetched every bucket (take() will not wait)."""
        return self._task is not None and self._task.done()

    def start(self, version: int) -> None:
        """Begin pulling ``version`` in the background (cancels an older pull still running)."""
        if self._version == version and self._task is not None:
            return
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._version, self._pull_accum, self._bytes, self._num_buckets = version, 0.0, 0, 0
        self._task = asyncio.get_running_loop().create_task(self._pull(version), name=f"pull-weights-v{version}")

    async def _pull(self, version: int) -> WeightBucket:
        manifest = await self.store.call("manifest", version)
        self._num_buckets = manifest["num_buckets"]
        buckets: list[WeightBucket] = []
        for i in range(manifest["num_buckets"]):
            await asyncio.sleep(0)  # let rollout run between buckets even when the store is in-process
            t0 = time.perf_counter()
            bucket = await self.store.call("get_bucket", version, i)
            await _simulated_link(bucket.nbytes, self.link_bytes_per_s)
            self._pull_accum += time.perf_counter() - t0
            self._bytes += bucket.nbytes
            buckets.append(bucket)
        whole = WeightBucket.merge(buckets) if buckets else WeightBucket(version, {})
        if whole.names != manifest["names"]:
            raise RuntimeError(f"weight version {version}: pulled names differ from the manifest")
        return whole

    async def take(self, version: int) -> tuple[WeightBucket, WeightSyncStats]:
        """The whole of ``version`` (one bucket) and its pull stats; waits only for what is left.

        If ``start(version)`` was never called the whole pull is exposed (the synchronous baseline).
        """
        t0 = time.perf_counter()
        self.start(version)
        named = await self._task
        exposed = time.perf_counter() - t0
        stats = WeightSyncStats(version=version, num_buckets=self._num_buckets, bytes=self._bytes,
                                pull_accum_s=self._pull_accum, pull_exposed_s=exposed)
        self._task = None
        return named, stats
