"""Covers the trainer and the weight store as real process actors over ZeroMQ: train_step on Trajectory
dataclasses, the version fetched by the store straight from the trainer's process (never through this one),
pulled here in the background while another coroutine runs, and loaded into a fresh model with the trainer
checkpoint's exact logits."""
import asyncio
import os

import torch

from rollart.actors import ActorSystem
from rollart.models import load_model, load_weights, save_model
from rollart.trainer import TrainerConfig
from rollart.trainer.checkpoint import latest
from rollart.weightplane import WeightRelay
from rollart.weightplane.traffic import available, tcp_bytes
from rollart.messages import (FetchVersion, GetVersion, PublishWeights, ResetTrainer, SaveCheckpoint, TrainStep,
                              WeightAddress)

from tiny_policy import make_model, make_trajectories


async def test_trainer_and_store_actors_end_to_end(tmp_path):
    save_model(make_model(0), tmp_path / "policy")
    cfg = TrainerConfig(model_path=str(tmp_path / "policy"), num_threads=1, lr=1e-2)
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=30.0) as system:
        trainer = await system.spawn("rollart.trainer.actor:TrainerActor", cfg, name="trainer")
        store = await system.spawn("rollart.weightplane.store:WeightStore", name="store")
        metrics = await trainer.send(TrainStep(make_trajectories()), timeout=120)
        assert metrics["charts/version"] == 1.0
        version = await trainer.send(GetVersion())
        source = (await trainer.send(WeightAddress())).address
        before = tcp_bytes(os.getpid()) if available() else None
        info, fetched = await asyncio.gather(trainer.send(PublishWeights(version, 8192)),
                                             store.send(FetchVersion(version, source)))
        assert info.num_buckets == fetched["num_buckets"] > 1 and fetched["bytes"] == info.bytes
        assert await store.send(GetVersion()) == 1
        if before is not None:  # the version went trainer -> store without touching this process
            moved = sum(tcp_bytes(os.getpid())) - sum(before)
            assert moved < info.bytes / 20, (moved, info.bytes)

        puller = WeightRelay()
        await puller.start()
        ticks = 0
        puller.pull(version, [await store.send(WeightAddress())])
        pull = asyncio.ensure_future(puller.take(version))
        while not pull.done():
            ticks += 1
            await asyncio.sleep(0.001)
        named, stats = pull.result()
        await puller.close()
        assert ticks > 0 and stats.num_buckets == info.num_buckets and stats.bytes == info.bytes

        folder = await trainer.send(SaveCheckpoint(str(tmp_path / "ckpt"), {"data_position": 1}), timeout=60)
        assert latest(tmp_path / "ckpt") is not None and str(latest(tmp_path / "ckpt")) == folder

    fresh = make_model(seed=77)
    load_weights(fresh, named.named_tensors())
    saved = load_model(latest(tmp_path / "ckpt") / "model")
    ids = torch.randint(0, 32, (3, 10))
    assert torch.allclose(fresh(ids), saved(ids), atol=1e-6)
    assert not torch.allclose(fresh(ids), make_model(0)(ids))  # it really is the trained version


async def test_reset_trainer_serves_a_new_run_from_version_one(tmp_path):
    """One trainer process serving runs one after the other (benchmarks): after ``reset`` a fresh store fetches
    version 1 again, though the previous run had published a newer version from the same process."""
    save_model(make_model(0), tmp_path / "policy")
    cfg = TrainerConfig(model_path=str(tmp_path / "policy"), num_threads=1, lr=1e-2)
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=30.0) as system:
        trainer = await system.spawn("rollart.trainer.actor:TrainerActor", cfg, name="trainer")
        source = (await trainer.send(WeightAddress())).address
        await trainer.send(PublishWeights(2, 8192))
        assert await trainer.send(ResetTrainer()) == 0
        store = await system.spawn("rollart.weightplane.store:WeightStore", name="store")
        await asyncio.gather(trainer.send(PublishWeights(1, 8192)), store.send(FetchVersion(1, source)))
        assert await store.send(GetVersion()) == 1
