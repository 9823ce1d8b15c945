"""Fixtures for gateway tests: a tiny model served by a real torch-engine worker behind an LLMProxy, and a
started Gateway in front of it."""
import os

import pytest

pytest.importorskip("openai", reason="the gateway is tested with the real openai client: pip install -e '.[test]'")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from rollart.tools.make_tiny_model import make_tiny_model
    return str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3))


@pytest.fixture
async def served(tiny_model_dir):
    """(gateway, proxy, worker, tokenizer) on the real engine."""
    from rollart.gateway.server import Gateway
    from rollart.inference.worker import InferenceWorker
    from rollart.models import load_tokenizer
    from rollart.actors import LocalHandle
    from rollart.rollout.proxy import LLMProxy

    worker = InferenceWorker(dict(model=tiny_model_dir, num_kv_blocks=256, max_num_seqs=16), name="cpu-0")
    proxy = LLMProxy([("cpu-0", "cpu", LocalHandle(worker, worker.name))])
    tok = load_tokenizer(tiny_model_dir)
    gw = await Gateway(proxy, tok).start()
    yield gw, proxy, worker, tok
    await gw.close()
    await worker.shutdown()
