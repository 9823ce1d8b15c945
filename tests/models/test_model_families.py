"""Model families: llama (with Llama 3 RoPE scaling), qwen2 and qwen3 checkpoints made by transformers give
transformers' logits in rollart (full forward and engine), and what rollart cannot run is refused in one line."""
import json

import pytest
import torch

from rollart.config import ConfigError
from rollart.engine import EngineConfig, LLMEngine, SamplingParams
from rollart.models import CausalLM, ModelConfig, UnsupportedModel, load_model, save_model
from rollart.models.rope import rope_frequencies

transformers = pytest.importorskip("transformers")

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
"""A pretraining context of 32 positions: head_dim 32 then has wavelengths in all three llama3 bands (kept,
blended, slowed), and the test sequences run well past it."""
SHAPE = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, head_dim=32, max_position_embeddings=256, initializer_range=0.2,
             bos_token_id=None, eos_token_id=None, pad_token_id=None)
"""Tiny, with weights large enough (std 0.2) that attention, and so RoPE, visibly moves the logits."""

FAMILIES = {
    "llama3": lambda: transformers.LlamaConfig(**SHAPE, rope_theta=10000.0, rope_scaling=dict(LLAMA3),
                                               attention_bias=True, tie_word_embeddings=False),
    "qwen2": lambda: transformers.Qwen2Config(**SHAPE, rope_theta=1e6, tie_word_embeddings=True),
    "qwen3": lambda: transformers.Qwen3Config(**SHAPE, rope_theta=1e6, attention_bias=True,
                                              tie_word_embeddings=False),
}


def _hf_folder(path, family: str, seed: int = 0):
    """A random transformers model of ``family`` saved to ``path``, with non-zero biases and non-unit norms so
    that a dropped bias or norm shows."""
    torch.manual_seed(seed)
    hf = transformers.AutoModelForCausalLM.from_config(FAMILIES[family]()).float().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.2)
            elif name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    hf.save_pretrained(path)
    return hf


def _ids(n: int, length: int, seed: int = 0):
    return torch.randint(0, SHAPE["vocab_size"], (n, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def llama3_folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama3")
    return path, _hf_folder(path, "llama3")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_equal_transformers(family, tmp_path):
    hf = _hf_folder(tmp_path, family)
    model = load_model(tmp_path)
    ids = _ids(3, 100)                                                      # positions 0..99, past 32
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
    assert model.config.model_type == hf.config.model_type
    assert model.config.o_bias == (family != "qwen2") and model.config.qkv_bias


def test_llama3_config_read_and_scaling_matters(llama3_folder):
    """The scaling is read from the checkpoint and changes the logits past the pretraining context: with default
    RoPE the same weights give other logits there (so the equality above is not vacuous)."""
    path, hf = llama3_folder
    cfg = ModelConfig.from_pretrained(path)
    assert cfg.rope_scaling is not None and cfg.rope_scaling.factor == 8.0
    assert cfg.rope_scaling.original_max_position_embeddings == 32
    scaled = load_model(path)
    plain = CausalLM(ModelConfig.from_hf_dict({**json.loads((path / "config.json").read_text()),
                                               "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}))
    plain.load_state_dict(scaled.state_dict())
    ids = _ids(2, 100, seed=1)
    with torch.no_grad():
        gap = (scaled(ids) - plain(ids)).abs().amax(-1).amax(0)             # (T,) largest logit change per position
    assert gap[40:].min() > 1e-2


@pytest.mark.parametrize("scaling", [dict(LLAMA3),
                                     {**LLAMA3, "factor": 32.0, "original_max_position_embeddings": 8192},
                                     {**LLAMA3, "low_freq_factor": 2.0, "high_freq_factor": 8.0}])
@pytest.mark.parametrize("theta,head_dim", [(10000.0, 32), (500000.0, 128)])
def test_llama3_frequencies_equal_transformers(scaling, theta, head_dim):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    hf_cfg = transformers.LlamaConfig(hidden_size=256, num_attention_heads=2, head_dim=head_dim, rope_theta=theta,
                                      rope_scaling=dict(scaling), max_position_embeddings=16384)
    theirs, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](hf_cfg)
    ours = rope_frequencies(ModelConfig.from_hf_dict(hf_cfg.to_dict()))
    assert attention_factor == 1.0 and torch.equal(ours, theirs)
    assert not torch.equal(ours, rope_frequencies(ModelConfig(head_dim=head_dim, rope_theta=theta)))


def test_saved_llama3_folder_loads_in_transformers(llama3_folder, tmp_path):
    """rollart's save_model writes the scaling back (rope_parameters, and rope_scaling for older readers)."""
    path, hf = llama3_folder
    save_model(load_model(path), tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["rope_parameters"]["rope_type"] == written["rope_scaling"]["rope_type"] == "llama3"
    again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    ids = _ids(2, 90, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, hf(ids).logits, atol=1e-5, rtol=1e-5)


def test_engine_greedy_equals_transformers_generate(llama3_folder):
    """rollart's engine (paged path) decodes the tokens transformers' greedy generate does, across position 32."""
    path, hf = llama3_folder
    prompts = _ids(3, 40, seed=3).tolist()
    prompts = [prompts[0][:5], prompts[1][:20], prompts[2]]
    n = 30
    outs = LLMEngine(EngineConfig(model=str(path), device="cpu", num_kv_blocks=64)).generate(
        prompts, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
    for p, o in zip(prompts, outs):
        with torch.no_grad():
            want = hf.generate(torch.tensor([p]), max_new_tokens=n, do_sample=False)[0, len(p):]
        assert o.token_ids == want.tolist()


def _config_folder(path, d: dict):
    """A model folder as preflight sees one: config.json, a tokenizer and a weights file (contents unread)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(d))
    (path / "tokenizer.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    return path


_LLAMA = dict(model_type="llama", vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=2, max_position_embeddings=256)
UNSUPPORTED = {
    "mistral": (lambda: transformers.MistralConfig(**SHAPE, sliding_window=16).to_dict(), "model_type 'mistral'"),
    "gemma": (lambda: transformers.GemmaConfig(**SHAPE).to_dict(), "model_type 'gemma'"),
    "yarn": (lambda: {**_LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn'"),
    "linear": (lambda: {**_LLAMA, "rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_type 'linear'"),
    "sliding": (lambda: transformers.Qwen2Config(**SHAPE, use_sliding_window=True, sliding_window=16,
                                                 max_window_layers=1).to_dict(), "sliding-window attention"),
    "mlp_bias": (lambda: {**_LLAMA, "mlp_bias": True}, "mlp_bias"),
    "gelu": (lambda: {**_LLAMA, "hidden_act": "gelu"}, "hidden_act 'gelu'"),
    "quantized": (lambda: {**_LLAMA, "quantization_config": {"quant_method": "awq", "bits": 4}},
                  "quantized weights (quant_method 'awq')"),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_checkpoint_refused_in_one_line(case, tmp_path):
    """The engine refuses at start naming the folder, what it lacks and engine.backend=vllm; so does the run's
    preflight (without the vLLM hint when the run already uses it: the trainer still needs rollart's model)."""
    from rollart.pipeline.config import PipelineConfig
    from rollart.pipeline.preflight import check_model
    make, what = UNSUPPORTED[case]
    folder = _config_folder(tmp_path / case, make())
    with pytest.raises(UnsupportedModel) as engine_err:
        LLMEngine(EngineConfig(model=str(folder), device="cpu", num_kv_blocks=8))
    line = str(engine_err.value)
    assert "\n" not in line and str(folder) in line and what in line and "engine.backend=vllm" in line

    with pytest.raises(ConfigError) as torch_run:
        check_model(PipelineConfig(model=str(folder)))
    line = str(torch_run.value)
    assert "\n" not in line and f"model={str(folder)!r}" in line and what in line and "engine.backend=vllm" in line
    with pytest.raises(ConfigError) as vllm_run:
        check_model(PipelineConfig(model=str(folder), engine=EngineConfig(backend="vllm")))
    line = str(vllm_run.value)
    assert "\n" not in line and what in line and "trainer" in line and "engine.backend=vllm" not in line


def test_supported_variants_accepted(tmp_path):
    """What only looks unusual is accepted: an inactive or context-long sliding window, a legacy rope_scaling
    with ``type``, a qwen3 config without head_dim (transformers' default, 128)."""
    from rollart.pipeline.config import PipelineConfig
    from rollart.pipeline.preflight import check_model
    qwen2 = transformers.Qwen2Config(**SHAPE).to_dict()
    legacy = {"type": "llama3", **{k: v for k, v in LLAMA3.items() if k != "rope_type"}}
    for i, d in enumerate([{**qwen2, "use_sliding_window": False, "sliding_window": 16},
                           {**qwen2, "use_sliding_window": True, "sliding_window": 256, "max_window_layers": 0},
                           {**_LLAMA, "rope_scaling": legacy}]):
        check_model(PipelineConfig(model=str(_config_folder(tmp_path / str(i), d))))
    assert ModelConfig.from_hf_dict({**_LLAMA, "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                                "high_freq_factor": 4.0}}).rope_scaling.factor == 8.0
    qwen3 = {k: v for k, v in transformers.Qwen3Config(**SHAPE).to_dict().items() if k != "head_dim"}
    assert ModelConfig.from_hf_dict(qwen3).head_dim == 128


@pytest.mark.parametrize("text,says", [
    ("{not json", "config.json is not a readable HF model config (JSONDecodeError"),
    (json.dumps({"model_type": "llama", "hidden_size": 64}), "(KeyError: 'num_attention_heads')"),
    (json.dumps({**_LLAMA, "rope_scaling": {**LLAMA3, "low_freq_factor": 4.0}}),
     "config.json: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got 4.0 and 4.0"),
])
def test_unreadable_or_wrong_config_is_one_line(text, says, tmp_path):
    from rollart.pipeline.config import PipelineConfig
    from rollart.pipeline.preflight import check_model
    folder = _config_folder(tmp_path / "m", {})
    (folder / "config.json").write_text(text)
    with pytest.raises(ConfigError) as err:
        check_model(PipelineConfig(model=str(folder)))
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"model={str(folder)!r}: ") and says in line
