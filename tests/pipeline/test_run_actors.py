"""rollart.pipeline.run_actors.start_actors: the run's workers started through the programming model (ResourceManager, Clusters, LLMProxy.from_cluster)."""
import dataclasses

import pytest

from rollart.config import ConfigError
from rollart.pipeline import PipelineConfig
from rollart.pipeline.resolve import resolve, with_pad_id
from rollart.pipeline.run_actors import run_resources, start_actors
from rollart.rollout.proxy_config import ProxyConfig
from rollart.trainer import TrainerConfig


def test_run_resources_hold_the_workers_classes_and_the_service_processes():
    assert run_resources(["H800", "H20", "H800"]).free_summary() == {"H800": 2, "H20": 1, "cpu": 2}
    assert run_resources(["cpu"], private_trainer=False).free_summary() == {"cpu": 2}
    with pytest.raises(ConfigError, match="hw_classes=.*unknown hardware class 'X1'"):
        run_resources(["X1"])


async def test_build_binds_every_worker_and_shares_a_trainer_passed_in(tiny_model):
    cfg = PipelineConfig(model=tiny_model, actor_mode="inprocess", num_inference_workers=3,
                         hw_classes=("H800", "H20"), proxy=ProxyConfig(hw_affinity={"FrozenLake": "H800"}),
                         trainer=TrainerConfig(num_threads=1), quiet=True)
    shared = object()
    c = await start_actors(with_pad_id(resolve(cfg), 0), trainer=shared)
    try:
        assert [(name, hw) for name, hw, _ in c.workers] == [("gen-0", "H800"), ("gen-1", "H20"), ("gen-2", "H800")]
        assert c.trainer is shared and [cl.name for cl in c.clusters] == ["gen", "weight-store"]
        assert {b.owner: b.hw_class for b in c.resources.bindings} == {
            "gen-0": "H800", "gen-1": "H20", "gen-2": "H800", "weight-store-0": "cpu"}
        assert {w.name: w.hw_class for w in c.proxy.workers.values()} == {"gen-0": "H800", "gen-1": "H20",
                                                                           "gen-2": "H800"}
        result = await c.proxy.generate("t", [5, 6], dict(max_tokens=2), task="FrozenLake")
        assert c.proxy.workers[result.worker].hw_class == "H800"  # the worker knows the name it was bound to
    finally:
        await c.close()
    assert c.resources.bindings == []


async def test_a_failed_start_raises_and_shuts_down(tmp_path, tiny_model):
    cfg = PipelineConfig(model=tiny_model, actor_mode="inprocess", trainer=TrainerConfig(num_threads=1), quiet=True)
    with pytest.raises(Exception, match=r"gen-0.__init__\(\) raised .*config.json not found"):
        await start_actors(with_pad_id(resolve(dataclasses.replace(cfg, model=str(tmp_path / "no-such-model"))), 0))
