"""Paged attention as one Triton kernel over packed variable-length queries (the engine's CUDA path).

One launch serves a whole step: prefill chunks (with or without prefix-cached context) and single decode
tokens alike, read straight from the packed (N, H, D) stream — no padding, no gathered copy of the keys.
A program owns one (query tile, sequence, KV head). Its rows are (query token, query head of that KV head)
pairs, so the ``H / Hkv`` query heads that share a KV head (GQA) read each key block once; it walks the
sequence's block table up to the causal limit of its tile with an online softmax (the FlashAttention
recurrence from "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness").

Decode grids are fixed by the batch size alone (``max_query_len == 1``), so the launch can be captured in a
CUDA graph. On the CPU the kernel runs under ``TRITON_INTERPRET=1`` (tests compare it with the torch reference
in ``rollart.models.paged``). Uses only what Triton 3.6 and later provide.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
"""Triton's interpreter multiplies bfloat16 blocks wrongly (raw bits): there the kernel upcasts before each dot."""


@triton.jit
def _paged_attention_kernel(
        q_ptr, k_ptr, v_ptr, o_ptr, query_start_ptr, context_lens_ptr, block_tables_ptr,
        stride_qn, stride_qh, stride_on, stride_oh,
        stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bt,
        scale,
        GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_PAD: tl.constexpr, PAGE: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    tile = tl.program_id(0)
    seq = tl.program_id(1)
    kvh = tl.program_id(2)
    q_begin = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_begin
    if tile * BLOCK_M < q_len * GROUP:
        ctx = tl.load(context_lens_ptr + seq)
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)                      # (M,) = (token, head in group)
        tok = rows // GROUP
        head = kvh * GROUP + rows % GROUP
        row_ok = tok < q_len
        q_pos = ctx - q_len + tok                                          # position of each query row
        d = tl.arange(0, HEAD_PAD)
        d_ok = d < HEAD_DIM
        q_off = (q_begin + tok).to(tl.int64)[:, None] * stride_qn + head[:, None] * stride_qh + d[None, :]
        q = tl.load(q_ptr + q_off, mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # (M, D)
        if UPCAST:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_PAD], tl.float32)
        last_tok = tl.minimum(q_len - 1, ((tile + 1) * BLOCK_M - 1) // GROUP)
        hi = ctx - q_len + last_tok + 1                                    # keys the tile may see (causal)
        for start in range(0, hi, BLOCK_N):
            keys = start + tl.arange(0, BLOCK_N)                           # (N,)
            key_ok = keys < hi
            page = tl.load(block_tables_ptr + seq * stride_bt + keys // PAGE, mask=key_ok, other=0).to(tl.int64)
            in_page = keys % PAGE
            k_off = page * stride_kb + in_page * stride_kt + kvh * stride_kh
            k = tl.load(k_ptr + k_off[None, :] + d[:, None], mask=key_ok[None, :] & d_ok[:, None], other=0.0)  # (D, N)
            if UPCAST:
                k = k.to(tl.float32)
            s = tl.dot(q, k, input_precision=PRECISION) * scale             # (M, N) fp32
            s = tl.where((keys[None, :] <= q_pos[:, None]) & key_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)          # a row that has seen no key yet
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            v_off = page * stride_vb + in_page * stride_vt + kvh * stride_vh
            v = tl.load(v_ptr + v_off[:, None] + d[None, :], mask=key_ok[:, None] & d_ok[None, :], other=0.0)  # (N, D)
            if UPCAST:
                v = v.to(tl.float32)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]                # no key (CUDA-graph padding): 0
        o_off = (q_begin + tok).to(tl.int64)[:, None] * stride_on + head[:, None] * stride_oh + d[None, :]
        tl.store(o_ptr + o_off, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def paged_attention_triton(q: Tensor, k_cache: Tensor, v_cache: Tensor, query_start: Tensor, context_lens: Tensor,
                           block_tables: Tensor, max_query_len: int) -> Tensor:
    """q (N, H, D); k_cache/v_cache (blocks, block_size, Hkv, D) already holding this step's keys -> (N, H, D).
    The layout arguments are those of ``rollart.models.paged.VarlenLayout``."""
    N, H, D = q.shape
    Hkv, page = k_cache.shape[2], k_cache.shape[1]
    if q.stride(2) != 1:
        q = q.contiguous()
    out = torch.empty((N, H, D), dtype=q.dtype, device=q.device)
    group = H // Hkv
    rows = max_query_len * group
    block_m = 16 if rows <= 16 else 64                                     # decode: one small tile per KV head
    grid = (triton.cdiv(rows, block_m), context_lens.shape[0], Hkv)
    _paged_attention_kernel[grid](
        q, k_cache, v_cache, out, query_start, context_lens, block_tables,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0),
        D ** -0.5,
        GROUP=group, HEAD_DIM=D, HEAD_PAD=max(16, triton.next_power_of_2(D)), PAGE=page,
        BLOCK_M=block_m, BLOCK_N=64, PRECISION="ieee" if q.dtype == torch.float32 or _INTERPRETED else "tf32",
        UPCAST=_INTERPRETED and q.dtype != torch.float32, num_warps=4)
    return out
