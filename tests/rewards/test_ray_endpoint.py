"""Covers rollart.rewards.ray_endpoint on a local multi-node Ray cluster: with cluster.backend=ray a run's
serverless reward endpoint is placed by Ray on a node of reward.hw_class, answers real HTTP calls, and when that
node is removed Ray restarts it on another node of the class and calls follow it there; a class no node
declares is one clear line."""
import asyncio

import pytest

ray = pytest.importorskip("ray", reason="the ray tests need Ray: pip install -e '.[ray]'")
from ray.cluster_utils import Cluster as RayCluster  # noqa: E402

from rollart.config import ConfigError  # noqa: E402
from rollart.distributed.cluster_config import ClusterConfig  # noqa: E402
from rollart.pipeline.config import PipelineConfig  # noqa: E402
from rollart.rewards.scoring import Scoring  # noqa: E402
from rollart.rewards.config import RewardConfig  # noqa: E402
from rollart.rewards.ray_endpoint import RayEndpoint  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture
def cluster():
    c = RayCluster(initialize_head=True, head_node_args={"num_cpus": 0})  # nothing runs on the head
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def test_endpoint_is_placed_on_its_class_and_follows_a_restart_on_another_node(cluster, tmp_path):
    other = cluster.add_node(num_cpus=1)  # a CPU node without the class: never chosen
    first = cluster.add_node(num_cpus=1, resources={"RW": 1})
    ray.init(address=cluster.address)
    cfg = PipelineConfig(model=str(tmp_path), reward=RewardConfig(serverless=True, hw_class="RW", retries=1,
                                                                   backoff_s=0.05),
                         cluster=ClusterConfig(backend="ray", address=cluster.address))

    async def go():
        with pytest.raises(ConfigError, match=r"reward.hw_class='GPU-X': no node of the Ray cluster declares it"):
            await RayEndpoint(RewardConfig(serverless=True, hw_class="GPU-X")).start()
        scoring = await Scoring.start(cfg.reward, tokenizer=None, ray_cpus=cfg.cluster.cpus_per_actor)
        try:
            assert isinstance(scoring.local, RayEndpoint)
            call = scoring.local.following(scoring.client)
            assert await call("math_reward", "Answer: 42", "42") == 1.0
            spare = cluster.add_node(num_cpus=1, resources={"RW": 1})
            cluster.remove_node(first)  # the endpoint's node is gone: Ray restarts it on the spare one
            assert await call("math_reward", "Answer: 7", "7") == 1.0
            assert await call("math_reward", "Answer: 8", "7") == 0.0
            return spare.node_id, list(scoring.local.placements), scoring.client.url
        finally:
            await scoring.close()

    spare, placements, url = asyncio.run(go())
    assert [p["node_id"] for p in placements] == [first.node_id, spare], placements
    assert other.node_id not in {p["node_id"] for p in placements}
    assert placements[0]["url"] != placements[1]["url"] and url == placements[1]["url"]

