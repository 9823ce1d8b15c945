"""Batch layout for the engine path: packed tokens of many sequences over a paged KV cache.

The engine packs the new tokens of every scheduled sequence into one (N,) stream (prefill chunks and
single decode tokens alike). Linear layers run once over that stream; attention runs per *group* of
sequences with padded (S, Q) queries against keys gathered from the cache through each sequence's
block table. Decodes form one group (Q = 1, no padding) and prefills another, so a long prefill never
pads the decode rows. All index tensors are built once per step and shared by every layer.
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
    kv_slots: Tensor
    """(S, K) long: flat cache slot of each key position (padding points at slot 0, masked)."""
    mask: Tensor
    """(S, 1, Q, K) bool, True where the query may attend (causal, inside the context)."""


@dataclass
class PagedBatch:
    positions: Tensor
    """(N,) long: position in its sequence of each packed token (for RoPE)."""
    slot_mapping: Tensor
    """(N,) long: flat cache slot each packed token's K/V is written to."""
    groups: list[AttentionGroup]
    """One or two groups (decodes, prefills) that together cover every packed token once."""


def build_group(offsets: Tensor, q_lens: Tensor, context_lens: Tensor, block_tables: Tensor,
                block_size: int) -> AttentionGroup:
    """Index tensors for S sequences whose q_lens new tokens start at ``offsets`` in the packed stream.

    ``context_lens`` counts cached + new tokens; ``block_tables`` is (S, B) padded with any valid id.
    """
    Q, K = int(q_lens.max()), int(context_lens.max())
    rows = torch.arange(Q)                                                  # (Q,)
    q_valid = rows[None, :] < q_lens[:, None]                               # (S, Q)
    q_index = offsets[:, None] + torch.minimum(rows[None, :], q_lens[:, None] - 1)  # (S, Q)
    q_pos = (context_lens - q_lens)[:, None] + rows[None, :]                 # (S, Q)
    keys = torch.arange(K)                                                  # (K,)
    mask = (keys[None, None, :] <= q_pos[:, :, None]) & (keys[None, None, :] < context_lens[:, None, None])
    blocks = block_tables.gather(1, (keys // block_size)[None, :].expand(len(offsets), -1))  # (S, K)
    kv_slots = blocks * block_size + keys[None, :] % block_size             # (S, K)
    return AttentionGroup(q_index=q_index, q_valid=None if bool(q_valid.all()) else q_valid,
                          kv_slots=kv_slots, mask=mask[:, None])


def paged_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, groups: list[AttentionGroup]) -> Tensor:
    """q (N, H, D); k_cache/v_cache (slots, Hkv, D) already holding this step's keys -> (N, H, D)."""
    out = torch.empty_like(q)
    for g in groups:
        qg = q[g.q_index].transpose(1, 2)                                   # (S, H, Q, D)
        kg = k_cache[g.kv_slots].transpose(1, 2)                            # (S, Hkv, K, D)
        vg = v_cache[g.kv_slots].transpose(1, 2)                            # (S, Hkv, K, D)
        o = torch.nn.functional.scaled_dot_product_attention(
            qg, kg, vg, attn_mask=g.mask, enable_gqa=qg.shape[1] != kg.shape[1]).transpose(1, 2)  # (S, Q, H, D)
        if g.q_valid is None:
            out[g.q_index.reshape(-1)] = o.reshape(-1, *o.shape[2:])
        else:
            out[g.q_index[g.q_valid]] = o[g.q_valid]
    return out
