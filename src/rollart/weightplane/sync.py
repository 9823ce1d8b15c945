"""Weight synchronisation, as the coordinator drives it (RollArt §6.2 steps ③–⑤, §6.3 data movement).

The coordinator sends versions, addresses, suspend and resume; the weights themselves move peer to peer on
the weight plane (``rollart.weightplane``) and never pass through this process:

1. ``publish(v)`` after a train step: the trainer snapshots version v into buckets it serves; at the same
   time the weight store pulls it from the trainer, and every live inference worker is told where to pull
   it from (``PullWeights``): the first worker from the store, each other one from its parent in a relay
   tree of fan-out ``weights.relay_fanout`` (a chain by default), the store as fallback. Workers on the
   trainer's GPU node open its CUDA IPC buckets instead (``weights.cuda_ipc``). Rollout goes on meanwhile.
2. ``prefetch()`` waits, still without suspending anything, until every worker holds all of v.
3. ``update_workers()`` (step ③, with the proxy suspended) tells every worker to install v
   (``UpdateWeights``); each swaps between two engine steps and recomputes the KV of its requests.

A trainer that serves no weight plane (the shared training service) has its buckets pushed to the store by
this process instead: the version then crosses the coordinator once, to the store, never once per worker.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from rollart.actors import ActorDeadError, answering
from rollart.messages import (FetchVersion, ForgetWeights, PublishWeights, PullWeights, UpdateWeights, WaitWeights,
                              WeightAddress, WeightBuckets, WeightEndpoint)
from rollart.weightplane.store import WeightSyncStats, push_weights
from rollart.weightplane.config import WeightPlaneConfig
from rollart.weightplane.relay import mark_retrieved

log = logging.getLogger("rollart.pipeline")


class WeightSync:
    def __init__(self, trainer: Any, store: Any, proxy: Any, bucket_bytes: int,
                 config: WeightPlaneConfig | None = None, push_bytes_per_s: float = 0.0):
        self.trainer = trainer
        self.store = store
        self.proxy = proxy
        self.bucket_bytes = bucket_bytes
        self.push_bytes_per_s = push_bytes_per_s
        """> 0 EMULATES a slower trainer -> store link (the pulls, which wait for the store's buckets, follow it)."""
        self.cfg = config or WeightPlaneConfig()
        self.version = 0
        """The newest version published (0: the initial weights every worker starts from)."""
        self.pending: WeightSyncStats | None = None
        self.store_address = ""
        self.trainer_info: WeightEndpoint | None = None
        """The trainer's weight plane; None until asked, and while a trainer serves none (``trainer_serves``)."""
        self.trainer_serves = True
        self.store_moved: list[Callable[[str], None]] = []
        """Called with the store's new weight-plane address when a restarted store serves on another one (it
        restarted on another node): whoever hands the address to actors that start later (restarted workers)."""
        self._workers: dict[str, WeightEndpoint] = {}
        """Worker name -> its weight plane (node and cuda decide CUDA IPC; a restart keeps both)."""
        self._pulls: dict[str, asyncio.Task] = {}
        self._push: asyncio.Future | None = None
        """The store's fetch of the version last published, until someone has waited it out (``pushed``)."""
        self._store_stale = False  # the store restarted since its address was asked
        store.on_restart(self._store_died)
        if trainer is not None:  # None: a sync that only moves weights already in the store
            trainer.on_restart(self._trainer_died)

    async def _addresses(self) -> None:
        if not self.store_address or self._store_stale:
            await self._ask_store()
        if self.trainer_info is None and self.trainer_serves:
            try:
                self.trainer_info = await self.trainer.send(WeightAddress())
            except Exception as e:  # noqa: BLE001 - a trainer without a weight plane: push through here
                log.info("the trainer serves no weight plane (%s); its versions are pushed to the store", e)
                self.trainer_serves = False

    async def publish(self, version: int, background: bool = False) -> WeightSyncStats:
        """Trainer -> store (once per version), and every worker starts pulling it in the background. With
        ``background`` (the overlapped loop: RollArt §6.3's asynchronous weight update engine) it returns once the
        trainer has snapshotted the version, and the store's fetch goes on behind the next train step; ``prefetch``
        and ``update_workers`` wait for it (``pushed``), and ``push_s`` is filled in when it ends."""
        t0 = time.perf_counter()
        await self._addresses()
        if self.trainer_info is not None:
            ipc = self.cfg.cuda_ipc and self.trainer_info.cuda
            pulls = asyncio.ensure_future(self.start_pulls(version))  # they wait for buckets to appear
            fetch = asyncio.ensure_future(self.store.send(FetchVersion(
                version, self.trainer_info.address, self.cfg.timeout_s, self.cfg.retries, self.push_bytes_per_s)))
            fetch.add_done_callback(_retrieved)
            try:
                info = await self.trainer.send(PublishWeights(version, self.bucket_bytes, ipc))
                stats = WeightSyncStats(version, num_buckets=info.num_buckets, bytes=info.bytes)
                self._push = _landing(fetch, stats, t0)
                if not background:
                    await self.pushed()
            finally:
                await pulls
        else:
            raw = await self.trainer.send(WeightBuckets(self.bucket_bytes))
            stats = await push_weights(self.store, [list(zip(names, tensors)) for names, tensors in raw], version,
                                       self.push_bytes_per_s)
            await self.start_pulls(version)
            stats.push_s = time.perf_counter() - t0
        self.version = version
        self.pending = stats
        return stats

    async def pushed(self) -> None:
        """Wait until the store holds the version last published (a background push); its failure is raised here,
        once."""
        push = self._push
        if push is None:
            return
        try:
            await push  # held in _push meanwhile: a trainer that dies now fails it at once (_trainer_died)
        finally:
            if self._push is push:
                self._push = None

    def restart_pull(self, lost: bool) -> None:
        """The store restarted (empty, on the same address), or the trainer died under a version's push: the pulls
        under way are void; ``lost``: the pending version is gone (the next published version replaces it)."""
        for task in self._pulls.values():
            task.cancel()
        self._pulls = {}
        if lost:
            self.pending = None
            self._push = None  # its failure is the store's death, which the caller is handling

    def _trainer_died(self, name: str, reason: str) -> None:
        """The trainer died: a version the store is still fetching from it cannot arrive, so whoever waits for that
        push learns it now, not after the store's timeout."""
        if self._push is not None and not self._push.done():
            self._push.set_exception(ActorDeadError(name, reason))

    def _store_died(self, name: str, reason: str) -> None:
        """The store died and restarts: the pulls of the version it was handing out cannot finish (their source
        is gone; on another node even its address changes), so nobody waits on them; that version is lost and
        the next published one replaces it (workers drop the stale pull when they start the newer one)."""
        if self._pulls:
            log.warning("weight store %s died (%s): the workers' pulls of version %d are dropped", name, reason,
                        self.version)
        self._store_stale = True  # no pull is sent to its old address
        self.restart_pull(lost=True)

    async def store_restarted(self) -> None:
        """The store restarted, perhaps on another node and so on another address: ask it again."""
        self._store_stale = True
        await self._ask_store()

    async def _ask_store(self) -> None:
        """Ask the store where it serves; if it moved, the next messages to workers name the new address and
        ``store_moved`` hooks are told."""
        old = self.store_address
        self.store_address = await self.store.send(WeightAddress())
        self._store_stale = False
        if old and self.store_address != old:
            log.warning("weight store %s serves weights at %s now (was %s)", self.store.name, self.store_address, old)
            for hook in self.store_moved:
                hook(self.store_address)

    def trainer_restarted(self) -> None:
        """A restarted trainer serves its weights on a new address: ask it again before the next publish."""
        self.trainer_info = None

    async def rewind_workers(self, version: int) -> None:
        """The trainer went back to ``version``: every live worker forgets the versions >= it that it holds or
        is pulling (their numbers will be published again with other weights)."""
        for slot in [s for s in self.proxy.workers.values() if not s.dead]:
            try:
                await slot.handle.send(ForgetWeights(version))
            except Exception as e:  # noqa: BLE001 - a worker that is down pulls the latest when it is back
                log.warning("worker %s could not forget weight versions >= %d: %s", slot.name, version, e)

    async def start_pulls(self, version: int) -> None:
        """Tell every live worker where to pull ``version`` from: IPC from the trainer where it shares its GPU
        node, else its parent in the relay tree (the first one: the store)."""
        for task in self._pulls.values():
            task.cancel()
        self._pulls = {}
        # a restarting worker is not waited on (its restart may wait for capacity): the proxy resyncs it when it is back
        slots = [s for s in self.proxy.workers.values() if not s.dead and answering(s.handle)]
        trainer = self.trainer_info
        relayed: list[Any] = []
        for slot in slots:
            info = self._workers.get(slot.name)
            if info is None:
                try:
                    info = self._workers[slot.name] = await slot.handle.send(WeightAddress())
                except Exception as e:  # noqa: BLE001 - a dead worker is re-synced when it comes back
                    log.warning("worker %s did not answer WeightAddress (%s)", slot.name, e)
                    continue
            use_ipc = (self.cfg.cuda_ipc and trainer is not None and trainer.cuda and info.cuda
                       and info.node == trainer.node)
            if use_ipc:
                await self._pull(slot, version, self.store_address, ipc_source=trainer.address)
            else:
                relayed.append(slot)
        addresses: list[str] = []
        f = self.cfg.relay_fanout
        for j, slot in enumerate(relayed):  # heap order: worker j's parent is worker (j - 1) // f
            parent = self.store_address if j == 0 else addresses[(j - 1) // f] or self.store_address
            addresses.append(await self._pull(slot, version, parent))

    async def _pull(self, slot: Any, version: int, source: str, ipc_source: str = "") -> str:
        msg = PullWeights(version, source, fallback=self.store_address, ipc_source=ipc_source,
                          timeout_s=self.cfg.timeout_s, retries=self.cfg.retries)
        try:
            address = await slot.handle.send(msg)
        except Exception as e:  # noqa: BLE001 - its children fall back to the store; update re-syncs it
            log.warning("worker %s could not start pulling weight version %d: %s", slot.name, version, e)
            return ""
        self._pulls[slot.name] = asyncio.ensure_future(slot.handle.send(WaitWeights(version)))
        self._pulls[slot.name].add_done_callback(mark_retrieved)  # update_workers reports its failure
        return address

    async def prefetch(self) -> None:
        """Wait until every worker holds the pending version, without suspending anything (rollout and
        training go on); the next ``update_workers`` then only swaps."""
        await self.pushed()
        if self._pulls:
            await asyncio.gather(*self._pulls.values(), return_exceptions=True)

    async def update_workers(self) -> dict[str, float]:
        """Step ③: every live worker installs the latest published version (pulling what it lacks itself)."""
        if self.pending is None:
            return {}
        t0 = time.perf_counter()
        await self.pushed()
        results = await asyncio.gather(*self._pulls.values(), return_exceptions=True)
        exposed = time.perf_counter() - t0
        for name, r in zip(self._pulls, results):
            if isinstance(r, BaseException):  # the worker pulls it again from the store at install
                log.warning("worker %s: background pull of weight version %d failed: %s", name, self.version, r)
        self._pulls = {}
        stats = self.pending
        stats.pull_accum_s = max((r["seconds"] for r in results if isinstance(r, dict)), default=0.0)
        stats.pull_exposed_s = exposed
        t1 = time.perf_counter()
        await self.proxy.update_weights(UpdateWeights(self.version, source=self.store_address))
        self.pending = None
        metrics = stats.as_metrics()
        metrics["system/weight_update_s"] = time.perf_counter() - t1
        return metrics


def _landing(fetch: asyncio.Future, stats: WeightSyncStats, t0: float) -> asyncio.Future:
    """A future that resolves when the store's ``fetch`` does (``stats.push_s`` then set), or fails first when its
    source dies (``WeightSync._trainer_died``)."""
    landed = asyncio.get_running_loop().create_future()
    landed.add_done_callback(_retrieved)

    def done(f: asyncio.Future) -> None:
        if landed.done():
            return
        if f.cancelled():
            landed.cancel()
        elif f.exception() is not None:
            landed.set_exception(f.exception())
        else:
            stats.push_s = time.perf_counter() - t0
            landed.set_result(None)
    fetch.add_done_callback(done)
    return landed


def _retrieved(future: asyncio.Future) -> None:
    """Mark a background transfer's failure as seen (``pushed`` raises it to whoever waits)."""
    if not future.cancelled():
        future.exception()
