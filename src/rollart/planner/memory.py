"""Per-GPU memory of a tasklet: model memory (stays resident) and working memory (while it runs).

Constraint C3 of HetRL §3.1: for every GPU d,
    max over tasklets l on d of M_working(l) + sum over tasklets l on d of M_model(l) <= M_gpu(d).
Device-independent, following the usual accounting (mixed-precision Adam, activation checkpoints,
paged KV cache); the appendix leaves the memory model to prior work.
"""
from __future__ import annotations

from .costmodel import B_BF16, B_FP32
from .workflow import TaskSpec

ACT_BYTES_PER_TOKEN_HIDDEN = 34
"""Activation bytes per token per hidden unit of one layer (bf16, flash attention; Korthikanti et al.)."""


def stage_params(task: TaskSpec, nl_stage: int, first: bool, last: bool) -> int:
    """Weights held by one pipeline stage: its layers, plus embedding (first) and head (last)."""
    m = task.model
    extra = (m.vocab * m.hidden if first else 0) + (m.vocab * m.hidden if last else 0)
    return nl_stage * m.layer_params + extra


def model_memory(task: TaskSpec, nl_stage: int, first: bool, last: bool, tp: int, dp: int) -> float:
    """Resident bytes per GPU. Training: bf16 weights + bf16 grads + fp32 master/Adam m/v sharded over DP
    (distributed optimizer); inference and generation: bf16 weights."""
    per_gpu = stage_params(task, nl_stage, first, last) / tp
    if task.kind == "train":
        return per_gpu * (B_BF16 + B_BF16 + 3 * B_FP32 / dp)
    return per_gpu * B_BF16


def working_memory(task: TaskSpec, nl_stage: int, last: bool, tp: int, mbs: int, seq: int,
                   in_flight: int, recompute: bool) -> float:
    """Transient bytes per GPU while an inference/training tasklet runs (generation: see kv_bytes_per_seq)."""
    h = task.model.hidden
    one_layer = ACT_BYTES_PER_TOKEN_HIDDEN * mbs * seq * h / tp
    logits = (mbs * seq * task.model.vocab * B_FP32 / tp) if (last and task.lm_head) else 0.0
    if task.kind != "train":
        return one_layer + logits
    if recompute:  # keep each layer's input, recompute the rest one layer at a time
        kept = B_BF16 * mbs * seq * h * nl_stage / tp * in_flight
        return kept + one_layer + 2 * logits
    return one_layer * nl_stage * in_flight + 2 * logits


def kv_bytes_per_seq(task: TaskSpec, nl_stage: int, tp: int, seq: int) -> float:
    """KV-cache bytes one sequence of ``seq`` tokens occupies on one GPU of a stage."""
    return 2 * task.model.kv_dim * B_BF16 * nl_stage * seq / tp
