"""Fixtures for inference-worker tests: a tiny model folder and in-process workers on it."""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3))


@pytest.fixture(scope="session")
def tiny_weights_v2(tmp_path_factory):
    """Weights of another random init of the same architecture: the 'next policy version'."""
    from safetensors.torch import load_file

    from rollart.tools.make_tiny_model import make_tiny_model
    path = make_tiny_model(tmp_path_factory.mktemp("tiny_v2"), seed=4)
    return load_file(os.path.join(str(path), "model.safetensors"))


@pytest.fixture
def engine_config(tiny_model):
    return dict(model=tiny_model, max_num_seqs=16, num_kv_blocks=256, seed=0)
