"""Fixtures for engine tests: tiny model folders (two weight versions; init std 0.2 so greedy text does not
collapse into one repeated token, which would let wrong K/V go unnoticed)."""
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not torch.cuda.is_available():  # Triton kernels run on CPU tensors in its interpreter (read when they are defined)
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=11, init_std=0.2)


@pytest.fixture(scope="session")
def tiny_model_v2(tmp_path_factory):
    """Same architecture and tokenizer, other weights: the 'next policy version'."""
    from rollart.tools.make_tiny_model import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("tiny_v2"), seed=12, init_std=0.2)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny tensors on a shared 2-core machine: one intra-op thread is faster and far less noisy."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
