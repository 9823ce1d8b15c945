"""CausalLM: one decoder-only transformer (Llama / Qwen2 / Qwen3) for both the trainer and the engine.

Parameter names equal Hugging Face's (``model.layers.N.self_attn.q_proj.weight`` ...) so checkpoints
load into transformers and vLLM unchanged. Two entry points share every weight and every op:

* ``model(input_ids)`` — training / reference path: (B, T) -> logits (B, T, V), causal attention
  (right padding is harmless: padding only ever comes after the tokens that matter).
* ``model.forward_paged(...)`` — engine path: packed new tokens of many sequences, K/V written into
  and read from a paged cache (see ``rollart.models.paged``); logits only where the engine samples.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from rollart.models.config import ModelConfig
from rollart.models.paged import PagedBatch
from rollart.models.paged_ops import PagedOps, write_kv
from rollart.models.rope import Rotary


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)  # one kernel, same math in fp32
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _stack_as_views(params: list[nn.Parameter]) -> Tensor:
    """Concatenate parameters along dim 0 and re-point each one's data at its rows of the result."""
    stacked = torch.cat([p.detach() for p in params], 0)
    row = 0
    for p in params:
        p.data = stacked[row:row + p.shape[0]]
        row += p.shape[0]
    return stacked


def _still_stacked(stacked: Tensor | None, params: list[nn.Parameter]) -> bool:
    """True while every parameter still lives in ``stacked`` (``model.to(...)`` or re-assignment breaks the
    link; then the separate projections are used) and no gradient is wanted (the stack is not a leaf)."""
    if stacked is None or torch.is_grad_enabled():
        return False
    ptr, step = stacked.data_ptr(), stacked.element_size()
    for p in params:
        if p.data_ptr() != ptr:
            return False
        ptr += p.numel() * step
    return True


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h = cfg.hidden_size
        self.q_proj = nn.Linear(h, self.n_heads * self.head_dim, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, h, bias=cfg.o_bias)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.qk_norm = cfg.qk_norm

    def _qkv(self, x: Tensor, rotary: Rotary, cos: Tensor, sin: Tensor):
        """x (..., h) -> q (..., H, D), k/v (..., Hkv, D), RoPE applied; cos/sin broadcast over heads."""
        q = self.q_proj(x).unflatten(-1, (self.n_heads, self.head_dim))
        k = self.k_proj(x).unflatten(-1, (self.n_kv, self.head_dim))
        v = self.v_proj(x).unflatten(-1, (self.n_kv, self.head_dim))
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        return rotary(q, cos, sin), rotary(k, cos, sin), v

    def forward(self, x: Tensor, rotary: Rotary, cos: Tensor, sin: Tensor) -> Tensor:
        """Training path: x (B, T, h), cos/sin (B or 1, T, 1, D)."""
        q, k, v = self._qkv(x, rotary, cos, sin)                            # (B, T, H|Hkv, D)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=self.n_heads != self.n_kv)  # (B, H, T, D)
        return self.o_proj(o.transpose(1, 2).flatten(2))                     # (B, T, h)

    def fuse(self) -> None:
        """Store q/k/v weights (and biases) in one matrix, the three parameters becoming row views of it:
        one matmul instead of three on the engine path; loading or training the views updates it too."""
        self.qkv_weight = _stack_as_views([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
        self.qkv_bias = (_stack_as_views([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
                         if self.q_proj.bias is not None else None)

    def _fused_ok(self) -> bool:
        projs = (self.q_proj, self.k_proj, self.v_proj)
        return (_still_stacked(getattr(self, "qkv_weight", None), [m.weight for m in projs])
                and (self.q_proj.bias is None or _still_stacked(self.qkv_bias, [m.bias for m in projs])))

    def forward_paged(self, x: Tensor, rotary: Rotary, cos: Tensor, sin: Tensor,
                      kv: Tensor, batch: PagedBatch, ops: PagedOps) -> Tensor:
        """Engine path: x (N, h); kv (2, blocks, block_size, Hkv, D) is this layer's cache, written in place."""
        H, Hkv = self.n_heads, self.n_kv
        if not self._fused_ok():
            q, k, v = self._qkv(x, rotary, cos, sin)                        # (N, H|Hkv, D)
            write_kv(kv, batch.slot_mapping, k, v)
        else:
            qkv = ops.linear(x, self.qkv_weight, self.qkv_bias).unflatten(-1, (H + 2 * Hkv, self.head_dim))  # (N, H+2Hkv, D)
            if self.qk_norm:                                                # normed in place, before RoPE
                qkv[:, :H] = self.q_norm(qkv[:, :H])
                qkv[:, H:H + Hkv] = self.k_norm(qkv[:, H:H + Hkv])
            q = ops.rope_and_cache(qkv, H, Hkv, rotary, cos, sin, kv, batch.slot_mapping)  # (N, H, D)
        o = batch.attend(q, kv[0], kv[1])                                   # (N, H, D)
        return ops.linear(o.flatten(1), self.o_proj.weight, self.o_proj.bias)  # (N, h)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor, ops: PagedOps | None = None) -> Tensor:
        gate_up = getattr(self, "gate_up_weight", None)
        if ops is not None and _still_stacked(gate_up, [self.gate_proj.weight, self.up_proj.weight]):  # engine: one matmul
            return ops.linear(ops.silu_and_mul(ops.linear(x, gate_up)), self.down_proj.weight)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def fuse(self) -> None:
        self.gate_up_weight = _stack_as_views([self.gate_proj.weight, self.up_proj.weight])


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def _layer_forward(layer: DecoderLayer, rotary: Rotary, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x = x + layer.self_attn(layer.input_layernorm(x), rotary, cos, sin)
    return x + layer.mlp(layer.post_attention_layernorm(x))


class CausalLM(nn.Module):
    gradient_checkpointing = False
    """Training path: recompute each layer's activations in backward instead of keeping them (less memory)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rotary = Rotary.from_config(config)
        self.paged_ops = PagedOps()
        """The engine path's matmuls, MLP activation and RoPE-and-cache-write (``rollart.models.paged_ops``)."""
        self.tie_weights()

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @torch.no_grad()
    def fuse_projections(self) -> "CausalLM":
        """Engine-side speed-up: q/k/v and gate/up weights stored as one matrix each (parameters stay
        HF-named views of it, so ``load_weights`` / ``update_weights`` keep working). No extra memory."""
        for layer in self.model.layers:
            layer.self_attn.fuse()
            layer.mlp.fuse()
        return self

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator | None = None, std: float = 0.02) -> None:
        """Random init (normal(0, std) matrices, unit norms, zero biases), deterministic given generator."""
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=generator) * std)
            elif name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.zero_()

    def forward(self, input_ids: Tensor, positions: Tensor | None = None) -> Tensor:
        """input_ids (B, T) -> logits (B, T, V); positions (B, T) default to 0..T-1."""
        x = self.model.embed_tokens(input_ids)                              # (B, T, h)
        T = input_ids.shape[1]
        cos, sin = self.rotary.tables(T if positions is None else int(positions.max()) + 1, x.device, x.dtype)
        if positions is None:
            cos, sin = cos[:T][None, :, None], sin[:T][None, :, None]       # (1, T, 1, D)
        else:
            cos, sin = cos[positions][:, :, None], sin[positions][:, :, None]  # (B, T, 1, D)
        recompute = self.gradient_checkpointing and torch.is_grad_enabled()
        for layer in self.model.layers:
            if recompute:
                x = checkpoint(_layer_forward, layer, self.rotary, x, cos, sin, use_reentrant=False)
            else:
                x = _layer_forward(layer, self.rotary, x, cos, sin)
        return self.lm_head(self.model.norm(x))                             # (B, T, V)

    def forward_paged(self, input_ids: Tensor, batch: PagedBatch, kv_cache: Tensor,
                      logits_index: Tensor) -> Tensor:
        """input_ids (N,) packed new tokens; kv_cache (L, 2, blocks, block_size, Hkv, D); -> logits (S, V) at logits_index."""
        x = self.model.embed_tokens(input_ids)                              # (N, h)
        n_pos = batch.num_positions or int(batch.positions.max()) + 1       # host bound: no device read
        cos, sin = self.rotary.tables(n_pos, x.device, x.dtype)
        cos, sin = cos[batch.positions][:, None], sin[batch.positions][:, None]  # (N, 1, D)
        ops = self.paged_ops
        layers_out = ops.layers(x, cos, sin, kv_cache, batch) if ops.layers is not None else None
        if layers_out is not None:
            x = layers_out
        else:
            for i, layer in enumerate(self.model.layers):
                x = x + layer.self_attn.forward_paged(layer.input_layernorm(x), self.rotary, cos, sin, kv_cache[i],
                                                      batch, ops)
                x = x + layer.mlp(layer.post_attention_layernorm(x), ops)
        x = self.model.norm(x[logits_index])                                # (S, h)
        return ops.linear(x, self.lm_head.weight)                           # (S, V)
