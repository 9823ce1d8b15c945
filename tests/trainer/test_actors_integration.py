"""Covers the trainer and the weight store as real process actors over ZeroMQ: train_step on Trajectory
dataclasses, buckets pushed once to the store actor, pulled in the background while another coroutine runs,
and the pulled version loads into a fresh model with the trainer checkpoint's exact logits."""
import asyncio

import torch

from rollart.actors import ActorSystem
from rollart.models import load_model, load_weights, save_model
from rollart.trainer import TrainerConfig
from rollart.trainer.checkpoint import latest
from rollart.trainer.weight_store import WeightPuller, push_weights

from tiny_policy import make_model, make_trajectories


async def test_trainer_and_store_actors_end_to_end(tmp_path):
    save_model(make_model(0), tmp_path / "policy")
    cfg = TrainerConfig(model_path=str(tmp_path / "policy"), num_threads=1, lr=1e-2)
    async with ActorSystem(heartbeat_interval=0.5, heartbeat_timeout=30.0) as system:
        trainer = await system.spawn("rollart.trainer.torch_trainer:TorchTrainer", cfg, name="trainer")
        store = await system.spawn("rollart.trainer.weight_store:WeightStore", name="store")
        metrics = await trainer.call("train_step", make_trajectories(), timeout=120)
        assert metrics["charts/version"] == 1.0
        version = await trainer.call("get_version")
        buckets = await trainer.call("state_dict_buckets", 8192, timeout=60)
        push = await push_weights(store, [list(map(tuple, b)) for b in buckets], version)
        assert push.num_buckets == len(buckets) > 1
        assert await store.call("latest_version") == 1

        puller = WeightPuller(store)
        ticks = 0

        async def rollout_meanwhile():
            nonlocal ticks
            while not puller.done():
                ticks += 1
                await asyncio.sleep(0.001)

        puller.start(version)
        await rollout_meanwhile()
        named, pull = await puller.take(version)
        assert ticks > 0 and pull.num_buckets == push.num_buckets and pull.bytes == push.bytes

        folder = await trainer.call("save_checkpoint", str(tmp_path / "ckpt"), {"data_position": 1}, timeout=60)
        assert latest(tmp_path / "ckpt") is not None and str(latest(tmp_path / "ckpt")) == folder
        await trainer.call("close")

    fresh = make_model(seed=77)
    load_weights(fresh, named.named_tensors())
    saved = load_model(latest(tmp_path / "ckpt") / "model")
    ids = torch.randint(0, 32, (3, 10))
    assert torch.allclose(fresh(ids), saved(ids), atol=1e-6)
    assert not torch.allclose(fresh(ids), make_model(0)(ids))  # it really is the trained version
