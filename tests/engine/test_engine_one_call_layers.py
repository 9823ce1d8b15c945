"""Every decoder layer of a step in one C call (rollart.models.cpu_layers): the engine's greedy tokens and logprobs
equal those of the model's layer loop over the same kernels, for the three architectures and both dtypes, through
chunked prefill, decodes and a prefill long enough for torch's GEMM (which takes the loop); a model the call does
not fit is told in one line and served by the loop."""
import pytest
import torch

from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.models import cpu_kernels, load_model
from rollart.models.cpu_layers import DecoderLayers
from rollart.tools.make_tiny_model import make_tiny_model

from engine_helpers import random_prompts

pytestmark = pytest.mark.skipif(bool(cpu_kernels.unavailable()),
                                reason=f"rollart's C kernels cannot be built here: {cpu_kernels.unavailable()}")

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module", params=["qwen3", "llama", "qwen2"])
def model_path(request, tmp_path_factory):
    """2 layers, 4 query heads over 2 KV heads; qwen3 has q/k norms, qwen2 q/k/v biases."""
    return make_tiny_model(tmp_path_factory.mktemp(request.param), arch=request.param, hidden=64, layers=2, heads=4,
                           kv_heads=2, head_dim=32, intermediate=128, seed=3, init_std=0.2)


def _generate(path, dtype, one_call: bool, prompts):
    engine = LLMEngine(EngineConfig(model=str(path), kernels="cpu", dtype=dtype, max_num_batched_tokens=640,
                                    num_kv_blocks=128, block_size=8))
    ops = engine.runner.model.paged_ops
    assert ops.layers is not None and ops.layers.unfit() == ""
    served = []
    layers = ops.layers

    def counted(*args):
        out = layers(*args)
        served.append(out is not None)
        return out

    ops.layers = counted if one_call else None
    return engine.generate(prompts, GREEDY), served


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_call_per_step_equals_the_layer_loop(model_path, dtype):
    prompts = random_prompts([5, 23, 90], seed=4)
    ours, served = _generate(model_path, dtype, True, prompts)
    loop, _ = _generate(model_path, dtype, False, prompts)
    assert served and all(served)                      # every step of this batch went through the one call
    for a, b in zip(ours, loop):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)


def test_a_prefill_for_torchs_gemm_takes_the_layer_loop(model_path):
    prompts = random_prompts([600, 7], seed=5)        # 607 rows in the first step: float32 GEMM rows go to torch
    ours, served = _generate(model_path, "float32", True, prompts)
    loop, _ = _generate(model_path, "float32", False, prompts)
    assert served[0] is False and all(served[1:])     # the long prefill by the loop, the decodes after it in C
    assert [o.token_ids for o in ours] == [o.token_ids for o in loop]


def test_a_model_without_packed_weights_is_told_and_left_to_the_loop(model_path):
    k = cpu_kernels.kernels()
    layers = DecoderLayers(k.lib, cpu_kernels.DTYPES, load_model(model_path).fuse_projections(), k.linears(), None)
    assert layers.unfit() == "layer 0 has a weight without its packed copy"
