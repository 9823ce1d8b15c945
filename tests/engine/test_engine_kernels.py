"""LLMEngine on its kernel paths (Triton paged attention + device sampling, Triton's interpreter on the CPU; rollart's
C kernels): greedy tokens and logprobs equal a full recompute through chunked prefill, prefix caching, preemption
and a weight update; seeded sampling is per request. Also the engine on device=cpu in bfloat16."""
import pytest
import torch
from safetensors.torch import load_file

from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.models import cpu_kernels, load_model
from rollart.types import GenerateRequest, WeightBucket

from engine_helpers import greedy_reference, random_prompts

N = 6
GREEDY = SamplingParams(temperature=0, max_tokens=N, ignore_eos=True)


@pytest.fixture(scope="module")
def gqa_models(tmp_path_factory):
    """Two weight versions of a 2-layer model with 4 query heads over 2 KV heads (small: the interpreter is slow)."""
    from rollart.tools.make_tiny_model import make_tiny_model
    paths = [make_tiny_model(tmp_path_factory.mktemp(f"gqa{s}"), hidden=64, layers=2, heads=4, kv_heads=2,
                             head_dim=32, intermediate=128, seed=s, init_std=0.2) for s in (21, 22)]
    return paths, [load_model(p) for p in paths]


def _kernel_engine(path, kernel="triton", **kw):
    if kernel == "triton":
        pytest.importorskip("triton", reason="the kernel path needs the triton package (pip install triton)")
    elif kernel == "cpu" and cpu_kernels.unavailable():
        pytest.skip(f"rollart's C kernels cannot be built here: {cpu_kernels.unavailable()}")
    kw.setdefault("num_kv_blocks", 32)
    engine = LLMEngine(EngineConfig(model=str(path), kernels=kernel, **kw))
    assert engine.runner.kernel == kernel
    return engine


KERNELS = pytest.mark.parametrize("kernel", ["triton", "cpu", "torch"])  # torch: where the C kernels cannot build


@KERNELS
def test_kernel_path_greedy_equals_full_recompute_with_chunks_and_prefix_cache(gqa_models, kernel):
    (path, _), (model, _) = gqa_models
    prompts = random_prompts([1, 17, 35], seed=7)
    engine = _kernel_engine(path, kernel, max_num_batched_tokens=24, block_size=8)  # the 35-token prompt is chunked
    outs = engine.generate(prompts, GREEDY)
    for p, o in zip(prompts, outs):
        ref, ref_lp = greedy_reference(model, p, N)
        assert o.token_ids == ref
        torch.testing.assert_close(torch.tensor(o.logprobs), torch.tensor(ref_lp), atol=1e-4, rtol=0)
    again = engine.generate([prompts[2] + outs[2].token_ids + [5, 6]], GREEDY)[0]  # next turn: history cached
    assert again.num_cached_tokens == 40
    assert again.token_ids == greedy_reference(model, prompts[2] + outs[2].token_ids + [5, 6], N)[0]


@KERNELS
def test_kernel_path_preemption_and_weight_update(gqa_models, kernel):
    (path, path2), (v1, v2) = gqa_models
    prompts = random_prompts([14, 11, 9], seed=8)
    engine = _kernel_engine(path, kernel, num_kv_blocks=7, block_size=8)     # 3 x 3 blocks needed: preempts
    for i, p in enumerate(prompts):
        engine.add_request(GenerateRequest(f"r{i}", p, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)))
    done = {}
    while max(len(s.output_token_ids) for s in engine.requests.values()) < 3:
        done.update((o.request_id, o) for o in engine.step())
    engine.update_weights(WeightBucket.of(1, load_file(str(path2 / "model.safetensors"))))
    while engine.has_unfinished_requests():
        done.update((o.request_id, o) for o in engine.step())
    assert engine.stats().preemptions > 0
    switches = []
    for i, p in enumerate(prompts):
        out = done[f"r{i}"]
        switch = out.versions.count(0)
        assert out.versions == [0] * switch + [1] * (8 - switch)
        assert out.token_ids == greedy_reference(v1, p, 8, switch_at=switch, model_after=v2)[0]
        switches.append(switch)
    assert any(0 < s < 8 for s in switches), switches                      # someone switched mid-generation


def test_decode_bucket_buffers_pad_and_match_full_recompute(gqa_models):
    """The CUDA-graph decode path's static buffers, run eagerly on the CPU: batches padded up to a bucket
    (context 0, K/V to the scratch block), stale block-table rows from earlier steps, shrinking batches."""
    (path, _), (model, _) = gqa_models
    engine = _kernel_engine(path, block_size=8, max_num_seqs=6)
    runner = engine.runner
    runner.graphs = runner.decode_graphs(capture=False)
    assert runner.graphs.buckets == [1, 2, 4, 6]
    replays, run = [], runner.graphs.run
    runner.graphs.run = lambda batch: replays.append(len(batch.seqs)) or run(batch)
    prompts = random_prompts([3, 12, 7, 20, 9], seed=12)
    lengths = [2, 9, 5, 7, 3]                                                # finish one by one: 5 -> 4 -> ... rows
    outs = engine.generate(prompts, [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in lengths])
    for p, n, o in zip(prompts, lengths, outs):
        assert o.token_ids == greedy_reference(model, p, n)[0]
    assert {5, 3, 1} <= set(replays)                                        # padded to buckets 6, 4 and exact 1


@KERNELS
@pytest.mark.parametrize("top_p", [0.95, 1.0])
def test_kernel_path_seeded_sampling_is_per_request(gqa_models, kernel, top_p):
    (path, _), (model, _) = gqa_models
    p = random_prompts([9], seed=9)[0]
    sp = SamplingParams(temperature=1.0, top_p=top_p, max_tokens=N, seed=5, ignore_eos=True)
    alone = _kernel_engine(path, kernel).generate([p], sp)[0]
    others = random_prompts([4, 12], seed=10)
    mixed = _kernel_engine(path, kernel).generate(others + [p], [SamplingParams(temperature=1.0, seed=1, max_tokens=N)] * 2 + [sp])
    assert mixed[-1].token_ids == alone.token_ids
    with torch.no_grad():                                                   # logprobs: raw logits, trainer's view
        logp = torch.log_softmax(model(torch.tensor([p + alone.token_ids]))[0], -1)[len(p) - 1:-1]
    torch.testing.assert_close(torch.tensor(alone.logprobs), logp.gather(1, torch.tensor(alone.token_ids)[:, None])[:, 0],
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("linears", ["native", "portable"])
def test_cpu_bfloat16_weights_and_cache(tiny_model, linears, request):
    if linears == "portable":                   # as on a CPU without oneDNN bf16: the C kernels' matmuls serve bf16
        request.getfixturevalue("portable_cpu")
    engine = LLMEngine(EngineConfig(model=str(tiny_model), device="cpu", dtype="bfloat16", num_kv_blocks=32))
    if linears == "portable":
        from rollart.models import cpu_linear
        assert cpu_linear.unavailable(torch.bfloat16)
        assert engine.runner.kernel == "cpu" and engine.runner.packed is not None
    assert engine.runner.kv_cache.dtype is torch.bfloat16 and engine.runner.kv_cache.device.type == "cpu"
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    prompt = random_prompts([20], seed=11)[0]
    out = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0]
    ids, picked = torch.tensor([prompt + out.token_ids]), torch.tensor(out.token_ids)[:, None]

    def teacher_forced(dtype):                                              # no divergence drift
        with torch.no_grad():
            logits = load_model(tiny_model, dtype=dtype)(ids)[0].float()
        return torch.log_softmax(logits, -1)[len(prompt) - 1:-1]

    exact, bf16 = teacher_forced(torch.float32), teacher_forced(torch.bfloat16)
    # the engine in bf16 is about as close to the exact (fp32) logprobs as the training path in bf16 is
    engine_err = (torch.tensor(out.logprobs) - exact.gather(1, picked)[:, 0]).abs().max()
    training_err = (bf16.gather(1, picked) - exact.gather(1, picked)).abs().max()
    assert engine_err <= 2 * training_err + 0.02, (engine_err, training_err)
    assert out.token_ids[0] == int(bf16[0].argmax())


def test_auto_is_cpu_float32_without_gpu_and_bad_settings_are_named(tiny_model):
    from rollart.config import ConfigError
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU default")
    engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=8))
    assert engine.placement.device.type == "cpu" and engine.runner.kv_cache.dtype is torch.float32
    assert engine.runner.kernel == ("cpu" if not cpu_kernels.unavailable() else "torch") and engine.runner.graphs is None
    for kw, msg in [({"device": "gpu"}, "device='gpu'"), ({"kernels": "cuda"}, "kernels='cuda'"),
                    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization=1.5")]:
        with pytest.raises(ConfigError, match=msg):
            EngineConfig(**kw)
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        LLMEngine(EngineConfig(model=str(tiny_model), device="cuda", num_kv_blocks=8))


def test_auto_falls_back_to_torch_where_the_c_kernels_cannot_build(tiny_model, monkeypatch, caplog):
    from rollart.engine import model_runner
    monkeypatch.setattr(model_runner.cpu_kernels, "unavailable", lambda: "no C compiler (cc) on PATH")
    with caplog.at_level("WARNING", logger="rollart.engine.model_runner"):
        engine = LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=32))
    assert engine.runner.kernel == "torch" and "no C compiler" in caplog.text
    prompt = random_prompts([12], seed=13)[0]
    out = engine.generate([prompt], GREEDY)[0]
    assert out.token_ids == greedy_reference(load_model(tiny_model), prompt, N)[0]
    with pytest.raises(ValueError, match="kernels='cpu' cannot run: no C compiler"):
        LLMEngine(EngineConfig(model=str(tiny_model), num_kv_blocks=32, kernels="cpu"))
