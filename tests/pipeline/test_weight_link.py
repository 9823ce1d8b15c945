"""PipelineConfig.weight_link_bytes_per_s: validation and that WeightSync hands the simulated link rate to its puller."""
import pytest

from rollart.config import ConfigError
from rollart.pipeline import PipelineConfig
from rollart.pipeline.weights import WeightSync
from rollart.trainer.weight_store import LocalHandle, WeightStore


def test_negative_link_rate_is_rejected_with_the_field_name():
    with pytest.raises(ConfigError, match="weight_link_bytes_per_s"):
        PipelineConfig(weight_link_bytes_per_s=-1.0)


def test_zero_means_real_speed_and_a_rate_reaches_the_puller():
    store = LocalHandle(WeightStore())
    assert WeightSync(None, store, None, 1 << 20).puller.link_bytes_per_s is None
    assert WeightSync(None, store, None, 1 << 20, link_bytes_per_s=5e6).puller.link_bytes_per_s == 5e6
