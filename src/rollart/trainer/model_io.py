"""Build, export, save and restore the policy network for any trainer backend.

Models are ``rollart.models.CausalLM`` (saved HF-loadable with ``rollart.models.save_model``) or, for
tests and custom code, any ``nn.Module`` mapping input_ids (B, T) to logits (B, T, V) (saved with
safetensors under its own state-dict names).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from rollart.config import ConfigError
from rollart.loader import load
from rollart.trainer.config import TrainerConfig

def resolve_object(spec: str, kind: str = "object"):
    """Import ``"module:attr"`` and return the attribute, with an error naming what was wrong (see rollart.loader)."""
    return load(spec, kind)


def build_model(cfg: TrainerConfig) -> nn.Module:
    """The policy from ``cfg.model_factory`` ("module:function") or ``cfg.model_path`` (HF folder), in float32
    on the CPU: the master weights (the trainer moves them to its device; ``cfg.dtype`` is the compute dtype)."""
    if cfg.model_factory:
        return resolve_object(cfg.model_factory, "trainer.model_factory")().float()
    if not cfg.model_path:
        raise ValueError("trainer needs a model: set trainer.model_path=FOLDER (make a tiny one with "
                         "`python -m rollart.tools.make_tiny_model FOLDER`) or trainer.model_factory=module:fn")
    if not (Path(cfg.model_path) / "config.json").is_file():
        raise ConfigError(f"trainer.model_path={cfg.model_path!r} has no config.json: point it to an HF-format model "
                          "folder (make a tiny one with `python -m rollart.tools.make_tiny_model FOLDER`)")
    from rollart.models import load_model
    return load_model(cfg.model_path, dtype=torch.float32)


def _is_causal_lm(model: nn.Module) -> bool:
    try:
        from rollart.models import CausalLM
    except ImportError:
        return False
    return isinstance(model, CausalLM)


def export_named_tensors(model: nn.Module, dtype: torch.dtype | None = None) -> list[tuple[str, torch.Tensor]]:
    """Every trainable weight once (tied weights once), detached, on CPU, with its HF/state-dict name; cast
    to ``dtype`` on its own device first (a GPU's bf16 copy crosses PCIe at half the bytes of fp32)."""
    return [(name, p.detach().to(dtype or p.dtype).to("cpu")) for name, p in model.named_parameters()]


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute activations layer by layer in backward: rollart CausalLM, or a model with HF's method."""
    if _is_causal_lm(model):
        model.gradient_checkpointing = True
    elif callable(getattr(model, "gradient_checkpointing_enable", None)):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        raise ValueError(f"trainer.gradient_checkpointing=true: {type(model).__name__} supports neither rollart's "
                         "CausalLM checkpointing nor gradient_checkpointing_enable(); set it to false")


def save_policy(model: nn.Module, folder: Path) -> None:
    """Write the model to ``folder``: HF format for CausalLM, ``model.safetensors`` otherwise."""
    folder.mkdir(parents=True, exist_ok=True)
    if _is_causal_lm(model):
        from rollart.models import save_model
        save_model(model, folder)
    else:
        from safetensors.torch import save_model as save_module
        save_module(model, str(folder / "model.safetensors"))


def load_policy_weights(model: nn.Module, folder: Path) -> None:
    """Load weights written by :func:`save_policy` into ``model`` in place."""
    if _is_causal_lm(model):
        from rollart.models import load_state_dict, load_weights
        load_weights(model, load_state_dict(folder).items())
    else:
        from safetensors.torch import load_model as load_module
        load_module(model, str(folder / "model.safetensors"))
