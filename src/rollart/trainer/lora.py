"""LoRA on a trainer's policy (``trainer.lora.rank > 0``), with ``peft``.

``attach`` injects peft's LoRA layers into the policy in place (the module keeps its own forward; each adapted
``nn.Linear`` becomes a LoRA layer around it) and leaves only the adapters trainable, so only they are in the
optimizer. What leaves the trainer is the adapters alone (``adapter_tensors``, the names of
``rollart.models.lora``): the weight plane moves them and each engine merges them into the base weights it
keeps. A checkpoint holds the adapter in PEFT's format (``save_adapter``: loadable by ``peft`` and by vLLM) and,
beside it, the merged model as a plain HF folder (``merged_state``), servable by anything that serves the base.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from rollart.models.lora import LoraConfig, adapter_part, merged, peft_files

INSTALL = "trainer.lora.rank > 0 needs peft: pip install peft"


def attach(model: nn.Module, cfg: LoraConfig) -> nn.Module:
    """``model`` with LoRA adapters on ``cfg.target_modules``; every other parameter frozen."""
    try:
        from peft import LoraConfig as PeftLoraConfig, inject_adapter_in_model
    except ImportError:
        raise ImportError(INSTALL) from None
    peft_cfg = PeftLoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                              target_modules=list(cfg.target_modules), init_lora_weights=True, bias="none")
    model = inject_adapter_in_model(peft_cfg, model)
    adapted = 0
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
        adapted += ".lora_" in name
    if not adapted:
        raise ValueError(f"trainer.lora.target_modules={list(cfg.target_modules)} matched no linear layer of "
                         f"{type(model).__name__}")
    return model


def adapter_tensors(model: nn.Module, dtype: torch.dtype | None = None) -> list[tuple[str, torch.Tensor]]:
    """(``{module}.lora_A.weight`` / ``.lora_B.weight``, tensor) of every adapter, detached, on the CPU."""
    from peft import get_peft_model_state_dict
    return [(name, t.detach().to(dtype or t.dtype).to("cpu")) for name, t in get_peft_model_state_dict(model).items()]


def load_adapter_tensors(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Set the adapters from ``{module}.lora_A/B.weight`` tensors (the names ``adapter_tensors`` gives)."""
    from peft import set_peft_model_state_dict
    result = set_peft_model_state_dict(model, tensors)
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if missing or result.unexpected_keys:
        raise ValueError(f"adapter does not fit the model: missing {missing[:3]}, unexpected "
                         f"{list(result.unexpected_keys)[:3]}")


def read_adapter(path: Path) -> dict[str, torch.Tensor]:
    """An ``adapter_model.safetensors`` written by ``save_adapter`` (or peft) as ``adapter_tensors`` names."""
    from safetensors.torch import load_file
    return {name.removeprefix("base_model.model."): t for name, t in load_file(str(path)).items()}


def merged_state(model: nn.Module, cfg: LoraConfig) -> dict[str, torch.Tensor]:
    """The policy's weights as the base model's names, each adapted weight merged with its adapter."""
    params = dict(model.named_parameters())
    adapters = {}
    for name, tensor in adapter_tensors(model):
        module, part = adapter_part(name)
        adapters.setdefault(module, {})[part] = tensor
    state = {}
    for name, p in params.items():
        if ".lora_" in name:
            continue
        plain = name.replace(".base_layer.", ".")
        module = plain.rsplit(".", 1)[0]
        if plain.endswith(".weight") and module in adapters:
            ab = adapters[module]
            state[plain] = merged(p.detach().cpu(), ab["A"], ab["B"], cfg.scaling)
        else:
            state[plain] = p.detach().cpu()
    return state


def save_adapter(model: nn.Module, cfg: LoraConfig, folder: Path, base_model: str = "") -> Path:
    """The adapter in PEFT's format (``adapter_config.json`` + ``adapter_model.safetensors``) in ``folder``."""
    return peft_files(cfg, dict(adapter_tensors(model)), folder, base_model)


def save_merged(model: nn.Module, cfg: LoraConfig, base_folder: str, folder: Path) -> None:
    """The merged policy as an HF-format folder: the base folder's config and tokenizer files, merged weights."""
    import shutil

    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    base = Path(base_folder)
    for f in base.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "model.safetensors.index.json":
            shutil.copy2(f, folder / f.name)
    state = merged_state(model, cfg)
    if "lm_head.weight" not in _base_names(base):
        state.pop("lm_head.weight", None)  # tied to the embedding: the base writes it once
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})


def _base_names(folder: Path) -> set[str]:
    from safetensors import safe_open
    names: set[str] = set()
    for f in folder.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            names.update(st.keys())
    return names
