"""Covers a run's fail-fast checks: PipelineConfig's values (engine/trainer backends, ranges), and preflight's
(hw_affinity against the workers and the run's tasks, env ids, backends installed, model folders)."""
import logging
import re

import pytest

from rollart.config import ConfigError, apply_overrides
from rollart.pipeline import Coordinator, PipelineConfig
from rollart.pipeline.preflight import check_env_ids, preflight
from rollart.pipeline.run_state import RunTasks
from rollart.rollout.buffer import BufferConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.proxy_config import ProxyConfig

import envs  # noqa: F401  (registers rollart/* ids)

def check_tasks(cfg: PipelineConfig, tasks: list[TaskSpec]) -> None:
    preflight(cfg, RunTasks(tasks, tasks, []))


LAKE = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", max_new_tokens=1)
GAME = TaskSpec(name="GuessNumber", env_id="rollart/GuessNumber-v0", max_new_tokens=2)


@pytest.mark.parametrize("override,needle", [
    ("engine.backend=foo", r"engine.backend='foo': choose one of \['torch', 'vllm'\]"),
    ("engine.dtype=float64", "engine.dtype='float64'"),
    ("engine.block_size=0", "engine.block_size=0 must be >= 1"),
    ("engine.kv_cache_memory_gb=0", "engine.kv_cache_memory_gb=0.0 must be > 0"),
    ("trainer.backend=foo", r"trainer.backend='foo': choose one of \['deepspeed', 'torch'\]"),
    ("eval_every=-1", "eval_every=-1 must be >= 0"),
    ("trainer_restarts=-1", "trainer_restarts=-1 must be >= 0"),
    ("weight_store_restarts=-2", "weight_store_restarts=-2 must be >= 0"),
    ("checkpoint_every_s=-5", "checkpoint_every_s=-5.0 must be >= 0"),
    ("env_hosts=-1", "env_hosts=-1 must be >= 0"),
    ("keep_checkpoints=-2", "keep_checkpoints=-2 must be >= 0"),
    ("stop_at_success=2", r"stop_at_success=2.0: a success rate in \[0, 1\]"),
    ("sim_time_scale=0", "sim_time_scale=0.0 must be > 0"),
    ("proxy.spill_ratio=0.5", r"proxy.spill_ratio must be 0 \(strict hw_affinity\) or >= 1, got 0.5"),
    ("rollout.group_size=1", "rollout.group_size=1: GRPO compares trajectories within a group"),
    ("rollout.max_concurrency=4", "rollout.max_concurrency=4 cannot hold one group of 8 envs"),
    ("mode=fast", r"mode='fast': expected one of \['async', 'areal', 'oneoff', 'sync'\]"),
    ("trainer.rank=1", "trainer.rank is derived from trainer.world_size"),
    ("trainer.world_size=0", "trainer.world_size=0 must be positive"),
    ("warmup_steps=-1", "warmup_steps=-1 must be >= 0"),
])
def test_bad_values_fail_when_parsed(override, needle):
    with pytest.raises(ConfigError, match=needle):
        apply_overrides(PipelineConfig(), [override])


def test_data_parallel_trainer_ranks_need_processes():
    # (with a plan, trainer.world_size comes from its actor_train dp: tests/pipeline/test_run_placement.py)
    with pytest.raises(ConfigError, match="trainer.world_size=2 starts one process per rank: set trainer_actor_mode"):
        apply_overrides(PipelineConfig(), ["trainer.world_size=2", "trainer_actor_mode=inprocess"])


def test_mode_is_checked_against_the_one_list_of_modes():
    from rollart.rollout.buffer_config import MODES
    for cfg in (PipelineConfig, BufferConfig):
        with pytest.raises(ConfigError, match=rf"mode='fast': choose one of {re.escape(str(MODES))}"):
            cfg(mode="fast")


def test_custom_trainer_class_string_is_accepted():
    assert apply_overrides(PipelineConfig(), ["trainer.backend=my_pkg.t:MyTrainer"]).trainer.backend == \
        "my_pkg.t:MyTrainer"


def test_hw_affinity_must_name_a_class_some_worker_has():
    with pytest.raises(ConfigError, match=r"proxy.hw_affinity\['FrozenLake'\]='A100': no inference worker has that"):
        check_tasks(PipelineConfig(hw_classes=("H20",), proxy=ProxyConfig(hw_affinity={"FrozenLake": "A100"})), [LAKE])
    # two classes listed but one worker: only H800 exists
    with pytest.raises(ConfigError, match=r"'H20': no inference worker.*workers: \['H800'\]"):
        check_tasks(PipelineConfig(num_inference_workers=1, hw_classes=("H800", "H20"),
                                   proxy=ProxyConfig(hw_affinity={"default": "H20"})), [LAKE])
    ok = PipelineConfig(num_inference_workers=2, hw_classes=("H800", "H20"),
                        proxy=ProxyConfig(hw_affinity={"default": "H20"}))
    check_tasks(ok, [LAKE])
    assert ok.worker_hw_classes() == ["H800", "H20"]


def test_task_without_route_fails_unless_default():
    cfg = PipelineConfig(num_inference_workers=2, hw_classes=("H800", "H20"),
                         proxy=ProxyConfig(hw_affinity={"FrozenLake": "H800"}))
    with pytest.raises(ConfigError, match=r"routes no worker for task\(s\) \['GuessNumber'\].*'default' entry"):
        check_tasks(cfg, [LAKE, GAME])
    check_tasks(cfg, [LAKE])  # every task routed: fine


def test_affinity_entry_naming_no_task_is_reported(caplog):
    cfg = PipelineConfig(num_inference_workers=2, hw_classes=("H800", "H20"),
                         proxy=ProxyConfig(hw_affinity={"Frozen": "H800", "default": "H20"}))
    with caplog.at_level(logging.WARNING, logger="rollart.rollout.routing"):
        check_tasks(cfg, [LAKE])
    assert "proxy.hw_affinity entries ['Frozen'] name no task of this run" in caplog.text


def test_unknown_env_id_fails_with_gymnasiums_suggestion():
    task = TaskSpec(name="Lake", env_id="rollart/FrozenLak-v0")
    with pytest.raises(ConfigError, match=r"task 'Lake': env_id='rollart/FrozenLak-v0' is not registered.*FrozenLake"):
        check_env_ids([task])
    preflight(PipelineConfig(), RunTasks([task], [task], []), registered_envs=False)  # envs made on remote hosts


def test_coordinator_checks_tasks_before_starting_anything(tmp_path):
    cfg = PipelineConfig(logdir=str(tmp_path), num_inference_workers=2, hw_classes=("H800", "H20"),
                         proxy=ProxyConfig(hw_affinity={"FrozenLake": "H800"}))
    with pytest.raises(ConfigError, match="GuessNumber"):
        Coordinator(cfg, [LAKE, GAME])
    assert not any(tmp_path.iterdir())  # no run folder, no model, no actor processes



def test_a_backend_not_installed_fails_before_starting(tmp_path):
    import importlib.util
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    cfg = apply_overrides(PipelineConfig(), [f"logdir={tmp_path}", "engine.backend=vllm"])
    with pytest.raises(ConfigError, match="engine.backend=vllm: the 'vllm' engine backend needs vllm.*backend=torch"):
        Coordinator(cfg, [LAKE])


def test_model_folder_without_tokenizer_is_named(tmp_path):
    from rollart.pipeline.prepare import ensure_model
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="has no tokenizer.json or \\*.safetensors; pass an HF-format model folder"):
        ensure_model(PipelineConfig(model=str(tmp_path)))


def test_warmup_of_a_given_model_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="warmup_steps=5 warms up the tiny model built when model is empty"):
        Coordinator(PipelineConfig(model=str(tmp_path), warmup_steps=5, logdir=str(tmp_path)), [LAKE])


def test_warmup_without_tasks_is_named(tmp_path):
    from rollart.pipeline.prepare import ensure_model
    with pytest.raises(ConfigError, match="warmup_steps=5 needs the run's tasks"):
        ensure_model(PipelineConfig(logdir=str(tmp_path), warmup_steps=5))


def test_group_of_one_is_fine_for_ppo():
    assert apply_overrides(PipelineConfig(), ["rollout.group_size=1", "trainer.algorithm=ppo"]).rollout.group_size == 1
