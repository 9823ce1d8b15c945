"""Engine backend registry: torch resolves, unknown names and bad settings are clear errors, vllm absent -> install hint;
naming backends imports none of them."""
import importlib.util
import subprocess
import sys

import pytest

from rollart.engine.registry import ENGINES, create_engine, engine_config, register_engine


def test_torch_backend_builds_from_a_plain_dict(tiny_model):
    engine = create_engine("torch", dict(model=tiny_model, num_kv_blocks=64))
    assert type(engine).__name__ == "LLMEngine" and engine.version == 0


def test_choosing_a_backend_by_name_imports_no_backend():
    code = ("import sys; import rollart.engine.registry as r; from rollart.engine import EngineConfig, SamplingParams; "
            "assert 'torch' in r.ENGINES; print(sorted(m for m in sys.modules if m.startswith('rollart.engine.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "llm_engine" not in loaded and "vllm_backend" not in loaded and "rollart.engine.registry" in loaded
    from rollart.engine import LLMEngine  # the package still offers it, loaded on first access
    assert LLMEngine.__module__ == "rollart.engine.llm_engine"


def test_unknown_backend_and_settings_are_named():
    with pytest.raises(ValueError, match=r"unknown engine backend 'sglang'.*torch.*vllm"):
        create_engine("sglang", {})
    with pytest.raises(ValueError, match="unknown engine settings.*max_seqs"):
        engine_config(dict(model="x", max_seqs=4))
    with pytest.raises(ValueError, match="'no_colon_here' is not a 'package.module:name' string"):
        register_engine("mine", "no_colon_here")
    assert set(ENGINES) >= {"torch", "vllm"}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_without_vllm_says_what_to_install(tiny_model):
    with pytest.raises(ImportError, match="setup_vllm_cpu.sh"):
        create_engine("vllm", dict(model=tiny_model, backend="vllm"))
