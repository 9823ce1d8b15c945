"""Train/inference mismatch metrics on a real tiny model: ~0 on equal weights, > 0 when inference differs,
stale tokens left out (they belong to approx_kl / is_weight)."""
import pytest
import torch

from rollart.engine.config import EngineConfig
from rollart.engine.llm_engine import LLMEngine
from rollart.tools.make_tiny_model import make_tiny_model
from rollart.trainer import TrainerConfig
from rollart.trainer.torch_trainer import TorchTrainer
from rollart.types import SamplingParams, Trajectory, WeightBucket


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_model(tmp_path_factory.mktemp("mm") / "tiny", hidden=64, layers=2, heads=1, kv_heads=1,
                               seed=0, init_std=0.2))


def rollout(engine: LLMEngine, version: int, n: int = 6) -> list[Trajectory]:
    """``n`` sampled trajectories (prompt + 8 generated tokens) with the engine's log-probs and versions."""
    prompts = [[5 + i, 17, 33 + 2 * i, 9] for i in range(n)]
    outs = engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True, seed=1))
    trajs = []
    for i, (p, o) in enumerate(zip(prompts, outs)):
        t = Trajectory(trajectory_id=f"t{i}", group_id=f"g{i // 3}", task="mm")
        t.token_ids = p + o.token_ids
        t.loss_mask = [0] * len(p) + [1] * len(o.token_ids)
        t.logprobs = [0.0] * len(p) + list(o.logprobs)
        t.versions = [-1] * len(p) + [version] * len(o.token_ids)
        t.reward = float(i % 3)
        trajs.append(t)
    return trajs


@pytest.mark.parametrize("updates", [{}, {"ppo_epochs": 2}])  # the single update's forward; precomputed prox
def test_mismatch_is_zero_on_equal_weights_positive_when_they_differ_and_skips_stale_tokens(tiny, updates):
    trainer = TorchTrainer(TrainerConfig(model_path=tiny, lr=1e-2, num_threads=1, dtype="float32", **updates))
    engine = LLMEngine(EngineConfig(model=tiny, num_kv_blocks=256, dtype="float32"))

    same = trainer.train_step(rollout(engine, version=0))  # trainer at version 0 = the engine's weights
    assert same["mismatch/tokens"] == 48 and same["mismatch/token_frac"] == 1.0
    assert same["mismatch/logprob_abs_diff"] < 1e-3 and abs(same["mismatch/kl"]) < 1e-5

    # the engine now runs version 1 perturbed (as a different kernel or dtype would): the trainer at version 1
    # sees its tokens as fresh and the difference as mismatch
    g = torch.Generator().manual_seed(0)
    noisy = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in trainer.named_tensors()}
    engine.update_weights(WeightBucket.of(1, noisy))
    off = trainer.train_step(rollout(engine, version=1))
    assert off["mismatch/tokens"] == 48
    assert off["mismatch/logprob_abs_diff"] > 20 * same["mismatch/logprob_abs_diff"] + 1e-3
    assert off["mismatch/kl"] > 1e-4

    # tokens of an older version are staleness, not mismatch: counted out, the means not logged at all
    stale = trainer.train_step(rollout(engine, version=1))  # the trainer is at version 2 now
    assert stale["rollout/staleness_mean"] == 1.0
    assert stale["mismatch/tokens"] == 0 and "mismatch/logprob_abs_diff" not in stale
    assert abs(stale["losses/is_weight"] - 1.0) > 1e-3  # the staleness metrics still see the difference
