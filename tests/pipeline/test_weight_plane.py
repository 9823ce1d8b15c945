"""Covers the weight plane inside a training run: three inference worker processes train as before, every
worker ends each sync with the trainer's exact weights, and the coordinator's own TCP traffic per sync is a
tiny fraction of the model (measured by the kernel's per-socket counters)."""
import asyncio
import os

import pytest

from rollart.pipeline import Coordinator
from rollart.weightplane.sync import WeightSync
from rollart.weightplane.traffic import available, tcp_bytes
from rollart.messages import WeightsDigest

from run_configs import config
from test_coordinator import FROZEN

pytestmark = [pytest.mark.slow,  # four actor processes and a 2-step run: ~30-60 s on 2 shared cores
              pytest.mark.skipif(not available(), reason="needs `ss` (iproute2) to read per-socket TCP counters")]


def test_three_workers_train_and_match_the_trainer_while_the_coordinator_carries_no_weights(
        tmp_path, tiny_model, monkeypatch):
    measured = []  # (coordinator bytes over publish + update, model bytes) per sync
    checks = []
    publish, update = WeightSync.publish, WeightSync.update_workers

    async def counted_publish(self, version, background=False):
        self._window = tcp_bytes(os.getpid())
        return await publish(self, version, background)

    async def counted_update(self):
        model_bytes = self.pending.bytes if self.pending else 0
        out = await update(self)
        if model_bytes:
            after = tcp_bytes(os.getpid())
            measured.append((sum(after) - sum(self._window), model_bytes))
            trainer = await self.trainer.send(WeightsDigest())
            for slot in self.proxy.workers.values():
                worker = await slot.handle.send(WeightsDigest())
                assert worker.keys() <= trainer.keys()
                checks.append(all(trainer[n] == c for n, c in worker.items()))
        return out

    monkeypatch.setattr(WeightSync, "publish", counted_publish)
    monkeypatch.setattr(WeightSync, "update_workers", counted_update)
    cfg = config(tmp_path, tiny_model, mode="sync", total_steps=2, actor_mode="process", num_inference_workers=3,
                 hw_classes=("H20",), bucket_bytes=64 << 10)
    result = asyncio.run(Coordinator(cfg, [FROZEN]).run())
    assert result.steps == 2 and result.version == 2
    assert len(measured) == 2 and checks == [True] * 6  # every worker holds the trainer's weights after each sync
    for moved, model in measured:
        # the old path carried the model in and out once per worker (>= 4x model bytes here)
        assert moved < 0.05 * model, (moved, model)
    print("coordinator bytes per sync / model bytes:", [round(m / b, 4) for m, b in measured])
