"""RL losses as small pure functions on padded (B, T) tensors.

Conventions (every function):
  * tensors are right-padded ``(B, T)``; position ``t`` of ``logp`` is log p(token_t | tokens_<t),
    so position 0 (always a prompt token) has no log-probability and must be masked out;
  * ``mask`` is the loss mask: 1.0 for tokens the model generated, 0.0 for prompt, observation,
    tool output and padding. Only masked-in tokens contribute to any loss or statistic;
  * losses are *token-level sums divided by* ``normalizer`` (the number of loss tokens in the whole
    optimizer batch, across micro-batches and data-parallel ranks). Summing per-micro-batch losses
    then gives the token-level mean over the batch, so gradient accumulation and data parallelism
    give the same update as one big batch.

Formulas (A = advantage, r = ratio, eps = clip range):

  GRPO advantage     A_i = (R_i - mean_g(R)) / (std_g(R) + adv_eps)   per group g, broadcast to tokens
  clipped objective  L = max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high))
  k3 KL (to ref)     KL = exp(ref - logp) - (ref - logp) - 1           (unbiased, always >= 0)
  entropy bonus      L -= entropy_coef * H(pi(. | tokens_<t))
  GAE                delta_t = r_t + gamma * V_{t+1} - V_t ;  A_t = delta_t + gamma * lam * A_{t+1}
  value loss         0.5 * max((V - G)^2, (V_old + clip(V - V_old, -c, c) - G)^2)

Off-policy correction for stale tokens (decoupled PPO, Hilton et al. 2022, as used by AReaL):
asynchronous batches hold tokens sampled by older policy versions (the *behaviour* policy mu, whose
log-probs the engine recorded per token). The *proximal* policy pi_prox is the trainer's policy at
the start of this train step (log-probs computed once, without gradient). Then

  r_t  = pi_theta(a_t) / pi_prox(a_t)                     -- the ratio that gets clipped (trust region)
  w_t  = min(pi_prox(a_t) / mu(a_t), is_cap)              -- truncated importance weight, no gradient
  L_t  = w_t * max(-A_t * r_t, -A_t * clip(r_t, 1 - eps_low, 1 + eps_high))

Tokens sampled by the current policy have w_t ~= 1 (exactly 1 up to engine/trainer numerics), so the
correction only bites where data is stale. Without the correction (``off_policy="none"``) the ratio is
taken against the behaviour log-probs directly: r_t = pi_theta / mu.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import astuple, dataclass
from typing import Sequence

import torch
import torch.nn.functional as F


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1 (0 when the mask is empty)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


# --------------------------------------------------------------------------- log-probs and entropy

def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each token given its prefix, aligned with ``input_ids`` (position 0 -> 0)."""
    logp_next = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
    picked = logp_next.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    return F.pad(picked, (1, 0), value=0.0)  # (B, T)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the distribution that produced each token, aligned like :func:`token_logprobs`."""
    logits = logits[:, :-1].float()  # (B, T-1, V)
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)  # (B, T-1)
    return F.pad(entropy, (1, 0), value=0.0)  # (B, T)


# --------------------------------------------------------------------------- advantages

def group_advantages(rewards: Sequence[float] | torch.Tensor, group_ids: Sequence[str],
                     eps: float = 1e-4, scale_by_std: bool = True) -> torch.Tensor:
    """GRPO advantages: (R - group mean) / (group std + eps), one scalar per trajectory.

    The std is the unbiased sample std (as in DeepSeekMath / TRL). A group of one trajectory, or a
    group whose rewards are all equal, gets advantage 0 — it carries no learning signal.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float64)  # (N,)
    if len(group_ids) != rewards.numel():
        raise ValueError(f"group_advantages: {rewards.numel()} rewards but {len(group_ids)} group ids")
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        members[g].append(i)
    adv = torch.zeros_like(rewards)
    for idx in members.values():
        r = rewards[idx]
        centred = r - r.mean()
        if scale_by_std:
            std = r.std(unbiased=True) if len(idx) > 1 else torch.tensor(0.0, dtype=r.dtype)
            # a flat group has centred == 0 exactly; skip the division so eps=0 cannot give 0/0
            centred = centred / (std + eps) if std > 0 else torch.zeros_like(centred)
        adv[idx] = centred
    return adv.float()


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
        gamma: float = 1.0, lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the *model tokens* of each row.

    Non-model tokens (observations, prompt, padding) are skipped: the next step after model token t is
    the next model token in the row, and the value after the last model token is 0 (episode end).
    ``rewards`` (B, T) holds per-token rewards (typically the trajectory reward on its last model token).
    Returns ``(advantages, returns)``, both (B, T) and zero where mask is 0.
    """
    B, T = rewards.shape
    adv = torch.zeros_like(values, dtype=torch.float32)
    next_value = torch.zeros(B, dtype=torch.float32, device=values.device)  # (B,)
    next_adv = torch.zeros(B, dtype=torch.float32, device=values.device)  # (B,)
    for t in reversed(range(T)):
        m = mask[:, t].float()  # (B,)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * next_adv
        adv[:, t] = a_t * m
        # carry the recursion only across model tokens; other positions leave it untouched
        next_value = torch.where(m > 0, values[:, t].float(), next_value)
        next_adv = torch.where(m > 0, a_t, next_adv)
    returns = (adv + values.float()) * mask
    return adv, returns


# --------------------------------------------------------------------------- losses

def truncated_is_weights(prox_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor,
                         cap: float) -> torch.Tensor:
    """w = min(pi_prox / mu, cap) per token, without gradient, 0 outside the mask."""
    with torch.no_grad():
        return torch.exp(prox_logp - behav_logp).clamp(max=cap) * mask


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, normalizer: float, clip_eps: float = 0.2,
                        clip_eps_high: float | None = None,
                        is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """PPO/GRPO clipped surrogate, summed over loss tokens and divided by ``normalizer``.

    ``old_logp`` is the policy the ratio is measured against (proximal or behaviour, see module doc);
    ``is_weights`` optionally multiplies each token's loss (decoupled off-policy correction).
    Returns the loss and detached statistics (clip fraction, approximate KL to old_logp), both as sums
    over tokens so they can be added across micro-batches and divided by the token count afterwards.
    """
    high = clip_eps if clip_eps_high is None else clip_eps_high
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)  # (B, T)
    # Policy loss
    pg_unclipped = -advantages * ratio
    pg_clipped = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + high)
    per_token = torch.maximum(pg_unclipped, pg_clipped)  # (B, T)
    if is_weights is not None:
        per_token = per_token * is_weights
    loss = masked_sum(per_token, mask) / normalizer
    with torch.no_grad():
        stats = {
            "clipped_tokens": masked_sum((pg_clipped > pg_unclipped).float(), mask).item(),
            "approx_kl_sum": masked_sum((ratio - 1) - log_ratio, mask).item(),  # k3 estimator
        }
    return loss, stats


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
               normalizer: float) -> torch.Tensor:
    """Sum of k3 KL over loss tokens divided by ``normalizer`` (multiply by kl_coef yourself)."""
    return masked_sum(k3_kl(logp, ref_logp), mask) / normalizer


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, normalizer: float) -> torch.Tensor:
    """Sum of per-token entropy over loss tokens divided by ``normalizer`` (subtract coef * this)."""
    return masked_sum(entropy, mask) / normalizer


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               mask: torch.Tensor, normalizer: float, clip: float | None = 0.2) -> torch.Tensor:
    """Clipped value regression (CleanRL): 0.5 * max((V-G)^2, (V_clipped-G)^2), token sum / normalizer."""
    unclipped = (values - returns) ** 2
    if clip is None:
        per_token = unclipped
    else:
        v_clipped = old_values + (values - old_values).clamp(-clip, clip)
        per_token = torch.maximum(unclipped, (v_clipped - returns) ** 2)
    return 0.5 * masked_sum(per_token, mask) / normalizer


# --------------------------------------------------------------------------- the terms of one step

@dataclass
class LossTerms:
    """What a ``forward_backward`` computed, summed over its micro-batches.

    The losses are token sums divided by the normalizer (so, with the default normalizer, token means over
    the batch); the ``*_sum`` statistics and ``loss_tokens`` are plain token sums, to be divided by a token
    count. Terms add (``a + b``) across mini-batches, and cross data-parallel ranks as one tensor
    (``to_tensor`` / ``from_tensor``).
    """
    total: float = 0.0
    """The loss that was back-propagated: policy + kl_coef * kl - entropy_coef * entropy + vf_coef * value."""
    policy: float = 0.0
    kl: float = 0.0
    """k3 KL to the reference policy (0 without one)."""
    entropy: float = 0.0
    value: float = 0.0
    """Critic loss (PPO only)."""
    clipped_tokens: float = 0.0
    """Tokens whose ratio was clipped."""
    approx_kl_sum: float = 0.0
    """k3 KL to the policy the ratio is measured against, summed over tokens."""
    is_weight_sum: float = 0.0
    """Truncated importance weights summed over tokens (the token count without the decoupled correction)."""
    loss_tokens: float = 0.0
    """Tokens that carried a loss."""

    def __add__(self, other: "LossTerms") -> "LossTerms":
        return LossTerms(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def to_tensor(self) -> torch.Tensor:
        return torch.tensor(astuple(self), dtype=torch.float64)

    @classmethod
    def from_tensor(cls, t: torch.Tensor) -> "LossTerms":
        return cls(*t.tolist())

    def metrics(self, updates: int) -> dict[str, float]:
        """``losses/`` scalars of a train step that made ``updates`` optimizer updates: each loss averaged
        over updates, each token statistic averaged over the tokens it was summed over."""
        tokens = max(self.loss_tokens, 1.0)
        return {"losses/policy": self.policy / updates, "losses/kl": self.kl / updates,
                "losses/entropy": self.entropy / updates, "losses/value": self.value / updates,
                "losses/clipfrac": self.clipped_tokens / tokens, "losses/approx_kl": self.approx_kl_sum / tokens,
                "losses/is_weight": self.is_weight_sum / tokens, "losses/total": self.total / updates}
