"""vLLM backend (vllm-cpu, run in .venv-vllm): greedy parity with the torch engine, weight update + KV recompute, abort, worker loop."""
import asyncio
import os

import pytest

from rollart.types import GenerateRequest, WeightBucket

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("vllm", reason="vllm is not installed: run `bash tools/setup_vllm_cpu.sh` and "
                                   "`.venv-vllm/bin/python -m pytest -m vllm tests/vllm_backend`")
pytestmark = pytest.mark.vllm

GREEDY = dict(temperature=0.0, ignore_eos=True)
PROMPTS = [[5, 6, 7], list(range(20, 37)), list(range(60, 100)), [300, 301]]


def _sharpened(src, dst, scale):
    """A copy of the tiny model with the final norm scaled: peaked logits, so no near-ties between kernels."""
    import shutil

    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    w = load_file(os.path.join(dst, "model.safetensors"))
    w["model.norm.weight"] = w["model.norm.weight"] * scale
    save_file(w, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return w


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from rollart.tools.make_tiny_model import make_tiny_model
    v1 = str(tmp_path_factory.mktemp("v") / "v1")
    v2 = str(tmp_path_factory.mktemp("v") / "v2")
    _sharpened(str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3)), v1, 8.0)
    weights_v2 = _sharpened(str(make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=4)), v2, 8.0)
    return v1, v2, weights_v2


@pytest.fixture(scope="module")
def vengine(models):
    from rollart.engine.config import EngineConfig
    from rollart.engine.registry import create_engine
    return create_engine("vllm", EngineConfig(model=models[0], backend="vllm", max_num_seqs=8))


def _torch_generate(model, prompts, max_tokens):
    from rollart.engine import EngineConfig, LLMEngine, SamplingParams
    eng = LLMEngine(EngineConfig(model=model))
    return eng.generate(prompts, [SamplingParams(max_tokens=n, **GREEDY) for n in max_tokens])


def _run(engine):
    outs = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            outs[o.request_id] = o
    return outs


def test_vllm_engine_satisfies_the_engine_protocol(vengine):
    from rollart.engine.protocol import Engine, EngineCapabilities
    from rollart.types import EngineStats
    assert isinstance(vengine, Engine) and isinstance(vengine.stats(), EngineStats)
    assert vengine.capabilities == EngineCapabilities()      # the core only: no K/V hand-over, no namespaces
    with pytest.raises(NotImplementedError, match="engine.backend=vllm"):
        vengine.named_weights()


def test_an_adapter_version_is_refused_without_lora(vengine, models):
    import torch
    with pytest.raises(ValueError, match="engine.lora.rank=0") as e:
        vengine.update_weights(WeightBucket.of(7, {"model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(8, 128),
                                                   "model.layers.0.self_attn.q_proj.lora_B.weight": torch.zeros(128, 8)}))
    assert "\n" not in str(e.value) and vengine.version == 0


def test_greedy_matches_torch_engine(vengine, models):
    from rollart.types import SamplingParams
    lens = [16, 9, 12, 5]
    for i, (p, n) in enumerate(zip(PROMPTS, lens)):
        vengine.add_request(GenerateRequest(f"g{i}", p, SamplingParams(max_tokens=n, **GREEDY)))
    outs = _run(vengine)
    ref = _torch_generate(models[0], PROMPTS, lens)
    for i, r in enumerate(ref):
        o = outs[f"g{i}"]
        assert o.token_ids == r.token_ids, f"prompt {i}"
        assert o.logprobs == pytest.approx(r.logprobs, abs=2e-3)
        assert o.finish_reason == "length" and o.versions == [0] * lens[i]


def test_min_tokens_holds_off_stop_tokens(vengine, models):
    from rollart.types import SamplingParams
    first = _torch_generate(models[0], PROMPTS[1:2], [1])[0].token_ids[0]
    vengine.add_request(GenerateRequest("s", PROMPTS[1], SamplingParams(max_tokens=12, stop_token_ids=[first],
                                                                        **GREEDY)))
    vengine.add_request(GenerateRequest("m", PROMPTS[1], SamplingParams(max_tokens=12, min_tokens=5,
                                                                        stop_token_ids=[first], **GREEDY)))
    outs = _run(vengine)
    assert outs["s"].token_ids == [first] and outs["s"].finish_reason == "stop"
    assert len(outs["m"].token_ids) >= 5


def test_abort_is_idempotent(vengine):
    from rollart.types import InvalidRequestError, SamplingParams
    vengine.add_request(GenerateRequest("a", [5, 6], SamplingParams(max_tokens=200, **GREEDY)))
    vengine.step()
    assert vengine.abort_request("a") is True
    assert vengine.abort_request("a") is False and vengine.abort_request("nope") is False
    assert _run(vengine) == {}
    with pytest.raises(InvalidRequestError, match="empty prompt"):
        vengine.add_request(GenerateRequest("e", [], SamplingParams()))
    with pytest.raises(InvalidRequestError, match="context"):
        vengine.add_request(GenerateRequest("l", [5] * 5000, SamplingParams()))


def test_weight_update_mid_generation_recomputes_kv(vengine, models):
    from rollart.types import SamplingParams
    v1, v2, weights_v2 = models
    prompt = PROMPTS[1]
    vengine.add_request(GenerateRequest("u", prompt, SamplingParams(max_tokens=12, **GREEDY)))
    for _ in range(4):
        vengine.step()
    vengine.update_weights(WeightBucket.of(1, weights_v2))
    out = _run(vengine)["u"]
    k = out.versions.count(0)
    assert 0 < k < 12 and out.versions == [0] * k + [1] * (12 - k)
    # Tokens after the update come from the new weights over the full context (KV recomputed):
    # they equal the torch engine continuing the same context under v2.
    before = _torch_generate(v1, [prompt], [k])[0].token_ids
    assert out.token_ids[:k] == before
    after = _torch_generate(v2, [prompt + before], [12 - k])[0]
    assert _torch_generate(v1, [prompt + before], [12 - k])[0].token_ids != after.token_ids  # v1 != v2
    assert out.token_ids[k:] == after.token_ids
    assert out.logprobs[k:] == pytest.approx(after.logprobs, abs=2e-3)
    # put v1 back for the other tests
    from safetensors.torch import load_file
    vengine.update_weights(WeightBucket.of(2, load_file(os.path.join(v1, "model.safetensors"))))


async def test_inference_worker_serves_vllm(vengine, models):
    from rollart.inference.worker import InferenceWorker
    from rollart.types import GenerateRequest, SamplingParams
    worker = InferenceWorker(engine_obj=vengine, name="vllm-0")
    try:
        results = await asyncio.gather(*(worker.generate(GenerateRequest(f"w{i}", p, SamplingParams(max_tokens=6, **GREEDY)))
                                         for i, p in enumerate(PROMPTS)))
        ref = _torch_generate(models[0], PROMPTS, [6] * len(PROMPTS))
        assert [r.token_ids for r in results] == [r.token_ids for r in ref]
        assert all(r.worker == "vllm-0" for r in results)
    finally:
        await worker.shutdown()


def test_seeded_requests_longer_than_a_steps_token_budget_are_served(models, caplog):
    """Every rollout request carries a seed; vllm-cpu fails a step that splits a seeded prompt's prefill. With a
    32-token step budget and prompts of up to 40 tokens, rollart's vllm backend prefills whole prompts (saying
    that it raised the budget) and every seeded request finishes, the same seed giving the same tokens."""
    import logging

    from rollart.engine.config import EngineConfig
    from rollart.engine.registry import create_engine
    from rollart.types import SamplingParams
    with caplog.at_level(logging.INFO, logger="rollart.engine.vllm_backend"):
        engine = create_engine("vllm", EngineConfig(model=models[0], backend="vllm", max_num_seqs=8,
                                                     max_num_batched_tokens=32))
    for i, p in enumerate(PROMPTS * 2):
        engine.add_request(GenerateRequest(f"r{i}", p, SamplingParams(temperature=1.0, max_tokens=6, ignore_eos=True,
                                                                      seed=i % len(PROMPTS))))
    outs = _run(engine)
    assert "no prompt is prefilled in chunks" in caplog.text
    assert sorted(outs) == sorted(f"r{i}" for i in range(2 * len(PROMPTS)))
    for i in range(len(PROMPTS)):
        assert len(outs[f"r{i}"].token_ids) == 6 and outs[f"r{i}"].token_ids == outs[f"r{i + len(PROMPTS)}"].token_ids
