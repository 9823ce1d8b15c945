"""PipelineConfig.weight_link_bytes_per_s and weights.*: validation, and that the simulated link rate reaches
the workers' pulls."""
import pytest

from rollart.config import ConfigError, parse_overrides
from rollart.pipeline import PipelineConfig
from rollart.pipeline.weights import WeightSync
from rollart.types import PullWeights


def test_negative_link_rate_is_rejected_with_the_field_name():
    with pytest.raises(ConfigError, match="weight_link_bytes_per_s"):
        PipelineConfig(weight_link_bytes_per_s=-1.0)


def test_weight_plane_settings_are_checked_with_their_names():
    with pytest.raises(SystemExit, match="weights.relay_fanout=0 must be an int >= 1"):
        parse_overrides(PipelineConfig(), ["weights.relay_fanout=0"])
    assert parse_overrides(PipelineConfig(), ["weights.cuda_ipc=false"]).weights.cuda_ipc is False


class _Slot:
    def __init__(self, name):
        self.name, self.dead, self.sent = name, False, []
        self.handle = self

    async def send(self, msg):
        self.sent.append(msg)
        return f"tcp://{self.name}"

    async def call(self, method, *args):
        return {"address": f"tcp://{self.name}", "node": "n", "cuda": False} if method == "weight_address" else {}


class _Proxy:
    def __init__(self, n):
        self.workers = {f"w{i}": _Slot(f"w{i}") for i in range(n)}


async def test_the_link_rate_and_the_relay_tree_reach_the_workers_pull_messages():
    proxy = _Proxy(4)
    sync = WeightSync(None, None, proxy, 1 << 20, link_bytes_per_s=5e6)
    sync.store_address, sync.trainer_info = "tcp://store", {"address": "tcp://trainer", "node": "n", "cuda": False}
    await sync.start_pulls(3)
    msgs = [proxy.workers[f"w{i}"].sent[0] for i in range(4)]
    assert all(isinstance(m, PullWeights) and m.version == 3 and m.link_bytes_per_s == 5e6 for m in msgs)
    assert [m.source for m in msgs] == ["tcp://store", "tcp://w0", "tcp://w1", "tcp://w2"]  # a chain
    assert all(m.fallback == "tcp://store" and not m.ipc_source for m in msgs)


async def test_a_reset_trainer_serves_version_1_again(tmp_path):
    """One trainer serving several runs (reset between them): the new run's version 1 must not be dropped as
    older than the last run's versions still held by the trainer's weight source."""
    from rollart.pipeline.trainer_actor import TrainerActor
    from rollart.tools.make_tiny_model import make_tiny_model
    from rollart.trainer import TrainerConfig

    actor = TrainerActor(TrainerConfig(model_path=str(make_tiny_model(tmp_path / "m", hidden=32, layers=1)),
                                       num_threads=1))
    await actor.on_start()
    try:
        await actor.publish_weights(4, 1 << 20)
        assert actor.reset() == 0
        await actor.publish_weights(1, 1 << 20)
        assert actor.source.server.versions() == [1]
    finally:
        await actor.on_stop()
