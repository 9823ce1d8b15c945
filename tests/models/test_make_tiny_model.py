"""make_tiny_model: CLI writes an HF folder with the files transformers and vLLM read; deterministic per seed."""
import hashlib
import json
import subprocess
import sys

from rollart.models import ModelConfig


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_cli_writes_hf_folder_deterministically(tmp_path):
    from rollart.tools.make_tiny_model import make_tiny_model
    subprocess.run([sys.executable, "-m", "rollart.tools.make_tiny_model", str(tmp_path / "a"), "--seed", "7"],
                   check=True, capture_output=True)
    make_tiny_model(tmp_path / "b", seed=7)  # same seed in-process: byte-identical files
    a, b = tmp_path / "a", tmp_path / "b"
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (a / f).is_file(), f
    assert _digest(a) == _digest(b)
    cfg = ModelConfig.from_pretrained(a)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim, cfg.vocab_size) == (128, 4, 64, 512)
    assert 0.8e6 < cfg.num_params() < 1.2e6
    assert "<|im_start|>" in json.loads((a / "tokenizer_config.json").read_text())["chat_template"]


def test_other_seed_other_weights(tmp_path):
    from rollart.tools.make_tiny_model import make_tiny_model
    a = make_tiny_model(tmp_path / "a", layers=1, seed=0)
    b = make_tiny_model(tmp_path / "b", layers=1, seed=1)
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()
