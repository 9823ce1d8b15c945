"""The RL objective of one micro-batch: which loss terms the trainer config turns on and how they add up.

The terms are the pure functions of :mod:`rollart.trainer.losses`; this module decides what the ratio is taken
against (the behaviour log-probs, the proximal ones of a step with several updates, or, decoupled with one update
per step, the training forward's own, detached), applies the truncated importance weights of decoupled PPO, and
sums policy loss, KL to the reference, entropy bonus and value loss into the loss to backpropagate and its
:class:`~rollart.trainer.losses.LossTerms`.
"""
from __future__ import annotations

import torch

from rollart.trainer import losses as L
from rollart.trainer.config import TrainerConfig
from rollart.trainer.losses import LossTerms


def micro_batch_loss(cfg: TrainerConfig, mb: dict[str, torch.Tensor], logits: torch.Tensor, logp: torch.Tensor,
                     normalizer: float, *, multi_update: bool, with_kl: bool,
                     values: torch.Tensor | None = None) -> tuple[torch.Tensor, LossTerms]:
    """The loss of ``mb`` (a dict from ``build_batch`` with the step's precomputed log-probs) and its terms.

    ``logits`` (B, T, V) and ``logp`` (B, T) are the policy's on ``mb``; ``multi_update``: the step makes several
    optimizer updates (so ``prox_logprobs`` were computed apart); ``with_kl``: a reference model gave
    ``ref_logprobs``; ``values`` (B, T): the critic's, required for ``algorithm="ppo"``.
    """
    mask = mb["loss_mask"]
    # Policy loss: the clipped ratio against the old log-probs, weighted for stale tokens when decoupled
    is_w = None
    if cfg.off_policy == "decoupled":
        prox = mb["prox_logprobs"] if multi_update else logp.detach()
        old = prox
        is_w = L.truncated_is_weights(prox, mb["behav_logprobs"], mask, cfg.is_cap)
    elif multi_update:
        old = mb["prox_logprobs"]
    else:
        old = mb["behav_logprobs"]
    pg, stats = L.clipped_policy_loss(logp, old, mb["advantages"], mask, normalizer, cfg.clip_eps,
                                      cfg.clip_eps_high, is_w)
    loss = pg
    kl = ent = vl = torch.zeros(())
    # KL to the reference policy
    if with_kl:
        kl = L.kl_penalty(logp, mb["ref_logprobs"], mask, normalizer)
        loss = loss + cfg.kl_coef * kl
    # Entropy bonus
    if cfg.entropy_coef > 0:
        ent = L.entropy_bonus(L.token_entropy(logits), mask, normalizer)
        loss = loss - cfg.entropy_coef * ent
    # Value loss (PPO's critic)
    if cfg.algorithm == "ppo":
        if values is None:
            raise ValueError("micro_batch_loss: algorithm='ppo' needs the critic's values")
        vl = L.value_loss(values, mb["old_values"], mb["returns"], mask, normalizer, cfg.value_clip)
        loss = loss + cfg.vf_coef * vl
    tokens = float(mask.sum())
    is_sum = float(L.masked_sum(is_w, mask)) if is_w is not None else tokens
    return loss, LossTerms(total=loss.item(), policy=pg.item(), kl=kl.item(), entropy=ent.item(),
                           value=vl.item(), clipped_tokens=stats["clipped_tokens"],
                           approx_kl_sum=stats["approx_kl_sum"], is_weight_sum=is_sum, loss_tokens=tokens)
