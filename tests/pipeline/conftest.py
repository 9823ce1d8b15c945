"""Shared fixtures for pipeline tests: a tiny model folder (the run configs built on it: run_configs)."""
import pytest

from rollart.tools.make_tiny_model import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A tiny random-init model and tokenizer folder (hidden 64, 2 layers), made once per session."""
    out = tmp_path_factory.mktemp("model") / "tiny"
    make_tiny_model(out, hidden=64, layers=2, heads=1, kv_heads=1, seed=0)
    return str(out)
