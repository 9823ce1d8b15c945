"""Rotary position embeddings: the frequencies (default, or scaled the Llama 3 way) and the cos/sin tables that
the trainer's full forward and the engine's paged forward both read, so both rotate by the same angles.

    inv_freq = rope_frequencies(config)          # (D/2,) float32
    rotary = Rotary.from_config(config)
    cos, sin = rotary.tables(n_positions, device, dtype)   # (P, D) each
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from rollart.models.config import Llama3RopeScaling, ModelConfig


def llama3_scaled(inv_freq: Tensor, s: Llama3RopeScaling) -> Tensor:
    """Llama 3's frequencies: a rotation whose wavelength is long next to the pretraining context turns ``factor``
    times slower, a short one keeps its speed, and one in between is interpolated linearly in
    ``context / wavelength`` between the two."""
    wavelength = 2 * math.pi / inv_freq                                    # (D/2,) positions per full turn
    long_at = s.original_max_position_embeddings / s.low_freq_factor       # from here on: fully slowed
    short_at = s.original_max_position_embeddings / s.high_freq_factor     # below this: untouched
    # 0 at wavelength == long_at, 1 at wavelength == short_at
    keep = ((s.original_max_position_embeddings / wavelength - s.low_freq_factor)
            / (s.high_freq_factor - s.low_freq_factor))
    blended = (1 - keep) * inv_freq / s.factor + keep * inv_freq
    out = torch.where(wavelength > long_at, inv_freq / s.factor, blended)
    return torch.where(wavelength < short_at, inv_freq, out)


def rope_frequencies(config: ModelConfig) -> Tensor:
    """(D/2,) float32 inverse frequency of each rotated pair of channels, computed on the CPU (as transformers
    does, so a GPU's own ``pow`` cannot move the angles; also when the model is built on the meta device)."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device="cpu").float() / d))
    return inv_freq if config.rope_scaling is None else llama3_scaled(inv_freq, config.rope_scaling)


class Rotary(nn.Module):
    """Non-interleaved RoPE (rotate-half), tables built lazily per device/dtype and grown on demand."""

    def __init__(self, inv_freq: Tensor, max_positions: int):
        super().__init__()
        self.inv_freq, self.max_positions = inv_freq, max_positions
        self._tables: dict = {}

    @classmethod
    def from_config(cls, config: ModelConfig) -> "Rotary":
        return cls(rope_frequencies(config), config.max_position_embeddings)

    def tables(self, n: int, device, dtype) -> tuple[Tensor, Tensor]:
        key = (device, dtype)
        cos_sin = self._tables.get(key)
        if cos_sin is None or cos_sin[0].shape[0] < n:
            length = max(n, self.max_positions)
            inv_freq = self.inv_freq.to(device)
            freqs = torch.outer(torch.arange(length, device=device).float(), inv_freq)  # (P, D/2)
            emb = torch.cat((freqs, freqs), dim=-1)                                      # (P, D)
            cos_sin = (emb.cos().to(dtype), emb.sin().to(dtype))
            self._tables[key] = cos_sin
        return cos_sin

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin
