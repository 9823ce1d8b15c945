"""Weight synchronisation for the coordinator (RollArt §6.2 steps ③–⑤, §6.3 data movement).

After each train step the new version is pushed once to the CPU-resident weight store (bucketised);
a background puller starts fetching it at once, while rollout goes on; at the next update point the
coordinator takes the complete version (waiting only for what is not yet pulled: the *exposed* pull)
and every inference worker swaps to it atomically, recomputing the KV of in-flight requests.
"""
from __future__ import annotations

import time
from typing import Any

from rollart.trainer.weight_store import WeightPuller, WeightSyncStats, push_weights
from rollart.types import WeightBucket


class WeightSync:
    def __init__(self, trainer: Any, store: Any, proxy: Any, bucket_bytes: int, link_bytes_per_s: float = 0.0):
        self.trainer = trainer
        self.store = store
        self.proxy = proxy
        self.bucket_bytes = bucket_bytes
        self.puller = WeightPuller(store, link_bytes_per_s or None)  # a rate simulates a slower link
        self.version = 0
        """The newest version pushed to the store (0: the initial weights every worker starts from)."""
        self.pending: WeightSyncStats | None = None
        self._fetched: tuple[WeightBucket, WeightSyncStats] | None = None

    async def publish(self, version: int) -> WeightSyncStats:
        """Trainer -> store (once per version), then start pulling it in the background."""
        t0 = time.perf_counter()
        raw = await self.trainer.call("weight_buckets", self.bucket_bytes)
        buckets = [list(zip(names, tensors)) for names, tensors in raw]
        stats = await push_weights(self.store, buckets, version)
        stats.push_s = time.perf_counter() - t0  # include the trainer -> coordinator leg
        self.version = version
        self.pending = stats
        self.puller.start(version)
        return stats

    def restart_pull(self, lost: bool) -> None:
        """The store restarted: pull afresh from it; ``lost``: the pending version died with the old store
        (the next published version replaces it)."""
        self.puller = WeightPuller(self.store, self.puller.link_bytes_per_s)
        self._fetched = None
        if lost:
            self.pending = None

    async def prefetch(self) -> None:
        """Finish pulling the pending version without suspending anything (rollout and training go on);
        the next ``update_workers`` then only swaps. No-op when nothing is pending or it is fetched."""
        if self.pending is not None and self._fetched is None:
            self._fetched = await self.puller.take(self.version)

    async def update_workers(self) -> dict[str, float]:
        """Step ③: take the latest published version and update every inference worker to it."""
        if self.pending is None:
            return {}
        version, push = self.version, self.pending
        weights, pull = self._fetched if self._fetched is not None else await self.puller.take(version)
        self._fetched = None
        t0 = time.perf_counter()
        await self.proxy.update_weights(weights)
        self.pending = None
        metrics = pull.as_metrics()
        metrics["system/weight_push_s"] = push.push_s
        metrics["system/weight_update_s"] = time.perf_counter() - t0
        return metrics
