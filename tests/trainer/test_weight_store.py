"""Covers the bucketed weight store: bucketing, publish-once visibility, background pull overlapping
rollout, atomic hand-over of a complete version that loads into a fresh model with identical logits."""
import asyncio

import pytest
import torch

from rollart.models import load_weights
from rollart.trainer import TrainerConfig
from rollart.trainer.torch_trainer import TorchTrainer
from rollart.trainer.weight_store import (LocalHandle, WeightPuller, WeightStore, bucketize, push_weights,
                                          tensor_bytes)
from rollart.types import WeightBucket

from tiny_policy import make_model, make_trajectories


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
    store.put_bucket(WeightBucket(1, {"x": torch.ones(2)}, 0))
    with pytest.raises(KeyError, match="not published"):
        store.get_bucket(1, 0)
    with pytest.raises(ValueError, match="buckets \\[1\\]"):
        store.publish(1, num_buckets=2)
    store.put_bucket(WeightBucket(1, {"y": torch.zeros(3)}, 1))
    store.publish(1, 2)
    assert store.latest_version() == 1
    assert store.manifest(1)["names"] == ["x", "y"] and store.manifest(1)["bytes"] == 20
    for v in (2, 3):
        store.put_bucket(WeightBucket(v, {"x": torch.full((2,), float(v))}, 0))
        store.publish(v, 1)
    with pytest.raises(KeyError, match="available: \\[2, 3\\]"):
        store.manifest(1)
    with pytest.raises(ValueError, match="not newer"):
        store.put_bucket(WeightBucket(3, {"x": torch.ones(2)}, 0))


class CountingStore(WeightStore):
    def __init__(self):
        super().__init__()
        self.bucket_calls = 0

    def get_bucket(self, version, index):
        self.bucket_calls += 1
        return super().get_bucket(version, index)


async def test_trainer_weights_flow_through_store_and_load_identically():
    trainer = TorchTrainer(TrainerConfig(num_threads=1, lr=1e-2), model=make_model(0))
    trainer.train_step(make_trajectories())
    store = CountingStore()
    handle = LocalHandle(store)
    push = await push_weights(handle, trainer.state_dict_buckets(4096), trainer.version)
    assert push.num_buckets > 3 and push.push_s > 0 and push.bytes == sum(
        tensor_bytes(t) for _, t in trainer.named_tensors())

    # rollout keeps running while the buckets are pulled: their events interleave
    log = []
    puller = WeightPuller(handle)

    async def rollout():
        for i in range(200):
            log.append(("rollout", store.bucket_calls))
            await asyncio.sleep(0)

    puller.start(trainer.version)
    await rollout()
    assert puller.done()
    pulls_seen_by_rollout = sorted({calls for _, calls in log})
    assert pulls_seen_by_rollout[0] == 0 and pulls_seen_by_rollout[-1] == push.num_buckets
    assert len(pulls_seen_by_rollout) == push.num_buckets + 1  # rollout ran between every two buckets
    calls_before_take = store.bucket_calls
    named, stats = await puller.take(trainer.version)
    assert store.bucket_calls == calls_before_take  # nothing left to fetch at the update point
    assert stats.num_buckets == push.num_buckets and stats.bytes == push.bytes and stats.pull_accum_s > 0

    # the published version is a snapshot: training further does not change it
    trainer.train_step(make_trajectories(seed=1))
    fresh = make_model(seed=123)
    load_weights(fresh, named.named_tensors())
    ids = torch.randint(0, 32, (2, 9))
    ref = make_model(seed=5)
    load_weights(ref, (await _named_of(handle, trainer.version - 1)).named_tensors())
    assert torch.allclose(fresh(ids), ref(ids))
    assert not torch.allclose(fresh(ids), trainer.policy(ids))


async def _named_of(handle, version):
    named, _ = await WeightPuller(handle).take(version)  # never started: a fully exposed pull
    return named


async def test_take_without_start_is_fully_exposed_and_unknown_version_errors():
    store = WeightStore()
    handle = LocalHandle(store)
    named_in = [(f"w{i}", torch.arange(2.0) + i) for i in range(3)]
    await push_weights(handle, bucketize(named_in, 8), version=4)
    named, stats = await WeightPuller(handle).take(4)
    assert named.names == ["w0", "w1", "w2"] and named.version == 4
    assert torch.equal(named.tensors["w2"], torch.tensor([2.0, 3.0]))
    # every bucket pull happened inside take(): the exposed interval contains all of them
    assert stats.num_buckets == 3 and stats.pull_exposed_s >= stats.pull_accum_s
    with pytest.raises(KeyError, match="version 9 is not published"):
        await WeightPuller(handle).take(9)
