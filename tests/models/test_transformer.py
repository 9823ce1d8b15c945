"""rollart.models: forward equals transformers' on the same checkpoint; save/load round-trips; paged path equals dense."""
import json

import pytest
import torch

from rollart.models import CausalLM, ModelConfig, load_model, load_tokenizer, save_model
from rollart.models.paged import PagedBatch, build_group


def _hf_logits(path, ids):
    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(ids).logits


@pytest.mark.parametrize("fixture", ["tiny_qwen3", "tiny_llama_gqa"])
def test_forward_matches_transformers(fixture, request):
    path = request.getfixturevalue(fixture)
    model = load_model(path)
    ids = torch.randint(0, model.config.vocab_size, (3, 37), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model(ids)
    assert ours.shape == (3, 37, model.config.vocab_size)
    torch.testing.assert_close(ours, _hf_logits(path, ids), atol=1e-5, rtol=1e-5)


def test_qwen2_untied_with_bias_matches_transformers(tmp_path):
    cfg = ModelConfig(model_type="qwen2", vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, tie_word_embeddings=False,
                      rope_theta=1e6)
    model = CausalLM(cfg)
    model.init_weights(torch.Generator().manual_seed(3))
    with torch.no_grad():  # non-zero biases so that a dropped bias would show
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.1)
    save_model(model, tmp_path)
    ids = torch.randint(0, 300, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(load_model(tmp_path)(ids), _hf_logits(tmp_path, ids), atol=1e-5, rtol=1e-5)


def test_save_load_roundtrip_keeps_hf_names(tiny_qwen3, tmp_path):
    model = load_model(tiny_qwen3)
    save_model(model, tmp_path)
    from safetensors import safe_open
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "model.layers.0.self_attn.q_proj.weight" in names and "model.layers.3.self_attn.k_norm.weight" in names
    assert "lm_head.weight" not in names  # tied
    again = load_model(tmp_path)
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "qwen3"


def test_missing_weight_is_a_clear_error(tiny_qwen3, tmp_path):
    from safetensors.torch import load_file, save_file
    state = load_file(str(tiny_qwen3 / "model.safetensors"))
    del state["model.norm.weight"]
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((tiny_qwen3 / "config.json").read_text())
    with pytest.raises(ValueError, match="model.norm.weight"):
        load_model(tmp_path)
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path / "nope")


def test_unsupported_architecture_refused():
    with pytest.raises(ValueError, match="not supported"):
        ModelConfig.from_hf_dict({"model_type": "gpt2", "hidden_size": 8, "num_attention_heads": 2})


def test_paged_forward_equals_dense(tiny_llama_gqa):
    """Two sequences, one with 5 tokens already cached, one fresh, through a shuffled block table."""
    model = load_model(tiny_llama_gqa)
    cfg, bs = model.config, 4
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, cfg.vocab_size, (13,), generator=g), torch.randint(0, cfg.vocab_size, (9,), generator=g)]
    cache = torch.zeros(cfg.num_hidden_layers, 2, 16, bs, cfg.num_key_value_heads, cfg.head_dim)
    tables = torch.tensor([[7, 2, 11, 5], [3, 14, 9, 0]])

    def run(starts, ends):
        ids = torch.cat([s[a:b] for s, a, b in zip(seqs, starts, ends)])
        pos = torch.cat([torch.arange(a, b) for a, b in zip(starts, ends)])
        slots = torch.cat([tables[i][torch.arange(a, b) // bs] * bs + torch.arange(a, b) % bs
                           for i, (a, b) in enumerate(zip(starts, ends))])
        q_lens = torch.tensor([b - a for a, b in zip(starts, ends)])
        offsets = torch.cumsum(q_lens, 0) - q_lens
        group = build_group(offsets, q_lens, torch.tensor(ends), tables, bs)
        with torch.no_grad():
            return model.forward_paged(ids, PagedBatch(pos, slots, [group]), cache, offsets + q_lens - 1)

    run([0, 0], [5, 1])                      # first chunk of each
    last = run([5, 1], [13, 9])              # the rest, attending to what was cached
    with torch.no_grad():
        dense = [model(s[None])[0, -1] for s in seqs]
    torch.testing.assert_close(last, torch.stack(dense), atol=1e-5, rtol=1e-5)


def test_fused_projections_same_logits_and_follow_weight_loads(tiny_qwen3):
    """fuse_projections (engine path): same outputs; loading weights into the HF-named views updates the
    fused matrices; training through the views still produces gradients."""
    from rollart.models import load_weights
    model = load_model(tiny_qwen3)
    cfg = model.config
    ids = torch.randint(0, cfg.vocab_size, (7,))
    cache = torch.zeros(cfg.num_hidden_layers, 2, 4, 4, cfg.num_key_value_heads, cfg.head_dim)

    def paged():
        q_lens = torch.tensor([7])
        group = build_group(torch.tensor([0]), q_lens, q_lens, torch.tensor([[0, 1]]), 4)
        with torch.no_grad():
            return model.forward_paged(ids, PagedBatch(torch.arange(7), torch.arange(7), [group]), cache, torch.tensor([6]))

    before = paged()
    model.fuse_projections()
    with torch.no_grad():
        assert model.model.layers[0].self_attn._fused_ok()
    assert not model.model.layers[0].self_attn._fused_ok()  # with grad: the HF-named views are used
    torch.testing.assert_close(paged(), before, atol=1e-5, rtol=1e-5)
    bumped = {n: p + 0.05 for n, p in model.state_dict().items() if "proj" in n}
    load_weights(model, bumped.items())      # new values for the HF names flow into the fused matrices
    with torch.no_grad():
        assert model.model.layers[0].self_attn._fused_ok()
    unfused = load_model(tiny_qwen3)
    load_weights(unfused, bumped.items())
    with torch.no_grad():
        dense = unfused(ids[None])[0, -1]
    torch.testing.assert_close(paged()[0], dense, atol=1e-5, rtol=1e-5)
    model.train()
    model(ids[None]).sum().backward()
    assert model.model.layers[0].self_attn.k_proj.weight.grad is not None


def test_tokenizer_chat_template_and_single_char_tokens(tiny_qwen3):
    tok = load_tokenizer(tiny_qwen3)
    for ch in "LDRUSFHGPABCXYZ0123456789":
        assert len(tok.encode(ch, add_special_tokens=False)) == 1, ch
    assert tok.encode("2024", add_special_tokens=False) == [tok.convert_tokens_to_ids(c) for c in "2024"]
    ids = tok.apply_chat_template([{"role": "user", "content": "SFFF\nFHFH"}], add_generation_prompt=True,
                                  tokenize=True)["input_ids"]
    assert tok.decode(ids) == "<|im_start|>user\nSFFF\nFHFH<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>"
