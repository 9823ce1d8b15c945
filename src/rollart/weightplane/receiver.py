"""WeightReceiver: the inference worker's side of the weight plane.

An inference worker composes one. It owns the worker's ``WeightRelay`` (started on first use, staging where
the engine's weights live), and speaks for the worker to the coordinator's ``WeightSync``:

* ``pull(PullWeights)`` starts pulling a version from a relay parent in the background (rollout goes on);
  each bucket is served on to this worker's own children as it arrives;
* ``wait(version)`` / ``forget(first)`` / ``address()`` answer the coordinator's questions about that pull;
* ``update(UpdateWeights)`` waits for the rest of the pull (or, holding none, pulls the version from the store
  the message names) and hands the complete version to the worker's ``install``; nothing of a version that
  cannot be pulled intact is installed;
* ``catch_up()`` asks the weight store for its newest version and installs it when it is newer than the
  engine's (a worker restarted in place does this itself, no coordinator involved).

The receiver never touches the engine: it reads the engine's version and installs through the two callables
the worker gives it, so installing stays one command of the worker's loop, between two engine steps.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from rollart.messages import WeightEndpoint
from rollart.types import PullWeights, UpdateWeights, WeightBucket

log = logging.getLogger("rollart.weightplane")


class WeightReceiver:
    """Args:
        name: the worker's name (for logs).
        device: where the engine's weights live (``Engine.weights_device``): versions are staged there.
        version: returns the weight version the engine holds now.
        install: installs a complete version between two engine steps; returns the version now loaded.
        store: the weight store's weight-plane address ("" when the run has none).
        link_bytes_per_s: > 0 EMULATES a slower link into this worker (each bucket takes its bytes over this
            rate at least; benchmarks label such figures emulated); 0: the real link only.
        timeout_s, retries: ``weights.timeout_s`` and ``weights.retries`` of the pulls this worker starts itself
            (an install of a version it holds no pull of, ``catch_up``); a ``PullWeights`` carries its own.
    """

    def __init__(self, name: str, *, device: Any, version: Callable[[], int],
                 install: Callable[[WeightBucket], Awaitable[int]], store: str = "",
                 link_bytes_per_s: float = 0.0, timeout_s: float = 30.0, retries: int = 3) -> None:
        self.name = name
        self.device = device
        self.store = store
        self.link_bytes_per_s = link_bytes_per_s
        self.timeout_s = timeout_s
        self.retries = retries
        self._version = version
        self._install = install
        self._relay: Any = None  # WeightRelay, made and started on first use
        self.last_pull: dict = {}
        """Stats of the last completed pull: version, seconds, bytes, num_buckets, retries, sources."""

    async def relay(self) -> Any:
        """This worker's ``WeightRelay``, started."""
        if self._relay is None:
            from rollart.weightplane.relay import WeightRelay
            self._relay = WeightRelay(device=self.device, timeout_s=self.timeout_s, retries=self.retries)
        await self._relay.start()
        return self._relay

    async def pull(self, pull: PullWeights) -> str:
        """Start pulling ``pull.version`` in the background; returns this worker's own weight-plane address,
        which its relay children pull from."""
        relay = await self.relay()
        relay.pull(pull.version, [pull.source, pull.fallback], ipc_source=pull.ipc_source,
                   link_bytes_per_s=self.link_bytes_per_s, timeout_s=pull.timeout_s, retries=pull.retries,
                   names=self._names(pull.source, pull.fallback))
        return relay.address

    async def wait(self, version: int) -> dict:
        """Wait until the started pull of ``version`` is complete here; its stats (seconds, bytes, retries)."""
        stats = await (await self.relay()).wait(version)
        return self._record(stats)

    async def forget(self, first: int) -> list[int]:
        """Drop the versions >= ``first`` held or being pulled here (the engine's installed weights stay)."""
        return (await self.relay()).forget(first)

    async def address(self) -> WeightEndpoint:
        """Where this worker serves weights, its node and whether its weights live on a GPU (for CUDA IPC)."""
        from rollart.weightplane.cuda import node_id
        relay = await self.relay()
        return WeightEndpoint(relay.address, node_id(), relay.device.type == "cuda")

    async def update(self, update: UpdateWeights) -> int:
        """Install ``update``'s version: the weights it carries, else the complete pull of it (pulled from
        ``update.source`` when none was started here). Returns the version now loaded."""
        weights = update.weights
        if weights is None:
            if update.version == self._version():
                return update.version
            relay = await self.relay()
            weights, stats = await relay.take(update.version, [update.source] if update.source else [],
                                              self._names(update.source, update.source))
            self._record(stats)
        return await self._install(weights)

    async def catch_up(self, timeout_s: float = 5.0) -> int:
        """Pull and install the store's newest version when it is newer than the engine's; returns the version
        held. A store that does not answer within ``timeout_s`` (not up yet at the run's start) is skipped: the
        coordinator's next update reaches us. The newest published version may be one ahead of what the other
        workers run until the next swap: this worker's tokens are then one version fresher, never staler."""
        from rollart.weightplane.client import latest_version
        try:
            latest = await latest_version(self.store, timeout_s)
        except TimeoutError:
            log.info("%s: the weight store at %s did not answer; starting from the configured weights",
                     self.name, self.store)
            return self._version()
        if latest > self._version():
            version = await self.update(UpdateWeights(latest, source=self.store))
            log.warning("%s: pulled weight version %d from the store itself", self.name, version)
        return self._version()

    async def close(self) -> None:
        if self._relay is not None:
            await self._relay.close()
            self._relay = None

    def _names(self, source: str, store: str) -> dict[str, str]:
        """Who serves at the addresses a pull uses, for its error lines: the store, else a relay parent."""
        return {source: "a relay parent (another inference worker)", store: "the weight store",
                self.store: "the weight store"}

    def _record(self, stats: Any) -> dict:
        self.last_pull = {"version": stats.version, "seconds": stats.seconds, "bytes": stats.bytes,
                          "num_buckets": stats.num_buckets, "retries": stats.retries,
                          "sources": list(stats.by_source)}
        return self.last_pull
