"""The data vocabulary every plane shares: generation results and finished trajectories.

Per-token arrays in a Trajectory are aligned with ``token_ids`` (prompt, observations and model
output concatenated in chat-template order). ``loss_mask[i] == 1`` only for tokens the model
generated; those alone are trained. ``logprobs[i]`` / ``versions[i]`` are the behaviour log-probability
and the policy version that sampled token i (0.0 / -1 for non-model tokens).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GenerationResult:
    token_ids: list[int]
    """New tokens, in order."""
    logprobs: list[float]
    """Log-probability of each sampled token under log_softmax(logits) of the producing policy."""
    versions: list[int]
    """Policy version that produced each token (changes mid-request after a weight update)."""
    finish_reason: str
    """'stop' (stop token / string / eos), 'length' (max_tokens or context), 'abort'."""
    text: str = ""
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache (not recomputed)."""
    worker: str = ""
    """Which inference worker served it (for routing tests and metrics)."""


@dataclass
class Trajectory:
    trajectory_id: str
    group_id: str
    task: str
    """Task name; also the hw_mapping tag."""
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    start_version: int = 0
    """Policy version when the trajectory started (its first generation request)."""
    reward: float = 0.0
    success: bool = False
    num_turns: int = 0
    status: str = "running"
    """running | done | aborted | failed"""
    reason: str = ""
    """Why it was aborted or failed."""
    info: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent in env_reset, env_step, generate, reward."""
