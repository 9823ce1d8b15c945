"""LoRA versions on rollart's engine: adapters merged onto kept base weights equal the merged model, replace each other, refuse misfits."""
import pytest
import torch

from rollart.config import ConfigError
from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.models import load_model
from rollart.models.lora import ATTENTION, MLP, LoraConfig, merged
from rollart.types import GenerateRequest, UpdateWeights, WeightBucket

from engine_helpers import greedy_reference, random_prompts

LORA = LoraConfig(rank=4, alpha=8.0, target_modules=ATTENTION + MLP)  # q/k/v and gate/up: the fused matrices too
N = 16
GREEDY = SamplingParams(temperature=0, max_tokens=N, ignore_eos=True)


def adapter(model, cfg=LORA, seed=0, zero_b=False, modules=None):
    """Random A and B (std 0.2, the tiny model's own scale) for every target layer of ``model``, or of ``modules``."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, p in model.named_parameters():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.rpartition(".")[2] in cfg.target_modules:
            if modules is None or module in modules:
                rows, cols = p.shape
                out[f"{module}.lora_A.weight"] = torch.randn(cfg.rank, cols, generator=g) * 0.2
                b = torch.randn(rows, cfg.rank, generator=g) * 0.2
                out[f"{module}.lora_B.weight"] = b * 0 if zero_b else b
    return out


def merged_model(path, adapters, cfg=LORA):
    """A plain CausalLM of ``path`` with ``adapters`` merged into its weights by hand."""
    model = load_model(path)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, a in adapters.items():
            if name.endswith(".lora_A.weight"):
                module = name.removesuffix(".lora_A.weight")
                w = params[f"{module}.weight"]
                w.copy_(merged(w, a, adapters[f"{module}.lora_B.weight"], cfg.scaling))
    return model


def engine_of(path, lora=LORA, **kw):
    return LLMEngine(EngineConfig(model=str(path), lora=lora, **{"num_kv_blocks": 64, **kw}))


def assert_generates_like(engine, model, prompts):
    outs = engine.generate(prompts, GREEDY)
    for p, out in zip(prompts, outs):
        ref, ref_lp = greedy_reference(model, p, N)
        assert out.token_ids == ref
        torch.testing.assert_close(torch.tensor(out.logprobs), torch.tensor(ref_lp), atol=1e-4, rtol=0)
    return outs


def live(engine):
    return {n: p.detach().clone() for n, p in engine.named_weights()}


def test_lora_sync_equals_the_merged_model(tiny_model):
    base = load_model(tiny_model)
    ad = adapter(base, seed=1)
    engine = engine_of(tiny_model)
    assert engine.runner.packed is not None  # the oneDNN copies are what the forward reads: they must be repacked
    engine.update_weights(WeightBucket.of(1, ad))
    ref = merged_model(tiny_model, ad)
    weights = dict(engine.named_weights())
    for name, w in ref.named_parameters():
        assert torch.equal(weights[name], w), name
    attn = engine.model.model.layers[0].self_attn
    assert torch.equal(attn.qkv_weight, torch.cat([w for n, w in ref.named_parameters()
                                                   if n.startswith("model.layers.0.self_attn.") and n[-13:-7] in
                                                   ("q_proj", "k_proj", "v_proj")]))
    prompts = random_prompts([13, 40, 5], seed=1)
    outs = assert_generates_like(engine, ref, prompts)
    assert all(o.versions == [1] * N for o in outs)
    assert [o.token_ids for o in outs] != [greedy_reference(base, p, N)[0] for p in prompts]  # the adapter matters


def test_update_mid_generation_recomputes_kv_under_the_adapter(tiny_model):
    base = load_model(tiny_model)
    ad = adapter(base, seed=2)
    ref = merged_model(tiny_model, ad)
    engine = engine_of(tiny_model)
    prompts = random_prompts([21, 50], seed=2)
    for i, p in enumerate(prompts):
        engine.add_request(GenerateRequest(f"r{i}", p, GREEDY))
    switch = 6
    while min(len(s.output_token_ids) for s in engine.requests.values()) < switch:
        assert not engine.step()
    engine.update_weights(WeightBucket.of(1, ad))
    assert engine.stats().recomputed_tokens > 0
    done = {}
    while engine.has_unfinished_requests():
        done.update((o.request_id, o) for o in engine.step())
    for i, p in enumerate(prompts):
        tokens, lps = greedy_reference(base, p, N, switch_at=switch, model_after=ref)
        assert done[f"r{i}"].token_ids == tokens
        assert done[f"r{i}"].versions == [0] * switch + [1] * (N - switch)
        torch.testing.assert_close(torch.tensor(done[f"r{i}"].logprobs), torch.tensor(lps), atol=1e-4, rtol=0)


def test_a_version_replaces_the_one_before_and_version_zero_is_the_base(tiny_model):
    base = load_model(tiny_model)
    engine = engine_of(tiny_model)
    before = live(engine)
    prompts = random_prompts([30], seed=3)
    first = engine.generate(prompts, GREEDY)[0]
    engine.update_weights(WeightBucket.of(0, adapter(base, seed=3, zero_b=True)))
    assert all(torch.equal(w, before[n]) for n, w in engine.named_weights())  # B = 0: exactly the base
    again = engine.generate(prompts, GREEDY)[0]
    assert again.token_ids == first.token_ids and again.logprobs == first.logprobs
    engine.update_weights(WeightBucket.of(1, adapter(base, seed=4)))
    ad2 = adapter(base, seed=5)
    engine.update_weights(WeightBucket.of(2, ad2))                  # onto the base, not onto version 1
    ref = merged_model(tiny_model, ad2)
    weights = dict(engine.named_weights())
    assert all(torch.equal(weights[n], w) for n, w in ref.named_parameters())
    assert_generates_like(engine, ref, prompts)
    q = "model.layers.1.self_attn.q_proj"
    ad3 = adapter(base, seed=6, modules={q})                         # a version that adapts one layer only
    engine.update_weights(WeightBucket.of(3, ad3))
    ref = merged_model(tiny_model, ad3)
    weights = dict(engine.named_weights())
    assert all(torch.equal(weights[n], w) for n, w in ref.named_parameters())
    assert not torch.equal(weights[f"{q}.weight"], before[f"{q}.weight"])
    assert set(engine.lora.base) == {n.removesuffix(".weight") for n in before if n.removesuffix(".weight")
                                     in engine.lora.layers}       # one base copy per adapted layer, kept once


def test_whole_weights_become_the_base_the_next_adapter_merges_onto(tiny_model, tiny_model_v2):
    from safetensors.torch import load_file
    base = load_model(tiny_model)
    engine = engine_of(tiny_model)
    engine.update_weights(WeightBucket.of(1, adapter(base, seed=7)))
    engine.update_weights(WeightBucket.of(2, load_file(str(tiny_model_v2 / "model.safetensors"))))
    assert_generates_like(engine, load_model(tiny_model_v2), random_prompts([25], seed=4))  # as they are
    ad = adapter(base, seed=8)
    engine.update_weights(WeightBucket.of(3, ad))
    assert_generates_like(engine, merged_model(tiny_model_v2, ad), random_prompts([25], seed=4))


def test_in_bfloat16_a_version_equals_its_merged_weights_loaded_whole(tiny_model):
    """bf16 weights (oneDNN's bf16 copies where the CPU has them): after two adapter versions the engine computes
    exactly what an engine given merged(base, A, B) as whole weights computes; no rounding builds up."""
    base = load_model(tiny_model)
    engine = engine_of(tiny_model, device="cpu", dtype="bfloat16")
    engine.update_weights(WeightBucket.of(1, adapter(base, seed=12)))
    ad = adapter(base, seed=13)
    engine.update_weights(WeightBucket.of(2, ad))
    bf16 = load_model(tiny_model, dtype=torch.bfloat16)
    params = dict(bf16.named_parameters())
    whole = {n: merged(params[n], ad[n[:-7] + ".lora_A.weight"], ad[n[:-7] + ".lora_B.weight"], LORA.scaling)
             if n[:-7] + ".lora_A.weight" in ad else p.detach() for n, p in params.items()}
    other = engine_of(tiny_model, lora=LoraConfig(), device="cpu", dtype="bfloat16")
    other.update_weights(WeightBucket.of(2, whole))
    weights = dict(engine.named_weights())
    assert all(torch.equal(weights[n], w) for n, w in other.named_weights())
    prompts = random_prompts([18, 35], seed=7)
    for a, b in zip(engine.generate(prompts, GREEDY), other.generate(prompts, GREEDY)):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_a_misfit_adapter_is_refused_in_one_line_and_changes_nothing(tiny_model):
    base = load_model(tiny_model)
    good = adapter(base, seed=9)
    q = "model.layers.0.self_attn.q_proj"
    cases = {
        "engine.lora.rank=0": (None, good),
        "not a linear layer": (LORA, {**good, "model.layers.9.self_attn.q_proj.lora_A.weight": torch.zeros(4, 128)}),
        "expected": (LORA, {**good, f"{q}.lora_A.weight": torch.zeros(8, 128)}),
        "without": (LORA, {k: v for k, v in good.items() if k != f"{q}.lora_B.weight"}),
        "mixes": (LORA, {**good, "model.norm.weight": torch.ones(128)}),
    }
    targets = LoraConfig(rank=4, alpha=8.0, target_modules=("q_proj",))
    cases["target_modules"] = (targets, good)
    for match, (cfg, tensors) in cases.items():
        engine = engine_of(tiny_model, lora=cfg or LoraConfig())
        before = live(engine)
        with pytest.raises(ValueError, match=match) as e:
            engine.update_weights(WeightBucket.of(1, tensors))
        assert "\n" not in str(e.value)
        assert engine.version == 0 and all(torch.equal(w, before[n]) for n, w in engine.named_weights())


def test_engine_config_takes_lora_as_a_dict():
    cfg = EngineConfig(lora={"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]})
    assert cfg.lora == LoraConfig(rank=8, alpha=16, target_modules=("q_proj", "v_proj")) and cfg.lora.enabled
    assert not EngineConfig().lora.enabled
    with pytest.raises(ConfigError, match="target_modules"):
        EngineConfig(lora={"rank": 8, "target_modules": ["lm_head"]})


async def test_inference_worker_installs_an_adapter_version(tiny_model):
    from rollart.inference.worker import InferenceWorker
    base = load_model(tiny_model)
    ad = adapter(base, seed=10)
    worker = InferenceWorker(engine_obj=engine_of(tiny_model), name="lora-0")
    try:
        assert await worker.update_weights(UpdateWeights.of(WeightBucket.of(1, ad))) == 1
        prompts = random_prompts([9, 33], seed=5)
        results = [await worker.generate(GenerateRequest(f"w{i}", p, GREEDY)) for i, p in enumerate(prompts)]
        ref = merged_model(tiny_model, ad)
        for p, r in zip(prompts, results):
            assert r.token_ids == greedy_reference(ref, p, N)[0] and r.versions == [1] * N
        with pytest.raises(ValueError, match="expected"):
            await worker.update_weights(UpdateWeights.of(WeightBucket.of(2, {k: v[:2] for k, v in ad.items()})))
        assert await worker.get_version(None) == 1
    finally:
        await worker.shutdown()


@pytest.mark.cuda
def test_lora_sync_on_the_gpu_reaches_the_cuda_graphs(tiny_model):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    lora_sync_reaches_generation(tiny_model, "cuda")


def test_lora_sync_with_the_gpu_tests_settings_on_the_cpu(tiny_model):
    """The cuda test's engine settings and steps, on the CPU (its first GPU run failed in the test's own setup)."""
    lora_sync_reaches_generation(tiny_model, "cpu")


def lora_sync_reaches_generation(tiny_model, device):
    base = load_model(tiny_model)
    ad = adapter(base, seed=11)
    engine = engine_of(tiny_model, device=device, dtype="float32", num_kv_blocks=256, max_num_seqs=8)
    assert (engine.runner.graphs is not None) == (device == "cuda")
    prompts = random_prompts([7, 30, 64], seed=6)
    engine.generate(prompts, GREEDY)                                  # graphs captured and replayed before
    engine.update_weights(WeightBucket.of(1, {k: v.to(device) for k, v in ad.items()}))
    outs = engine.generate(prompts, GREEDY)
    ref = merged_model(tiny_model, ad)
    for p, out in zip(prompts, outs):
        tokens, lps = greedy_reference(ref, p, N)
        assert out.token_ids == tokens
        torch.testing.assert_close(torch.tensor(out.logprobs), torch.tensor(lps), atol=1e-3, rtol=0)
