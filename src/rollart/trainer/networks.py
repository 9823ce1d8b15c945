"""The networks a train step runs besides the policy: how any causal LM is called, the frozen reference of the KL
term, and PPO's critic built on a copy of the policy.

A policy is any ``nn.Module`` mapping input_ids (B, T) to logits (B, T, V), or an HF model whose output carries
``.logits``; :func:`forward_logits` is how the trainer (and the reference model, the critic's backbone, the
multiplexed deployments) calls one.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn


def forward_logits(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Run a causal LM and return logits (B, T, V) whether it returns a tensor or an HF output object."""
    out = model(input_ids)
    return out.logits if hasattr(out, "logits") else out


def frozen_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in eval mode with no gradient: the reference policy of the KL term."""
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


class ValueModel(nn.Module):
    """Critic: a copy of the policy network with a scalar head on its output features.

    ``values[:, t]`` estimates the return from the state *before* token t (read at position t-1), aligned
    with :func:`rollart.trainer.losses.token_logprobs`.
    """

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        device = next(backbone.parameters()).device
        with torch.no_grad():
            width = forward_logits(backbone, torch.zeros(1, 2, dtype=torch.long, device=device)).shape[-1]
        self.head = nn.Linear(width, 1, device=device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        feats = forward_logits(self.backbone, input_ids)[:, :-1].float()  # (B, T-1, V)
        values = self.head(feats).squeeze(-1)  # (B, T-1)
        return nn.functional.pad(values, (1, 0), value=0.0)  # (B, T)
