"""Covers WeightReceiver, an inference worker's side of the weight plane, over real ZeroMQ sockets: a started pull
is installed whole with its stats recorded, a held version is not installed twice, catching up pulls the store's
newer version and skips a store that does not answer, and a version with no pull and no source is refused."""
import pytest
import torch

from rollart.types import PullWeights, UpdateWeights, WeightBucket
from rollart.weightplane import WeightReceiver, WeightSource, WeightTransferError
from rollart.weightplane.server import fixed_address


def _named(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(f"layer{i}.weight", torch.randn(32, 16, generator=g)) for i in range(6)]


class FakeEngine:
    """What the receiver reads from and hands to the worker: the version held and the installs made."""

    def __init__(self):
        self.version = 0
        self.installed: list[WeightBucket] = []

    async def install(self, weights: WeightBucket) -> int:
        self.installed.append(weights)
        self.version = weights.version
        return weights.version


def _receiver(engine: FakeEngine, store: str = "") -> WeightReceiver:
    return WeightReceiver("w0", device="cpu", version=lambda: engine.version, install=engine.install, store=store)


async def test_a_started_pull_is_installed_whole_once_with_its_stats():
    named, engine, src = _named(), FakeEngine(), WeightSource()
    await src.start()
    receiver = _receiver(engine)
    try:
        info = await src.publish(1, named, bucket_bytes=4096)
        address = await receiver.pull(PullWeights(1, src.address))
        assert address == (await receiver.address()).address and address.startswith("tcp://")
        stats = await receiver.wait(1)
        assert stats["version"] == 1 and stats["bytes"] == info["bytes"] and stats["num_buckets"] > 1
        assert await receiver.update(UpdateWeights(1)) == 1
        (bucket,) = engine.installed
        assert [n for n, _ in bucket.named_tensors()] == [n for n, _ in named]
        assert all(torch.equal(bucket.tensors[n], t) for n, t in named)
        assert receiver.last_pull["sources"] == [src.address]
        assert await receiver.update(UpdateWeights(1)) == 1 and len(engine.installed) == 1  # held: nothing to do
    finally:
        await receiver.close()
        await src.close()


async def test_catch_up_installs_the_stores_newer_version_and_skips_a_silent_store():
    named, src = _named(1), WeightSource()
    await src.start()
    engine, silent = FakeEngine(), FakeEngine()
    receiver, nobody = _receiver(engine, store=src.address), _receiver(silent, store=fixed_address())
    try:
        await src.publish(2, named, bucket_bytes=4096)
        assert await receiver.catch_up(timeout_s=5.0) == 2
        assert [b.version for b in engine.installed] == [2]
        assert await receiver.catch_up(timeout_s=5.0) == 2 and len(engine.installed) == 1  # not newer: kept
        assert await nobody.catch_up(timeout_s=0.2) == 0 and silent.installed == []
    finally:
        for r in (receiver, nobody):
            await r.close()
        await src.close()


async def test_a_version_never_pulled_and_without_source_is_refused():
    engine = FakeEngine()
    receiver = _receiver(engine)
    try:
        with pytest.raises(WeightTransferError, match="never pulled here and no source"):
            await receiver.update(UpdateWeights(5))
        assert engine.installed == [] and engine.version == 0
    finally:
        await receiver.close()
