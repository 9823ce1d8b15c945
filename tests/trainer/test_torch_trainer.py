"""Covers the torch trainer in one process: GRPO/PPO steps, micro-batch invariance, off-policy correction,
staleness masking, KL to a frozen reference and the backend registry."""
import math
import random

import pytest
import torch

from rollart.trainer import TrainerConfig, build_batch, make_trainer
from rollart.trainer.networks import forward_logits
from rollart.trainer.batching import select_rows
from rollart.trainer.losses import token_logprobs
from rollart.trainer.torch_trainer import TorchTrainer
from rollart.types import Trajectory

from tiny_policy import VOCAB, make_model, make_trajectories, params_of


def _trainer(**kw) -> TorchTrainer:
    return TorchTrainer(TrainerConfig(**{"lr": 1e-2, "num_threads": 1, **kw}), model=make_model(0))


def _with_model_logprobs(trajs, model):
    """Set behaviour log-probs to what ``model`` assigns (as if it had sampled the batch itself)."""
    b = build_batch(trajs)
    with torch.no_grad():
        lp = token_logprobs(forward_logits(model, b["input_ids"]), b["input_ids"])
    for i, t in enumerate(trajs):
        t.logprobs = [float(x) * m for x, m in zip(lp[i, : len(t.token_ids)].tolist(), t.loss_mask)]
    return trajs


def test_train_step_updates_weights_and_version():
    tr = _trainer()
    before = params_of(tr.policy)
    m = tr.train_step(make_trajectories())
    assert tr.version == 1 and m["charts/version"] == 1
    assert all(math.isfinite(v) for v in m.values())
    assert m["losses/grad_norm"] > 0
    after = params_of(tr.policy)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_micro_batching_does_not_change_the_update():
    trajs = make_trajectories(3, 4, seed=2)
    big, small = _trainer(micro_batch_tokens=100_000), _trainer(micro_batch_tokens=16)
    mb, ms = big.train_step(trajs), small.train_step(trajs)
    for (k, a), (_, b) in zip(params_of(big.policy).items(), params_of(small.policy).items()):
        assert torch.allclose(a, b, atol=1e-6), k
    assert mb["losses/policy"] == pytest.approx(ms["losses/policy"], abs=1e-6)


def _policy_forwards(tr: TorchTrainer, trajs) -> int:
    calls = []
    handle = tr.policy.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        tr.train_step(trajs)
    finally:
        handle.remove()
    return len(calls)


def test_micro_batch_budget_defaults_by_device_and_an_explicit_one_takes_effect():
    """Unset, the budget is 2048 padded tokens on the CPU (16384 on a GPU); 40 rows of 100 tokens (4,000 padded)
    then train in two micro-batches, with an explicit 16384 in one."""
    assert TrainerConfig().micro_batch_tokens_on("cpu") == 2048
    assert TrainerConfig().micro_batch_tokens_on("cuda") == 16384
    assert TrainerConfig(micro_batch_tokens=512).micro_batch_tokens_on("cuda") == 512
    rng = random.Random(5)
    trajs = [Trajectory(trajectory_id=f"t{i}", group_id=f"g{i // 4}", task="toy",
                        token_ids=[rng.randrange(VOCAB) for _ in range(100)], loss_mask=[0] * 20 + [1] * 80,
                        logprobs=[0.0] * 20 + [-3.0] * 80, versions=[-1] * 20 + [0] * 80, reward=float(i % 2))
             for i in range(40)]
    unset, whole = _trainer(), _trainer(micro_batch_tokens=16384)
    assert unset.micro_batch_tokens == 2048
    assert _policy_forwards(unset, trajs) == 2
    assert _policy_forwards(whole, trajs) == 1


def test_repeated_steps_raise_logprob_of_rewarded_tokens():
    tr = _trainer(lr=3e-2)  # decoupled: the ratio is re-anchored at every step, so learning continues
    trajs = _with_model_logprobs(make_trajectories(4, 4, seed=3), tr.policy)
    b = build_batch(trajs)
    pos, neg = (b["advantages"] > 0).float(), (b["advantages"] < 0).float()

    def mean_lp(mask):
        with torch.no_grad():
            lp = token_logprobs(forward_logits(tr.policy, b["input_ids"]), b["input_ids"])
        return float((lp * mask).sum() / mask.sum())

    p0, n0 = mean_lp(pos), mean_lp(neg)
    for _ in range(10):
        tr.train_step(b)
    assert mean_lp(pos) > p0 + 0.1
    assert mean_lp(neg) < n0 - 0.1


def test_decoupled_equals_plain_when_data_is_on_policy_and_downweights_stale_tokens():
    base = make_trajectories(2, 4, seed=4)
    a, b = _trainer(off_policy="decoupled"), _trainer(off_policy="none")
    trajs = _with_model_logprobs(base, a.policy)
    a.train_step(trajs)
    b.train_step(trajs)
    for (k, x), (_, y) in zip(params_of(a.policy).items(), params_of(b.policy).items()):
        assert torch.allclose(x, y, atol=1e-5), k
    # behaviour policy assigned much higher probability than the current one: weights pi_prox/mu << 1
    for t in trajs:
        t.logprobs = [lp + 1.0 if m else 0.0 for lp, m in zip(t.logprobs, t.loss_mask)]
    m = _trainer(off_policy="decoupled").train_step(trajs)
    assert m["losses/is_weight"] == pytest.approx(math.exp(-1.0), rel=1e-3)


def test_max_staleness_masks_old_tokens():
    trajs = make_trajectories(2, 4, seed=5, versions=(0, 4))
    tr = _trainer(max_staleness=1)
    tr.version = 5
    all_tokens = float(build_batch(trajs)["loss_mask"].sum())
    m = tr.train_step(trajs)
    assert 0 < m["charts/loss_tokens"] < all_tokens  # version-0 tokens (staleness 5) dropped
    assert m["rollout/staleness_max"] == 5
    stale_only = make_trajectories(1, 2, seed=6, versions=(0,))
    tr2 = _trainer(max_staleness=1)
    tr2.version = 5
    before = params_of(tr2.policy)
    skipped = tr2.train_step(stale_only)  # nothing trainable: no update, but the version still advances
    assert skipped["charts/skipped_empty_batch"] == 1.0 and tr2.version == 6
    assert all(torch.equal(before[k], v) for k, v in params_of(tr2.policy).items())


def test_kl_to_reference_starts_at_zero_then_grows():
    tr = _trainer(kl_coef=0.1)
    trajs = make_trajectories(seed=7)
    first = tr.train_step(trajs)
    second = tr.train_step(trajs)
    assert first["losses/kl"] == pytest.approx(0.0, abs=1e-7)
    assert second["losses/kl"] > 0


def test_ppo_with_critic_learns_values():
    tr = _trainer(algorithm="ppo", entropy_coef=0.01, num_minibatches=2, ppo_epochs=2)
    trajs = make_trajectories(3, 4, seed=8)
    losses = [tr.train_step(trajs)["losses/value"] for _ in range(6)]
    assert losses[-1] < losses[0]
    assert tr.version == 6


def test_public_steps_make_the_same_update_as_train_step():
    trajs = make_trajectories(3, 4, seed=9)
    fused, stepped = _trainer(entropy_coef=0.01), _trainer(entropy_coef=0.01)
    m = fused.train_step(trajs)
    batch, half = build_batch(trajs), len(trajs) // 2
    tokens = float(batch["loss_mask"].sum())  # two calls over one normalizer: one accumulated gradient
    terms = (stepped.forward_backward(select_rows(batch, range(half)), tokens)
             + stepped.forward_backward(select_rows(batch, range(half, len(trajs))), tokens))
    assert stepped.version == 0
    norm = stepped.optimizer_step()
    assert stepped.version == 1 and norm == pytest.approx(m["losses/grad_norm"], rel=1e-4)
    assert terms.loss_tokens == m["charts/loss_tokens"]
    assert terms.metrics(updates=1)["losses/entropy"] == pytest.approx(m["losses/entropy"], rel=1e-5)
    for (k, a), (_, b) in zip(params_of(fused.policy).items(), params_of(stepped.policy).items()):
        assert torch.allclose(a, b, atol=1e-5), k
    with pytest.raises(RuntimeError, match="no forward_backward"):
        stepped.optimizer_step()


def test_registry_and_bad_backend():
    tr = make_trainer(TrainerConfig(backend="torch", num_threads=1), model=make_model(0))
    assert isinstance(tr, TorchTrainer)
    with pytest.raises(ValueError, match="unknown trainer backend 'jax'"):
        make_trainer(TrainerConfig(backend="jax"))
    with pytest.raises(ValueError, match="model_path"):
        make_trainer(TrainerConfig(backend="torch"))
