"""Covers rollart.distributed.cluster_config and its place in PipelineConfig: cluster.backend=local|ray settings
are checked where they enter, with one line naming the setting."""
import pytest

from rollart.config import ConfigError, apply_overrides, parse_overrides
from rollart.distributed.cluster_config import ClusterConfig
from rollart.pipeline import PipelineConfig


def test_local_is_the_default_and_ray_settings_parse_from_the_command_line():
    assert PipelineConfig().cluster == ClusterConfig(backend="local")
    cfg = parse_overrides(PipelineConfig(), ["cluster.backend=ray", "cluster.address=10.0.0.5:6379",
                                             "cluster.gpus_per_device=2"])
    assert (cfg.cluster.backend, cfg.cluster.address, cfg.cluster.gpus_per_device) == ("ray", "10.0.0.5:6379", 2.0)


@pytest.mark.parametrize("overrides,message", [
    (["cluster.backend=slurm"], "cluster.backend="),
    (["cluster.address=auto"], "cluster.address / cluster.bind_host apply to cluster.backend=ray only"),
    (["cluster.backend=ray", "cluster.gpus_per_device=-2"], "a GPU count >= 0, or -1 \\(auto\\)"),
    (["cluster.backend=ray", "cluster.cpus_per_actor=0"], "cluster.cpus_per_actor=0.0 must be > 0"),
    (["cluster.backend=ray", "actor_mode=inprocess"], "cluster.backend=ray starts actors as processes on Ray nodes"),
    (["cluster.backend=ray", "trainer_cpus=0"], "trainer_cpus/rollout_cpus pin cores of this machine"),
])
def test_bad_cluster_settings_stop_with_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(PipelineConfig(), overrides)
