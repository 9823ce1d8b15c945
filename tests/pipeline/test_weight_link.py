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
