"""LoRA versions on an engine: an adapter bucket checked against the model, and merged onto kept base weights.

With ``engine.lora.rank > 0`` a weight version may carry adapters only (``rollart.models.lora``):
``{module}.lora_A.weight`` (rank x in) and ``{module}.lora_B.weight`` (out x rank) per adapted linear layer.
``check_adapters`` refuses, in one line and before anything changes, a bucket that does not fit the model or
reaches an engine without LoRA. ``LoraMerger`` (rollart's engine) keeps a copy of each adapted layer's base
weight, taken the first time the layer is adapted, and sets the live weight to ``base + scaling * B @ A`` in
place: each version replaces the one before instead of adding to it, and a layer a version leaves out is back at
its base. Writing in place keeps every view of the weight (the engine's fused q/k/v and gate/up matrices) in step.
A version of whole weights is served as it is and becomes the base the next adapter version is merged onto.
"""
from __future__ import annotations

from pathlib import Path

import torch

from rollart.models.lora import ATTENTION, MLP, LoraConfig, adapter_part, merged
from rollart.types import WeightBucket

Adapters = dict[str, tuple[torch.Tensor, torch.Tensor]]
"""module path -> (lora_A, lora_B) of one version."""


def holds_adapters(weights: WeightBucket) -> bool:
    """True for a bucket of adapters, False for whole weights; a bucket mixing both is refused in one line."""
    parts = [adapter_part(n) is not None for n in weights.tensors]
    if any(parts) and not all(parts):
        raise ValueError(f"update_weights: version {weights.version} mixes LoRA adapter tensors with whole weights; "
                         "a version is either adapters only or whole weights")
    return bool(parts) and all(parts)


def linear_layers(named_weights) -> dict[str, tuple[int, int]]:
    """Module path -> (out, in) of every linear layer LoRA may adapt, from (HF name, tensor or shape) pairs."""
    layers = {}
    for name, w in named_weights:
        shape = tuple(w.shape) if hasattr(w, "shape") else tuple(w)
        module, _, leaf = name.rpartition(".")
        if leaf == "weight" and len(shape) == 2 and module.rpartition(".")[2] in ATTENTION + MLP:
            layers[module] = shape
    return layers


def checkpoint_layers(folder: str | Path) -> dict[str, tuple[int, int]]:
    """``linear_layers`` of an HF folder's safetensors files, read from their headers (no tensor is loaded)."""
    from safetensors import safe_open

    shapes = []
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            shapes += [(name, f.get_slice(name).get_shape()) for name in f.keys()]
    return linear_layers(shapes)


def check_adapters(weights: WeightBucket, layers: dict[str, tuple[int, int]], cfg: LoraConfig) -> Adapters:
    """The version's adapters by module, every name and shape checked against ``layers`` (``linear_layers``) and
    ``cfg``; ValueError in one line naming what does not fit."""
    v = weights.version
    if not cfg.enabled:
        raise ValueError(f"update_weights: version {v} holds LoRA adapters but engine.lora.rank=0 (LoRA is off on "
                         "this engine); an engine serving a LoRA run gets trainer.lora as engine.lora")
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in weights.named_tensors():
        module, part = adapter_part(name)
        if module not in layers or module.rpartition(".")[2] not in cfg.target_modules:
            raise ValueError(f"update_weights: version {v} adapts {module!r}, not a linear layer of this model among "
                             f"lora.target_modules={list(cfg.target_modules)}")
        halves.setdefault(module, {})[part] = t
    out: Adapters = {}
    for module, pair in halves.items():
        if len(pair) != 2:
            have, lack = ("A", "B") if "A" in pair else ("B", "A")
            raise ValueError(f"update_weights: version {v} has {module}.lora_{have}.weight without "
                             f"{module}.lora_{lack}.weight")
        rows, cols = layers[module]
        for part, expected in (("A", (cfg.rank, cols)), ("B", (rows, cfg.rank))):
            if tuple(pair[part].shape) != expected:
                raise ValueError(f"update_weights: {module}.lora_{part}.weight has shape {tuple(pair[part].shape)}, "
                                 f"expected {expected} (lora.rank={cfg.rank} on a {rows}x{cols} layer)")
        out[module] = (pair["A"], pair["B"])
    return out


class LoraMerger:
    """The base weights of the adapted layers of rollart's engine, and each version merged onto them."""

    def __init__(self, model: torch.nn.Module, cfg: LoraConfig) -> None:
        self.cfg = cfg
        self.live = {name.removesuffix(".weight"): p for name, p in model.named_parameters()
                     if name.removesuffix(".weight") in linear_layers([(name, p)])}
        """module path -> its weight parameter (a row view of a fused matrix for q/k/v and gate/up)."""
        self.layers = {module: tuple(p.shape) for module, p in self.live.items()}
        self.base: dict[str, torch.Tensor] = {}
        """module path -> a copy of its base weight, for every layer adapted so far."""
        self.adapted: set[str] = set()
        """Layers whose live weight is base + the current version's adapter."""

    def check(self, weights: WeightBucket) -> Adapters:
        return check_adapters(weights, self.layers, self.cfg)

    @torch.no_grad()
    def apply(self, adapters: Adapters) -> None:
        """Live weight := merged(base, A, B, scaling) for every layer of ``adapters``; base for the layers
        adapted before and left out now."""
        for module in self.adapted - set(adapters):
            self.live[module].copy_(self.base[module])
        for module, (a, b) in adapters.items():
            w = self.live[module]
            if module not in self.base:
                self.base[module] = w.detach().clone()
            w.copy_(merged(self.base[module], a.to(w.device), b.to(w.device), self.cfg.scaling))
        self.adapted = set(adapters)

    @torch.no_grad()
    def rebase(self, names: set[str]) -> None:
        """Whole weights were just loaded for ``names`` (HF names): served as they are, they are the new base of
        those layers."""
        for module, base in self.base.items():
            if f"{module}.weight" in names:
                base.copy_(self.live[module])
                self.adapted.discard(module)
