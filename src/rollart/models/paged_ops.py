"""The engine path's replaceable ops: those a device serves faster than torch's composite ops do.

``CausalLM.forward_paged`` calls every matmul, the MLP's activation and the RoPE-and-cache-write of each layer
through one ``PagedOps``; the training path (``CausalLM.forward``) never does. The defaults here are torch's and
run on every device; the engine's model runner installs faster ones on the CPU (``rollart.models.cpu_linear``'s
prepacked matmuls, ``rollart.models.cpu_kernels``' C kernels), which compute the same values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch.nn.functional as F
from torch import Tensor


def silu_and_mul(gate_up: Tensor) -> Tensor:
    """silu(gate) * up of the fused projection's output (..., 2I) -> (..., I)."""
    g, u = gate_up.chunk(2, dim=-1)
    return F.silu(g) * u


def write_kv(kv: Tensor, slot_mapping: Tensor, k: Tensor, v: Tensor) -> None:
    """k, v (N, Hkv, D) into the cache kv (2, blocks, block_size, Hkv, D) at each token's flat slot."""
    kv[0].view(-1, *k.shape[1:]).index_copy_(0, slot_mapping, k)
    kv[1].view(-1, *v.shape[1:]).index_copy_(0, slot_mapping, v)


def rope_and_cache(qkv: Tensor, n_heads: int, n_kv: int, rotary, cos: Tensor, sin: Tensor, kv: Tensor,
                   slot_mapping: Tensor) -> Tensor:
    """qkv (N, H + 2 Hkv, D) of this step's tokens, cos/sin (N, 1, D), kv (2, blocks, block_size, Hkv, D): RoPE on q
    and k, k and v written into the cache at each token's slot -> q (N, H, D)."""
    qk = rotary(qkv[:, :n_heads + n_kv], cos, sin)                          # (N, H+Hkv, D), one RoPE for q and k
    write_kv(kv, slot_mapping, qk[:, n_heads:], qkv[:, n_heads + n_kv:])
    return qk[:, :n_heads]


@dataclass
class PagedOps:
    linear: Callable = F.linear
    """``(x, weight, bias=None) -> y``: every matmul of the engine path."""
    silu_and_mul: Callable = silu_and_mul
    """``gate_up (N, 2I) -> silu(gate) * up (N, I)``."""
    rope_and_cache: Callable = rope_and_cache
    """As :func:`rope_and_cache`."""
    layers: Callable | None = None
    """``(x, cos, sin, kv_cache, batch) -> x`` after every decoder layer in one call, or None where a step takes the
    model's layer loop (``rollart.models.cpu_layers``); None: always the loop."""
