"""Engine backend registry: torch resolves, unknown names and bad settings are clear errors, vllm absent -> install hint."""
import importlib.util

import pytest

from rollart.engine.registry import ENGINES, create_engine, engine_config, register_engine


def test_torch_backend_builds_from_a_plain_dict(tiny_model):
    engine = create_engine("torch", dict(model=tiny_model, num_kv_blocks=64))
    assert type(engine).__name__ == "LLMEngine" and engine.version == 0


def test_unknown_backend_and_settings_are_named():
    with pytest.raises(ValueError, match=r"unknown engine backend 'sglang'.*torch.*vllm"):
        create_engine("sglang", {})
    with pytest.raises(ValueError, match="unknown engine settings.*max_seqs"):
        engine_config(dict(model="x", max_seqs=4))
    with pytest.raises(ValueError, match="module:Class"):
        register_engine("mine", "no_colon_here")
    assert set(ENGINES) >= {"torch", "vllm"}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_without_vllm_says_what_to_install(tiny_model):
    with pytest.raises(ImportError, match="setup_vllm_cpu.sh"):
        create_engine("vllm", dict(model=tiny_model, backend="vllm"))
