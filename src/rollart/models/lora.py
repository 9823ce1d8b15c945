"""LoRA, as the trainer and the engines share it: the settings, the adapter tensors' names, and the merge.

The trainer trains low-rank adapters (``peft``) on the linear layers named in ``target_modules``: for a layer
with weight W (out x in), ``lora_A`` (rank x in) and ``lora_B`` (out x rank), the layer computes
``x @ (W + scaling * B @ A).T`` with ``scaling = alpha / rank``; B starts at zero, so version 0 is the base
model exactly. Only the adapters train and only they cross the weight plane: a version's bucket holds
``{module}.lora_A.weight`` and ``{module}.lora_B.weight`` for each adapted module (``module`` its HF path, e.g.
``model.layers.0.self_attn.q_proj``: PEFT's state-dict names), and each engine applies them to the base
weights it keeps (``merged``). Checkpoints save the adapter in PEFT's format (``peft_files``), loadable by
``peft`` and by vLLM's LoRA support.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rollart.config import ConfigError

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
SUFFIXES = {".lora_A.weight": "A", ".lora_B.weight": "B"}


@dataclass(frozen=True)
class LoraConfig:
    """LoRA of the policy (``trainer.lora.*``; an engine receives the same). ``rank=0``: full fine-tuning."""
    rank: int = 0
    """Rank of each adapter (0: no LoRA, every weight trains)."""
    alpha: float = 16.0
    """Scale numerator: the adapter's update is (alpha / rank) * B @ A."""
    dropout: float = 0.0
    """Dropout on the adapter's input while training."""
    target_modules: tuple[str, ...] = ATTENTION
    """Linear layers adapted, by their last name (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)."""

    @classmethod
    def of(cls, value: "LoraConfig | dict") -> "LoraConfig":
        """``value`` as a LoraConfig (a config given as a plain dict, e.g. ``{"rank": 16}``)."""
        return value if isinstance(value, cls) else cls(**value)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        if self.rank < 0:
            raise ConfigError(f"lora.rank={self.rank} must be >= 0 (0: full fine-tuning)")
        if self.rank and self.alpha <= 0:
            raise ConfigError(f"lora.alpha={self.alpha} must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"lora.dropout={self.dropout} must be in [0, 1)")
        unknown = sorted(set(self.target_modules) - set(ATTENTION + MLP))
        if self.rank and (unknown or not self.target_modules):
            raise ConfigError(f"lora.target_modules={list(self.target_modules)}: choose among {list(ATTENTION + MLP)}")

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank if self.rank else 0.0


def adapter_part(name: str) -> tuple[str, str] | None:
    """``"model.layers.0.self_attn.q_proj.lora_A.weight"`` -> ``("model.layers.0.self_attn.q_proj", "A")``; None
    for a name that is not an adapter tensor."""
    for suffix, part in SUFFIXES.items():
        if name.endswith(suffix):
            return name[: -len(suffix)], part
    return None


def is_adapter_bucket(names: Iterable[str]) -> bool:
    """The tensors are adapters (a LoRA version), not whole weights."""
    names = list(names)
    return bool(names) and all(adapter_part(n) is not None for n in names)


def merged(base, lora_a, lora_b, scaling: float):
    """``base + scaling * B @ A`` in ``base``'s dtype (the sum computed in float32)."""
    delta = (lora_b.float() @ lora_a.float()) * scaling
    return (base.float() + delta.to(base.device)).to(base.dtype)


def peft_files(cfg: LoraConfig, adapters: dict, folder: str | Path, base_model: str = "") -> Path:
    """Write ``adapters`` ({module}.lora_A/B.weight tensors) to ``folder`` in PEFT's format: ``adapter_config.json``
    and ``adapter_model.safetensors`` (names prefixed ``base_model.model.`` as ``PeftModel.save_pretrained``
    writes them)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    modules = sorted({adapter_part(n)[0].rsplit(".", 1)[-1] for n in adapters})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": cfg.rank, "lora_alpha": cfg.alpha,
              "lora_dropout": cfg.dropout, "target_modules": modules, "bias": "none", "fan_in_fan_out": False,
              "base_model_name_or_path": base_model, "inference_mode": True, "use_rslora": False,
              "init_lora_weights": True, "modules_to_save": None}
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({f"base_model.model.{n}": t.detach().contiguous().cpu() for n, t in adapters.items()},
              str(folder / "adapter_model.safetensors"))
    return folder
