"""Covers the bucketed weight store: bucketing, publish-once visibility, a version fetched from the trainer's
weight source in the background while rollout runs, and a complete version that loads into a fresh model with
identical logits."""
import asyncio

import pytest
import torch

from rollart.models import load_weights
from rollart.trainer import TrainerConfig
from rollart.trainer.torch_trainer import TorchTrainer
from rollart.weightplane.store import WeightStore, bucketize, tensor_bytes
from rollart.weightplane import WeightRelay, WeightSource
from rollart.types import WeightBucket
from rollart.messages import FetchVersion, PublishVersion, PutBucket, WeightAddress

from tests.trainer.tiny_policy import make_model, make_trajectories


def test_bucketize_respects_size_and_order():
    named = [("a", torch.zeros(10)), ("b", torch.zeros(10)), ("big", torch.zeros(100)), ("c", torch.zeros(5))]
    buckets = bucketize(named, bucket_bytes=80)
    assert [[n for n, _ in b] for b in buckets] == [["a", "b"], ["big"], ["c"]]
    for b in buckets:
        assert len(b) == 1 or sum(tensor_bytes(t) for _, t in b) <= 80
    with pytest.raises(ValueError, match="bucket_bytes"):
        bucketize(named, 0)


def test_store_publishes_complete_versions_only_and_drops_old_ones():
    store = WeightStore(keep_versions=2)
    store.put_bucket(PutBucket(WeightBucket(1, {"x": torch.ones(2)}, 0)))
    with pytest.raises(KeyError, match="not published"):
        store.get_bucket(1, 0)
    with pytest.raises(ValueError, match="buckets \\[1\\]"):
        store.publish(PublishVersion(1, num_buckets=2))
    store.put_bucket(PutBucket(WeightBucket(1, {"y": torch.zeros(3)}, 1)))
    store.publish(PublishVersion(1, 2))
    assert store.latest_version() == 1
    assert store.manifest(1)["names"] == ["x", "y"] and store.manifest(1)["bytes"] == 20
    for v in (2, 3):
        store.put_bucket(PutBucket(WeightBucket(v, {"x": torch.full((2,), float(v))}, 0)))
        store.publish(PublishVersion(v, 1))
    with pytest.raises(KeyError, match="available: \\[2, 3\\]"):
        store.manifest(1)
    with pytest.raises(ValueError, match="not newer"):
        store.put_bucket(PutBucket(WeightBucket(3, {"x": torch.ones(2)}, 0)))


async def test_trainer_weights_flow_through_store_and_load_identically():
    trainer = TorchTrainer(TrainerConfig(num_threads=1, lr=1e-2), model=make_model(0))
    trainer.train_step(make_trajectories())
    source, store, worker = WeightSource(), WeightStore(), WeightRelay()
    await source.start()
    await store.on_start()
    await worker.start()
    try:
        info = await source.publish(trainer.version, trainer.named_tensors(), 4096)
        assert info["num_buckets"] > 3 and info["bytes"] == sum(tensor_bytes(t) for _, t in trainer.named_tensors())

        # rollout keeps running while the store fetches the version bucket by bucket
        ticks = 0
        fetch = asyncio.ensure_future(store.fetch(FetchVersion(trainer.version, source.address)))
        while not fetch.done():
            ticks += 1
            await asyncio.sleep(0)
        stats = fetch.result()
        assert ticks > stats["num_buckets"] and stats["bytes"] == info["bytes"]
        assert store.latest_version() == trainer.version
        assert store.manifest(trainer.version)["names"] == [n for n, _ in trainer.named_tensors()]

        worker.pull(trainer.version, [await store.weight_address(WeightAddress())])
        named, _ = await worker.take(trainer.version)
        # the published version is a snapshot: training further does not change it
        trainer.train_step(make_trajectories(seed=1))
        fresh = make_model(seed=123)
        load_weights(fresh, named.named_tensors())
        ids = torch.randint(0, 32, (2, 9))
        ref = make_model(seed=5)
        load_weights(ref, [(n, store.get_bucket(trainer.version - 1, i).tensors[n])
                           for i in range(stats["num_buckets"]) for n in store.get_bucket(trainer.version - 1, i).tensors])
        assert torch.allclose(fresh(ids), ref(ids))
        assert not torch.allclose(fresh(ids), trainer.policy(ids))
        with pytest.raises(ValueError, match="not newer"):
            await store.fetch(FetchVersion(trainer.version - 1, source.address))
    finally:
        await worker.close()
        await store.on_stop()
        await source.close()
