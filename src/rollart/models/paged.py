"""Batch layout for the engine path: packed tokens of many sequences over a paged KV cache.

Two attention implementations read the same layout. The pure-torch reference (CPU, tests) is below: the
engine packs the new tokens of every scheduled sequence into one (N,) stream (prefill chunks and
single decode tokens alike). Linear layers run once over that stream; attention runs per *group* of
sequences with padded (S, Q) queries against keys gathered from the cache through each sequence's
block table. Decodes (Q = 1, no padding) and prefills form separate groups, so a long prefill never
pads the decode rows; the engine further buckets each kind by context length so short contexts are
not padded to the longest. The Triton kernel (``rollart.models.paged_triton``, the CUDA default) and the C kernel
(``rollart.models.cpu_kernels``, the CPU default) read the packed queries directly through ``VarlenLayout``: no
padding, no gathered copy of the keys. All index
tensors are built once per step and shared by every layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class AttentionGroup:
    q_index: Tensor
    """(S, Q) long: position of each query row in the packed stream (padding rows repeat a valid one)."""
    q_valid: Tensor | None
    """(S, Q) bool, False on padding rows; None when no row is padding."""
    block_tables: Tensor
    """(S, B) long: cache blocks of each sequence in order (padding repeats block 0, masked); K = B * block_size."""
    mask: Tensor
    """(S, 1, Q, K) bool, True where the query may attend (causal, inside the context)."""


@dataclass
class VarlenLayout:
    """Packed variable-length queries for a kernel: sequence s owns rows
    ``query_start[s]:query_start[s + 1]`` of the stream, the last of its ``context_lens[s]`` tokens."""

    query_start: Tensor
    """(S + 1,) long: cumulative query counts (0 first)."""
    context_lens: Tensor
    """(S,) long: cached + new tokens of each sequence (0 for a padding row of a CUDA graph)."""
    block_tables: Tensor
    """(S, B) long: cache blocks of each sequence in order (entries past its context are never read)."""
    max_query_len: int
    """Longest query of the batch (host int: it sizes the kernel's grid)."""
    kernel: str = "triton"
    """Which kernel reads it: 'triton' | 'cpu' (``rollart.models.cpu_kernels``)."""


@dataclass
class PagedBatch:
    positions: Tensor
    """(N,) long: position in its sequence of each packed token (for RoPE)."""
    slot_mapping: Tensor
    """(N,) long: flat cache slot (block * block_size + offset) each packed token's K/V is written to."""
    groups: list[AttentionGroup] | None = None
    """Reference path: groups of sequences (decodes / prefills, bucketed by length) covering every packed
    token once."""
    varlen: VarlenLayout | None = None
    """Kernel path: the packed layout; set instead of ``groups``."""
    num_positions: int = 0
    """Host-side bound on positions (max + 1): sizes the RoPE table without reading the device."""

    def attend(self, q: Tensor, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        """q (N, H, D) against the cache (blocks, block_size, Hkv, D) holding this step's keys -> (N, H, D)."""
        v = self.varlen
        if v is not None and v.kernel == "cpu":
            from rollart.models.cpu_kernels import kernels
            return kernels().attention(q, k_cache, v_cache, v.query_start, v.context_lens, v.block_tables)
        if v is not None:
            from rollart.models.paged_triton import paged_attention_triton
            return paged_attention_triton(q, k_cache, v_cache, v.query_start, v.context_lens, v.block_tables,
                                          v.max_query_len)
        return paged_attention(q, k_cache, v_cache, self.groups)


def build_group(offsets: Tensor, q_lens: Tensor, context_lens: Tensor, block_tables: Tensor,
                block_size: int) -> AttentionGroup:
    """Index tensors for S sequences whose q_lens new tokens start at ``offsets`` in the packed stream.

    ``context_lens`` counts cached + new tokens; ``block_tables`` is (S, B) padded with any valid id.
    """
    Q, B = int(q_lens.max()), block_tables.shape[1]
    K = B * block_size
    rows = torch.arange(Q)                                                  # (Q,)
    q_valid = rows[None, :] < q_lens[:, None]                               # (S, Q)
    q_index = offsets[:, None] + torch.minimum(rows[None, :], q_lens[:, None] - 1)  # (S, Q)
    q_pos = (context_lens - q_lens)[:, None] + rows[None, :]                 # (S, Q)
    keys = torch.arange(K)                                                  # (K,)
    mask = (keys[None, None, :] <= q_pos[:, :, None]) & (keys[None, None, :] < context_lens[:, None, None])
    return AttentionGroup(q_index=q_index, q_valid=None if bool(q_valid.all()) else q_valid,
                          block_tables=block_tables, mask=mask[:, None])


LOW_PRECISION = (torch.bfloat16, torch.float16)
"""Dtypes whose decode attention on the CPU takes :func:`decode_attention_grouped` rather than torch's kernel."""


def paged_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, groups: list[AttentionGroup]) -> Tensor:
    """q (N, H, D); k_cache/v_cache (blocks, block_size, Hkv, D) already holding this step's keys -> (N, H, D).

    Keys are gathered a whole block at a time (one index per block_size tokens)."""
    out = torch.empty_like(q)
    for g in groups:
        S, B = g.block_tables.shape
        qg = q[g.q_index].transpose(1, 2)                                   # (S, H, Q, D)
        flat = g.block_tables.reshape(-1)
        kg = k_cache.index_select(0, flat).view(S, -1, *k_cache.shape[2:]).transpose(1, 2)  # (S, Hkv, K, D)
        vg = v_cache.index_select(0, flat).view(S, -1, *v_cache.shape[2:]).transpose(1, 2)  # (S, Hkv, K, D)
        if qg.shape[2] == 1 and q.device.type == "cpu" and q.dtype in LOW_PRECISION:
            o = decode_attention_grouped(qg, kg, vg, g.mask).transpose(1, 2)  # (S, 1, H, D)
        else:
            o = torch.nn.functional.scaled_dot_product_attention(
                qg, kg, vg, attn_mask=g.mask, enable_gqa=qg.shape[1] != kg.shape[1]).transpose(1, 2)  # (S, Q, H, D)
        if g.q_valid is None:
            out[g.q_index.reshape(-1)] = o.reshape(-1, *o.shape[2:])
        else:
            out[g.q_index[g.q_valid]] = o[g.q_valid]
    return out


def decode_attention_grouped(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """One query token per sequence, bf16/fp16 on the CPU: q (S, H, 1, D), k/v (S, Hkv, K, D), mask (S, 1, 1, K)
    -> (S, H, 1, D), as ``scaled_dot_product_attention(..., enable_gqa=True)`` computes it.

    Torch's CPU attention in bf16 took several times the time of fp32 at decode shapes, and more on the keys as
    they come from the paged cache (strided, (S, K, Hkv, D) memory): 19-23 ms a layer for SmolLM2-135M's 64
    sequences of ~290 keys. Here the H/Hkv query heads that share a kv head become the rows of one matrix product
    with that head's keys, which are converted to fp32 into contiguous memory in one pass; the scores are
    computed and normalised in fp32 (bf16 scores were ~5x less accurate than torch's kernel) and the
    probabilities meet V in the cache's dtype: ~5 ms a layer there, 0.55 ms at 16 sequences (3.6 before), errors
    like torch's kernel's (``tests/models/test_paged_attention.py``)."""
    S, H, _, D = q.shape
    Hkv = k.shape[1]
    rows = q.reshape(S, Hkv, H // Hkv, D).float() * D ** -0.5                      # (S, Hkv, G, D)
    keys = k.to(torch.float32, memory_format=torch.contiguous_format)              # (S, Hkv, K, D)
    scores = torch.matmul(rows, keys.transpose(-1, -2))                             # (S, Hkv, G, K)
    probs = scores.masked_fill_(~mask, float("-inf")).softmax(-1).to(v.dtype)
    return torch.matmul(probs, v.contiguous()).reshape(S, H, 1, D)
