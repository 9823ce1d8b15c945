"""Covers rollart.trainer.losses against hand-computed values (GRPO, clipping, k3 KL, IS weights, GAE)."""
import math

import pytest
import torch

from rollart.trainer import losses as L


def test_group_advantages_normalise_per_group_and_zero_for_flat_groups():
    adv = L.group_advantages([1, 0, 0, 1, 2, 2, 5], ["a", "a", "a", "a", "b", "b", "c"], eps=0.0)
    s = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    expected = [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0, 0.0, 0.0]
    assert adv.tolist() == pytest.approx(expected, abs=1e-6)
    centred = L.group_advantages([1, 0, 0, 1], ["a"] * 4, scale_by_std=False)
    assert centred.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    with pytest.raises(ValueError, match="group ids"):
        L.group_advantages([1.0, 2.0], ["a"])


def test_token_logprobs_are_shifted_and_position_zero_is_zero():
    logits = torch.zeros(1, 3, 2)
    logits[0, 0] = torch.tensor([0.0, math.log(3.0)])  # predicts token 1 with p=3/4
    logits[0, 1] = torch.tensor([math.log(4.0), 0.0])  # predicts token 0 with p=4/5
    ids = torch.tensor([[7 % 2, 1, 0]])
    lp = L.token_logprobs(logits, ids)
    assert lp.tolist()[0] == pytest.approx([0.0, math.log(0.75), math.log(0.8)])
    ent = L.token_entropy(torch.zeros(1, 2, 4))
    assert ent.tolist()[0] == pytest.approx([0.0, math.log(4)])


def test_clipped_policy_loss_hand_computed():
    # tokens: (ratio 1.5, A=+1) clipped to 1.2; (ratio 0.5, A=+1) unclipped; (ratio 1.5, A=-1) unclipped;
    # the fourth token is masked out and must not count.
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.5, 9.0]])).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, stats = L.clipped_policy_loss(logp, old, adv, mask, normalizer=3.0, clip_eps=0.2)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 1.5) / 3)
    assert stats["clipped_tokens"] == 1
    loss.backward()
    # d/dlogp of -A*ratio = -A*ratio; clipped token and masked token get zero gradient
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -0.5 / 3, 1.5 / 3, 0.0])


def test_clip_higher_and_importance_weights():
    old = torch.zeros(1, 1)
    logp = torch.log(torch.tensor([[1.5]]))
    one = torch.ones(1, 1)
    loss, _ = L.clipped_policy_loss(logp, old, one, one, 1.0, clip_eps=0.2, clip_eps_high=0.28)
    assert loss.item() == pytest.approx(-1.28)
    w = L.truncated_is_weights(torch.log(torch.tensor([[0.3, 0.1, 0.2]])), torch.log(torch.tensor([[0.1, 0.2, 0.2]])),
                               torch.tensor([[1.0, 1.0, 0.0]]), cap=2.0)
    assert w.tolist()[0] == pytest.approx([2.0, 0.5, 0.0])  # 3 truncated to 2; masked -> 0
    loss_w, _ = L.clipped_policy_loss(torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3),
                                      torch.tensor([[1.0, 1.0, 0.0]]), 2.0, is_weights=w)
    assert loss_w.item() == pytest.approx(-(2.0 + 0.5) / 2)


def test_k3_kl_value_and_penalty_masking():
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    kl = L.k3_kl(logp, ref)
    assert kl.tolist()[0] == pytest.approx([0.5 - math.log(0.5) - 1, 0.0], abs=1e-6)
    assert L.kl_penalty(logp, ref, torch.tensor([[0.0, 1.0]]), 1.0).item() == pytest.approx(0.0, abs=1e-7)


def test_gae_skips_non_model_tokens():
    rewards = torch.tensor([[0, 0, 0, 0, 1.0]])
    values = torch.tensor([[0, 0.1, 0.2, 0.0, 0.3]])
    mask = torch.tensor([[0, 1, 1, 0, 1.0]])
    adv, ret = L.gae(rewards, values, mask, gamma=0.9, lam=0.8)
    a4 = 1 - 0.3
    a2 = (0.9 * 0.3 - 0.2) + 0.72 * a4
    a1 = (0.9 * 0.2 - 0.1) + 0.72 * a2
    assert adv.tolist()[0] == pytest.approx([0, a1, a2, 0, a4])
    assert ret.tolist()[0] == pytest.approx([0, a1 + 0.1, a2 + 0.2, 0, a4 + 0.3])


def test_value_loss_clipping_and_entropy_bonus():
    v, old, ret, m = torch.ones(1, 1), torch.full((1, 1), 0.5), torch.zeros(1, 1), torch.ones(1, 1)
    assert L.value_loss(v, old, ret, m, 1.0, clip=0.2).item() == pytest.approx(0.5)  # max(1, 0.7^2)
    v2 = torch.full((1, 1), 0.6)
    # unclipped (0.6-1)^2=0.16; clipped old+0.1=0.6 same -> 0.08
    assert L.value_loss(v2, old, torch.ones(1, 1), m, 1.0, clip=0.2).item() == pytest.approx(0.08)
    ent = torch.tensor([[0.0, 2.0, 4.0]])
    assert L.entropy_bonus(ent, torch.tensor([[0.0, 1.0, 1.0]]), 2.0).item() == pytest.approx(3.0)
