"""Shared fixtures for rollout tests: a tiny model folder and a byte tokenizer (helpers: rollout_helpers)."""
import os

import pytest

import rollout_helpers  # noqa: F401  (registers usertest/Countdown-v0)
from rollart.rollout.scripted import ByteTokenizer


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny model + tokenizer folder made by rollart.tools.make_tiny_model (once per session)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from rollart.tools.make_tiny_model import make_tiny_model
    except ImportError as e:
        pytest.skip(f"rollart.tools.make_tiny_model not available: {e}")
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3))


@pytest.fixture
def tokenizer():
    return ByteTokenizer()
