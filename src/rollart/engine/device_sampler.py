"""Sampling for a whole batch on the device: temperature, top-k, top-p, logprobs, one host copy per step.

The kernel path's counterpart of ``rollart.engine.sampler`` (same distribution, same logprob: log_softmax of
the raw logits). Every row is drawn by the exponential race (Gumbel-max): ``argmax(logits / T + G)`` with
``G = -log(-log U)`` is a sample of ``softmax(logits / T)``. ``U`` comes from a Triton kernel's Philox
generator keyed by a per-row seed that mixes the request's seed with its number of output tokens, so a
request's tokens depend on its own seed only, not on its batch neighbours, and nothing is drawn on the host.
Top-k / top-p need one batched sort, done only when some row asks for them; greedy rows take the argmax.
The result comes back as one (S, 2) float64 tensor, token ids (exact below 2**53) and logprobs together.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from rollart.types import SamplingParams

_MASK63 = (1 << 63) - 1


def step_seed(seed: int, step: int) -> int:
    """The Philox key of one request's ``step``-th draw (a 64-bit mix of both; non-negative int64)."""
    x = (seed * 0x9E3779B97F4A7C15 + (step + 1) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    x ^= x >> 31
    return x & _MASK63


@triton.jit
def _exponential_race_kernel(logits_ptr, stride_row, seeds_ptr, best_v_ptr, best_i_ptr, V, CHUNK: tl.constexpr,
                             BLOCK: tl.constexpr):
    """Program (row, part): the best score of columns [part * CHUNK, (part + 1) * CHUNK) of one row."""
    row = tl.program_id(0)
    part = tl.program_id(1)
    seed = tl.load(seeds_ptr + row)
    best_v = tl.full([BLOCK], float("-inf"), tl.float32)
    best_i = tl.zeros([BLOCK], tl.int32)
    base = logits_ptr + row.to(tl.int64) * stride_row
    for start in range(part * CHUNK, tl.minimum((part + 1) * CHUNK, V), BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = cols < V
        x = tl.load(base + cols, mask=ok, other=float("-inf")).to(tl.float32)
        u = tl.rand(seed, cols)                                             # U[0, 1), keyed by (seed, column)
        score = tl.where(ok, x - tl.log(-tl.log(u)), float("-inf"))         # u == 0 gives -inf: never drawn
        better = score > best_v
        best_v = tl.where(better, score, best_v)
        best_i = tl.where(better, cols, best_i)
    top = tl.max(best_v, 0)
    out = row * tl.num_programs(1) + part
    tl.store(best_v_ptr + out, top)
    tl.store(best_i_ptr + out, tl.min(tl.where(best_v == top, best_i, V), 0))


def exponential_race(logits: Tensor, seeds: Tensor) -> Tensor:
    """logits (S, V) float32, already tempered and filtered; seeds (S,) int64 -> one token per row (S,) int64.
    Each row is split into chunks (so a small batch still fills the GPU); the best chunk wins (ties: lowest id)."""
    S, V = logits.shape
    block = min(1024, triton.next_power_of_2(V))
    chunk = block * 8
    parts = triton.cdiv(V, chunk)
    best_v = torch.empty((S, parts), dtype=torch.float32, device=logits.device)
    best_i = torch.empty((S, parts), dtype=torch.int32, device=logits.device)
    _exponential_race_kernel[(S, parts)](logits, logits.stride(0), seeds, best_v, best_i, V, CHUNK=chunk, BLOCK=block,
                                         num_warps=4)
    return best_i.gather(1, best_v.argmax(1, keepdim=True))[:, 0].long()


@dataclass
class SamplingTensors:
    """Per-row sampling settings of one step, on the device (built on the host in one copy)."""

    temperature: Tensor
    """(S,) float32; 1 on greedy rows (they take the argmax)."""
    top_k: Tensor
    """(S,) int64 in [1, V]."""
    top_p: Tensor
    """(S,) float32; rows without top-p hold 2 (nothing is dropped)."""
    seeds: Tensor
    """(S,) int64 Philox keys (``step_seed``)."""
    greedy: Tensor
    """(S,) bool."""
    all_greedy: bool
    needs_filter: bool
    """Some row asks for top-k or top-p (host flag: the sort is skipped otherwise)."""

    @classmethod
    def build(cls, params: list[SamplingParams], seeds: list[int], vocab: int, device: torch.device) -> SamplingTensors:
        greedy = [sp.greedy for sp in params]
        top_k = [vocab if sp.top_k == -1 or sp.top_k >= vocab else sp.top_k for sp in params]
        top_p = [sp.top_p if sp.top_p < 1.0 else 2.0 for sp in params]
        temp = [1.0 if g else sp.temperature for g, sp in zip(greedy, params)]
        floats = torch.tensor([temp, top_p], dtype=torch.float32).to(device, non_blocking=True)     # (2, S)
        ints = torch.tensor([top_k, seeds, greedy], dtype=torch.int64).to(device, non_blocking=True)  # (3, S)
        needs = any(k < vocab or p < 1.0 for k, p, g in zip(top_k, top_p, greedy) if not g)
        return cls(floats[0], ints[0], floats[1], ints[1], ints[2].bool(), all(greedy), needs)


def filter_top_k_top_p(logits: Tensor, top_k: Tensor, top_p: Tensor) -> Tensor:
    """logits (S, V) -> the same with tokens outside each row's top-k, then outside its top-p mass, at -inf
    (top-p keeps a token while the mass strictly before it is below top_p: at least one survives)."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)             # (S, V)
    kth = sorted_logits.gather(1, (top_k - 1)[:, None])                     # (S, 1)
    sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, float("-inf"))
    probs = sorted_logits.softmax(-1)
    drop = (probs.cumsum(-1) - probs) >= top_p[:, None]
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(1, order, sorted_logits)


def sample_on_device(logits: Tensor, st: SamplingTensors) -> Tensor:
    """logits (S, V) -> (S, 2) float64 [token, log_softmax(logits)[token]], still on the device."""
    logits = logits.float()
    tokens = logits.argmax(-1)                                              # (S,) greedy rows
    if not st.all_greedy:
        tempered = logits / st.temperature[:, None]
        if st.needs_filter:
            tempered = filter_top_k_top_p(tempered, st.top_k, st.top_p)
        tokens = torch.where(st.greedy, tokens, exponential_race(tempered, st.seeds))
    token_lp = logits.gather(1, tokens[:, None])[:, 0] - torch.logsumexp(logits, -1)  # no (S, V) log_softmax
    return torch.stack([tokens.double(), token_lp.double()], 1)
