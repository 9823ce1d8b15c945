"""Covers 'settings that do nothing are errors': every field --help lists is read somewhere outside its own
validation, derived fields given by hand are refused, and combinations where a setting would be ignored fail."""
import ast
import dataclasses
from pathlib import Path

import pytest

from rollart.config import ConfigError, apply_overrides
from rollart.pipeline import PipelineConfig
from rollart.trainer import TrainerConfig

from recipes import grpo_frozenlake, grpo_humaneval, grpo_multitask, grpo_smollm2, grpo_swe, multiplex_two_jobs

ROOT = Path(__file__).resolve().parents[2]
RECIPE_CONFIGS = [PipelineConfig, grpo_swe.SWEConfig, grpo_humaneval.HumanEvalRecipe, grpo_smollm2.SmolConfig,
                  type(grpo_multitask.default_config()), multiplex_two_jobs.MultiplexRecipe]


def _reads() -> set[str]:
    """Every name the product's code reads as an attribute (``cfg.lr``), by string (``getattr(cfg, "lr")``) or
    as a keyword (``f(lr=...)`` passes a field on), leaving out what ``__post_init__`` / ``_check*`` methods
    read: a field read only by its own validation does nothing."""
    names: set[str] = set()
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "recipes").glob("*.py"), *(ROOT / "envs").rglob("*.py")]
    for path in files:
        tree = ast.parse(path.read_text())
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and (node.name == "__post_init__" or node.name.startswith("_check")):
                skip.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
    return names


def _leaf_fields(cls, prefix=""):
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            yield from _leaf_fields(type(default), prefix + f.name + ".")
        else:
            yield prefix + f.name


def test_every_listed_setting_is_read_outside_its_validation():
    """A necessary condition, checked statically: a field whose name no code reads cannot take effect (a name
    shared with another attribute can hide a dead field, so the combinations below are checked by hand)."""
    reads = _reads()
    dead = sorted({key for cls in RECIPE_CONFIGS for key in _leaf_fields(cls) if key.rsplit(".", 1)[-1] not in reads})
    assert not dead, f"settings no code reads (make them work, or remove them with a RENAMED entry): {dead}"


def test_derived_field_set_in_python_is_refused_before_any_folder_exists(tmp_path):
    from rollart.pipeline import Coordinator
    from recipes.grpo_frozenlake import TASK
    cfg = PipelineConfig(logdir=str(tmp_path), trainer=TrainerConfig(model_path="/nonexistent"))
    with pytest.raises(ConfigError, match=r"trainer.model_path='/nonexistent' would be replaced by '.*init_model', "
                                          r"derived from model; set that instead"):
        Coordinator(cfg, [TASK])
    assert list(tmp_path.iterdir()) == []


def test_a_resolved_config_passes_its_own_derived_check():
    from rollart.pipeline.resolve import resolve, with_pad_id
    resolved = with_pad_id(resolve(PipelineConfig(model="/m", seed=3)), 7)
    assert with_pad_id(resolve(resolved), 7) == resolved  # resolving again changes nothing and refuses nothing
    with pytest.raises(ConfigError, match=r"trainer.pad_id=7 would be replaced by 0, derived from the model's "):
        with_pad_id(resolve(resolved), 0)


@pytest.mark.parametrize("overrides,message", [
    (["trainer.zero_stage=2"], "trainer.zero_stage=2 applies to trainer.backend=deepspeed only"),
    (["trainer.backend=deepspeed", "trainer.algorithm=ppo"], "trainer.algorithm=ppo needs trainer.backend=torch"),
    (["trainer.master_port=4000"], r"trainer.master_port is derived from trainer.world_size"),
    (["trainer.dist_backend=nccl"], "trainer.dist_backend='nccl' joins data-parallel ranks; with trainer.world_size=1"),
    (["engine.backend=vllm", "engine.num_kv_blocks=64"], "with engine.backend=vllm set engine.kv_cache_memory_gb"),
    (["sim_time_scale=0.1"], "sim_time_scale=0.1 scales simulated hardware time: set simulate_hardware=true"),
    (["trainer.model_factory=m:f"], "trainer.model_factory='m:f' would build the trainer's model only"),
    (["trainer.collective_timeout_s=30"], "trainer.collective_timeout_s=30 bounds the waits of data-parallel ranks"),
    (["env_host_timeout_s=10"], "env_host_timeout_s=10 bounds calls to env-host processes; with env_hosts=0"),
])
def test_settings_that_would_be_ignored_are_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(PipelineConfig(), overrides)


def test_the_same_settings_are_fine_where_they_take_effect():
    apply_overrides(PipelineConfig(), ["trainer.backend=deepspeed", "trainer.zero_stage=2"])
    apply_overrides(PipelineConfig(), ["simulate_hardware=true", "sim_time_scale=0.1"])
    apply_overrides(PipelineConfig(), ["engine.backend=vllm", "engine.kv_cache_memory_gb=1"])
    apply_overrides(PipelineConfig(), ["trainer.world_size=2", "trainer.dist_backend=gloo"])
    apply_overrides(PipelineConfig(), ["trainer.world_size=2", "trainer.collective_timeout_s=30"])
    apply_overrides(PipelineConfig(), ["env_hosts=1", "env_host_timeout_s=10"])


def test_model_folder_is_checked_for_config_tokenizer_and_weights(tmp_path):
    from rollart.pipeline import Coordinator
    from recipes.grpo_frozenlake import TASK
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "m" / "tokenizer.json").write_text("{}")
    cfg = PipelineConfig(model=str(tmp_path / "m"), logdir=str(tmp_path / "runs"))
    with pytest.raises(ConfigError, match=r"has no \*\.safetensors"):
        Coordinator(cfg, [TASK])
    with pytest.raises(ConfigError, match="is not a folder"):
        Coordinator(PipelineConfig(model=str(tmp_path / "nope"), logdir=str(tmp_path / "runs")), [TASK])
    assert not (tmp_path / "runs").exists()


def test_quickstart_defaults_are_valid():
    grpo_frozenlake.default_config()
    grpo_swe.default_config()
    grpo_humaneval.default_config()


def _as_typed(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) if value else "[]"
    if isinstance(value, dict):
        import json
        return json.dumps(value)
    return str(value)


@pytest.mark.parametrize("cls", RECIPE_CONFIGS, ids=lambda c: c.__name__)
def test_every_listed_setting_can_be_set_from_the_command_line(cls):
    """Each setting --help lists (derived ones aside) accepts its own default typed back, e.g. engine.num_kv_blocks."""
    cfg = grpo_multitask.default_config() if cls is type(grpo_multitask.default_config()) else cls()
    derived = getattr(cls, "DERIVED", {})
    for key in _leaf_fields(cls):
        if key in derived:
            continue
        value = cfg
        for part in key.split("."):
            value = getattr(value, part)
        applied = apply_overrides(cfg, [f"{key}={_as_typed(value)}"])
        got = applied
        for part in key.split("."):
            got = getattr(got, part)
        assert got == value or (isinstance(value, tuple) and tuple(got) == value), key
    apply_overrides(PipelineConfig(), ["engine.num_kv_blocks=64", "engine.max_model_len=512"])


def test_trainer_model_path_of_a_plain_trainer_loads_or_fails_in_one_line(tmp_path):
    import torch
    from rollart.models import CausalLM, ModelConfig, save_model
    from rollart.trainer import make_trainer
    with pytest.raises(ConfigError, match="trainer.model_path='/nonexistent' has no config.json"):
        make_trainer(TrainerConfig(model_path="/nonexistent", num_threads=1))
    model = CausalLM(ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, head_dim=16))
    model.init_weights(torch.Generator().manual_seed(3), std=0.2)
    save_model(model, tmp_path / "m")
    trainer = make_trainer(TrainerConfig(model_path=str(tmp_path / "m"), num_threads=1))
    want = dict(model.named_parameters())
    for name, p in trainer.policy.named_parameters():  # the named model, not a random init
        assert p.detach().equal(want[name].detach()), name
