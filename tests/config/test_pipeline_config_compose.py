"""Covers PipelineConfig's composition: one place per value, resolve's derived values, renamed command-line keys."""
import dataclasses
import logging

import pytest

from rollart.config import ConfigError, apply_overrides, apply_values, parse_overrides
from rollart.engine.config import EngineConfig
from rollart.hardware import SpeedModelConfig
from rollart.pipeline import PipelineConfig
from rollart.pipeline.resolve import resolve, with_pad_id
from rollart.rollout.buffer import BufferConfig
from rollart.rollout.group_scheduler import SchedulerConfig


def resolved(cfg: PipelineConfig, model: str = "/m", pad_id: int = 0) -> PipelineConfig:
    """``cfg`` resolved as a run of ``model`` whose tokenizer pads with ``pad_id`` would be."""
    return with_pad_id(resolve(dataclasses.replace(cfg, model=model)), pad_id)


def test_resolve_derives_every_dependent_value_once():
    cfg = PipelineConfig(mode="areal", alpha=2, batch_groups=3, seed=7, num_inference_workers=3,
                         hw_classes=("H800", "cpu"), simulate_hardware=True, sim_time_scale=0.5,
                         rollout=SchedulerConfig(group_size=4, max_concurrency=16, extra_groups=1))
    r = resolved(cfg, pad_id=5)
    assert r.buffer == BufferConfig(mode="areal", alpha=2, group_size=4, capacity=48, max_outstanding_groups=10)
    assert (r.model, r.engine.model, r.engine.seed, r.rollout.seed) == ("/m", "/m", 7, 7)
    assert (r.trainer.model_path, r.trainer.seed, r.trainer.pad_id) == ("/m", 7, 5)
    # one speed model per simulated class; "cpu" has none
    assert r.speed_models == {"H800": SpeedModelConfig(hw_class="H800", time_scale=0.5)}
    assert cfg.rollout.seed == 0 and cfg.buffer == BufferConfig()  # resolve returns a copy
    sync = resolved(dataclasses.replace(cfg, mode="sync"))
    assert sync.buffer.alpha == 0 and sync.buffer.max_outstanding_groups == 0


def test_capacity_holds_a_batch_even_with_few_envs():
    cfg = PipelineConfig(alpha=0, batch_groups=8, rollout=SchedulerConfig(group_size=4, max_concurrency=4))
    assert resolved(cfg, model="m").buffer.capacity == cfg.batch_size == 32


def test_the_run_engine_is_the_engine_config_with_one_kv_default():
    assert isinstance(PipelineConfig().engine, EngineConfig)
    assert PipelineConfig().engine.kv_cache_memory_gb == EngineConfig().kv_cache_memory_gb == 0.25


@pytest.mark.parametrize("old,new,value,expected", [
    ("group_size", "rollout.group_size", "4", 4),
    ("max_concurrency", "rollout.max_concurrency", "32", 32),
    ("extra_envs_per_group", "rollout.extra_envs_per_group", "2", 2),
    ("hw_spill_ratio", "proxy.spill_ratio", "2", 2.0),
    ("worker_classes", "hw_classes", "H20,H800", ("H20", "H800")),
    ("hw_affinity", "proxy.hw_affinity", '{"default": "H20"}', {"default": "H20"}),
])
def test_renamed_keys_still_work_with_a_one_line_warning(caplog, old, new, value, expected):
    with caplog.at_level(logging.WARNING, logger="rollart.config"):
        cfg = apply_overrides(PipelineConfig(num_inference_workers=2), [f"{old}={value}"])
    got = cfg
    for part in new.split("."):
        got = getattr(got, part)
    assert got == expected
    assert [r.getMessage() for r in caplog.records] == [
        f"{old} is renamed {new}; the old name goes in the next release"]


def test_derived_keys_cannot_be_set_from_the_command_line():
    with pytest.raises(ConfigError, match="buffer.group_size is derived from rollout.group_size; set that instead"):
        apply_overrides(PipelineConfig(), ["buffer.group_size=4"])
    with pytest.raises(ConfigError, match="trainer.pad_id is derived from the model's tokenizer"):
        apply_values(PipelineConfig(), {"trainer.pad_id": 3})


def test_apply_values_takes_typed_dotted_keys():
    cfg = apply_values(PipelineConfig(), {"rollout.group_size": 4, "hw_classes": ("H800",), "alpha": 2})
    assert (cfg.rollout.group_size, cfg.hw_classes, cfg.alpha) == (4, ("H800",), 2)


def test_help_shows_the_new_names_and_the_renames(capsys):
    with pytest.raises(SystemExit):
        parse_overrides(PipelineConfig(), ["--help"])
    shown = capsys.readouterr().out
    for line in ("  rollout.group_size = 8", "  proxy.spill_ratio = 0.0", "  hw_classes = ('H20',)",
                 "  engine.kv_cache_memory_gb = 0.25", "  buffer.capacity = 256    # derived from"):
        assert line in shown
    assert "\n  group_size" not in shown and "worker_classes =" not in shown
    assert "group_size -> rollout.group_size" in shown and "hw_spill_ratio -> proxy.spill_ratio" in shown
