"""Covers the run's device/dtype settings: validated once, handed by resolve to components left at auto."""
import dataclasses

import pytest

from rollart.config import ConfigError, parse_overrides
from rollart.engine.config import EngineConfig
from rollart.pipeline import PipelineConfig
from rollart.pipeline.resolve import resolve, with_pad_id
from rollart.trainer import TrainerConfig


def resolved(cfg: PipelineConfig, model: str = "/m", pad_id: int = 0) -> PipelineConfig:
    """``cfg`` resolved as a run of ``model`` whose tokenizer pads with ``pad_id`` would be."""
    return with_pad_id(resolve(dataclasses.replace(cfg, model=model)), pad_id)


def test_resolve_hands_the_run_s_device_and_dtype_to_a_trainer_left_at_auto():
    r = resolved(PipelineConfig(device="cpu", dtype="bfloat16"))
    assert (r.trainer.device, r.trainer.dtype) == ("cpu", "bfloat16")
    assert (resolved(PipelineConfig()).trainer.device, TrainerConfig().device) == ("auto", "auto")


def test_a_component_s_own_setting_wins():
    cfg = PipelineConfig(device="cpu", dtype="bfloat16", trainer=TrainerConfig(dtype="float32"))
    r = resolved(cfg)
    assert (r.trainer.device, r.trainer.dtype) == ("cpu", "float32")


def test_engine_gets_them_too():
    if "device" not in {f.name for f in dataclasses.fields(EngineConfig)}:
        pytest.skip("EngineConfig has no device setting in this tree")
    r = resolved(PipelineConfig(device="cpu", dtype="bfloat16"))
    assert (r.engine.device, r.engine.dtype) == ("cpu", "bfloat16")


def test_command_line_sets_them_and_bad_values_are_one_line_errors():
    cfg = parse_overrides(PipelineConfig(), ["device=cpu", "trainer.dtype=bfloat16"])
    assert (cfg.device, cfg.trainer.dtype) == ("cpu", "bfloat16")
    with pytest.raises(ConfigError, match="device='gpu'.*auto \\| cpu \\| cuda \\| cuda:N"):
        PipelineConfig(device="gpu")
    with pytest.raises(ConfigError, match="trainer.dtype='fp8'"):
        TrainerConfig(dtype="fp8")
    with pytest.raises(ConfigError, match="trainer.device='cuda:x'"):
        TrainerConfig(device="cuda:x")
