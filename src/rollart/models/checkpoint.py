"""Load and save HF-format model folders (config.json + *.safetensors + tokenizer files).

``save_model`` writes Hugging Face parameter names and config keys, so the folder loads in
transformers (``AutoModelForCausalLM.from_pretrained``) and in vLLM as well as back here.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

import torch
from safetensors.torch import load_file, save_file

from rollart.models.config import ModelConfig
from rollart.models.transformer import CausalLM


def _safetensors_files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}: expected an HF-format model folder "
                                f"(make one with `python -m rollart.tools.make_tiny_model {path}`)")
    return files


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for f in _safetensors_files(Path(path)):
        try:
            state.update(load_file(str(f)))
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error type for a damaged file
            raise ValueError(f"{f} is not a readable safetensors file ({type(e).__name__}: "
                             f"{str(e).strip().splitlines()[0] if str(e).strip() else 'no message'})") from e
    return state


def load_weights(model: CausalLM, named_tensors: Iterable[tuple[str, torch.Tensor]], strict: bool = True) -> set[str]:
    """Copy HF-named tensors into ``model`` in place (shape-checked); returns the names loaded.

    With ``strict``, unknown names are an error. ``lm_head.weight`` of a tied model is skipped
    (the embedding is the lm_head).
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded: set[str] = set()
    with torch.no_grad():
        for name, tensor in named_tensors:
            if name not in params:
                if name == "lm_head.weight" and model.config.tie_word_embeddings:
                    continue
                if strict:
                    raise KeyError(f"weight {name!r} does not exist in {model.config.model_type} model "
                                   f"(e.g. {next(iter(params))!r}); was it saved from another architecture?")
                continue
            p = params[name]
            if p.shape != tensor.shape:
                raise ValueError(f"weight {name!r}: shape {tuple(tensor.shape)} does not match model {tuple(p.shape)}")
            p.copy_(tensor)
            loaded.add(name)
    return loaded


META_INIT_MIN_PARAMS = 20_000_000
"""Models at least this large are built on the meta device (no random init) before their weights load."""


def _approx_params(config: ModelConfig) -> int:
    h, layers = config.hidden_size, config.num_hidden_layers
    embed = config.vocab_size * h * (1 if config.tie_word_embeddings else 2)
    return embed + layers * (4 * h * h + 3 * h * config.intermediate_size)


def load_model(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> CausalLM:
    """Build a CausalLM from an HF-format folder; every parameter must be present in the checkpoint."""
    path = Path(path)
    config = ModelConfig.from_pretrained(path)
    if _approx_params(config) < META_INIT_MIN_PARAMS:  # small: random init costs less than the meta device's
        model = CausalLM(config).to(device)            # one-time lazy imports (~1-2 s in every process)
    else:  # large: skip the random init whose values the checkpoint overwrites anyway
        with torch.device("meta"):
            model = CausalLM(config)
        model.to_empty(device=device)
    model.tie_weights()
    model.to(dtype)
    state = load_state_dict(path)
    loaded = load_weights(model, ((k, v.to(dtype)) for k, v in state.items()))
    missing = {n for n, _ in model.named_parameters()} - loaded
    if missing:
        raise ValueError(f"checkpoint {path} lacks {len(missing)} weights, e.g. {sorted(missing)[:3]}")
    return model.eval()


def save_model(model: CausalLM, path: str | Path, dtype: torch.dtype | None = None) -> None:
    """Write config.json and model.safetensors with HF names (lm_head omitted when tied)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {}
    for name, p in model.named_parameters():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        t = p.detach().to("cpu")
        state[name] = (t.to(dtype) if dtype is not None else t).contiguous().clone()
    cfg = model.config.to_hf_dict()
    cfg["torch_dtype"] = str(next(iter(state.values())).dtype).removeprefix("torch.")
    (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})


def load_tokenizer(path: str | Path):
    """The folder's tokenizer (tokenizer.json + chat template) as a transformers fast tokenizer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{path}/tokenizer.json not found: the model folder needs a tokenizer")
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (ValueError, OSError):
        return PreTrainedTokenizerFast.from_pretrained(str(path))
