"""SmolLM2-135M-Instruct (slow): get_smollm2 builds/reuses the cached folder; our forward equals transformers'."""
import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="get_smollm2 needs gguf (pip install gguf accelerate)")
    from rollart.tools.get_smollm2 import get_smollm2
    return get_smollm2()


def test_get_smollm2_is_idempotent(smollm2):
    import subprocess
    import sys
    stamp = (smollm2 / "model.safetensors").stat().st_mtime_ns
    r = subprocess.run([sys.executable, "-m", "rollart.tools.get_smollm2", "--cache", str(smollm2)],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip().splitlines()[-1] == str(smollm2)
    assert (smollm2 / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt


def test_smollm2_forward_matches_transformers_and_answers(smollm2):
    from transformers import AutoModelForCausalLM

    from rollart.models import load_model, load_tokenizer
    tok = load_tokenizer(smollm2)
    ours = load_model(smollm2)
    assert ours.config.model_type == "llama" and ours.config.num_hidden_layers == 30
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, tokenize=True)["input_ids"]
    x = torch.tensor([ids])
    hf = AutoModelForCausalLM.from_pretrained(str(smollm2), dtype=torch.float32).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(x).logits, atol=1e-4, rtol=1e-4)
        for _ in range(8):  # a few greedy tokens of the real model: it knows the answer
            x = torch.cat([x, ours(x)[:, -1].argmax(-1, keepdim=True)], 1)
    assert "Paris" in tok.decode(x[0, len(ids):])
