"""SIMULATED reward-model cost: a small, deterministic "judge" for serverless benchmarks (tools/bench/actions_real),
its weights a fixed random seed's, so its score measures nothing: each call only costs what a reward-model
forward pass costs. Real model-based rewards are ``rollart.rewards.judges``.

``judge_score(text, reference)`` embeds both strings with a fixed-seed byte-level torch encoder and
returns their cosine similarity mapped to [0, 1]. It is stateless (same inputs, same score in any
process) and costs real CPU per call, like a reward-model forward pass. torch is imported when the
module is (a serverless worker pays it at start-up: its cold start), the model on first use.
"""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=1)
def _encoder(width: int = 256, layers: int = 4):
    torch.manual_seed(1234)
    blocks = [torch.nn.Embedding(256, width)]
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*blocks).eval()


def judge_score(text: str, reference: str, repeats: int = 8) -> float:
    """Similarity of ``text`` to ``reference`` in [0, 1]; ``repeats`` scales the compute per call."""
    if not isinstance(text, str) or not isinstance(reference, str):
        raise TypeError("judge_score(text, reference): both must be strings")
    model = _encoder()
    with torch.no_grad():
        def embed(s: str) -> "torch.Tensor":
            ids = torch.tensor(list(s.encode()[:2048]) or [0]).repeat(repeats)  # (T,)
            return model(ids).mean(0)  # (D,)
        a, b = embed(text), embed(reference)
        cos = torch.nn.functional.cosine_similarity(a, b, dim=0).item()
    return round((cos + 1.0) / 2.0, 6)
