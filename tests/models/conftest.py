"""Fixtures: tiny HF-format model folders made by rollart.tools.make_tiny_model."""
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not torch.cuda.is_available():  # Triton kernels run on CPU tensors in its interpreter (read when they are defined)
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("qwen3"), arch="qwen3", seed=1)


@pytest.fixture(scope="session")
def tiny_llama_gqa(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    return make_tiny_model(tmp_path_factory.mktemp("llama"), arch="llama", hidden=128, layers=2, heads=4,
                           kv_heads=2, head_dim=32, intermediate=256, seed=2)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny tensors on a shared 2-core machine: one intra-op thread is faster and far less noisy."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
