"""PipelineConfig.weight_link_bytes_per_s and weights.*: validation, the relay tree of the workers' pulls, and that
the emulated link rate reaches each worker's pulls (its WeightReceiver)."""
import pytest

from rollart.config import ConfigError, parse_overrides
from rollart.pipeline import PipelineConfig
from rollart.weightplane.sync import WeightSync
from rollart.messages import PullWeights, WeightAddress, WeightEndpoint


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

    async def send(self, msg, timeout=None):
        if isinstance(msg, WeightAddress):
            return WeightEndpoint(f"tcp://{self.name}", "n", False)
        self.sent.append(msg)
        return f"tcp://{self.name}"


class _Store:
    def on_restart(self, callback):
        pass


class _Proxy:
    def __init__(self, n):
        self.workers = {f"w{i}": _Slot(f"w{i}") for i in range(n)}


async def test_the_relay_tree_reaches_the_workers_pull_messages():
    proxy = _Proxy(4)
    sync = WeightSync(None, _Store(), proxy, 1 << 20)
    sync.store_address, sync.trainer_info = "tcp://store", WeightEndpoint("tcp://trainer", "n", False)
    await sync.start_pulls(3)
    msgs = [proxy.workers[f"w{i}"].sent[0] for i in range(4)]
    assert all(isinstance(m, PullWeights) and m.version == 3 for m in msgs)
    assert [m.source for m in msgs] == ["tcp://store", "tcp://w0", "tcp://w1", "tcp://w2"]  # a chain
    assert all(m.fallback == "tcp://store" and not m.ipc_source for m in msgs)


async def test_the_emulated_link_rate_reaches_each_pull_of_a_worker(tiny_model):
    from rollart.engine import EngineConfig
    from rollart.inference.worker import InferenceWorker

    pulled = {}

    class Relay:
        address = "tcp://me"

        def pull(self, version, sources, **kw):
            pulled.update(kw, version=version)

    worker = InferenceWorker(EngineConfig(model=tiny_model, num_kv_blocks=8), link_bytes_per_s=5e6)
    worker.weights._relay = Relay()
    worker.weights.relay = lambda: _ready(worker.weights._relay)
    assert await worker.pull_weights(PullWeights(3, "tcp://store")) == "tcp://me"
    assert pulled["version"] == 3 and pulled["link_bytes_per_s"] == 5e6


async def _ready(value):
    return value
