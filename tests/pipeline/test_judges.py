"""reward.judges: the env's return plus judge_weight x the mean score of model folders judging the answer, the
same with resident judges and through the GPU-service manager (restored / evicted), and the run's action
scheduler carries the judges."""
import asyncio

import pytest

from rollart.actions.config import ActionsConfig
from rollart.pipeline import PipelineConfig
from rollart.pipeline.parts import run_actions
from rollart.rewards.scoring import with_judges
from rollart.rewards.config import RewardConfig
from rollart.rewards.judges import judge_factories, judge_tokenizers, score
from rollart.tools.make_tiny_model import make_tiny_model
from rollart.types import Trajectory


class Bytes:
    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode()


def traj(answer: str) -> Trajectory:
    ids = list(answer.encode())
    return Trajectory("t", "g", "T", token_ids=[1] + ids, loss_mask=[0] + [1] * len(ids),
                      info={"env_return": 1.0, "env": {"answer": "42"}})


@pytest.fixture(scope="module")
def judge_folders(tmp_path_factory):
    """Three tiny model folders (3.5 MiB of weights each), different seeds: three judges that disagree."""
    root = tmp_path_factory.mktemp("judges")
    return tuple(str(make_tiny_model(root / f"j{i}", seed=100 + i, init_std=0.2)) for i in range(3))


def test_a_judge_scores_each_answer_by_its_likelihood_in_0_1(judge_folders):
    make = judge_factories(judge_folders[:1])
    (name, factory), tok = next(iter(make.items())), next(iter(judge_tokenizers(judge_folders[:1]).values()))
    model = factory()
    scores = [score(model, tok, text, "42") for text in ("the answer is 42", "zzzz qqqq", "")]
    assert all(0.0 < x <= 1.0 for x in scores) and len(set(scores)) == 3  # a real, input-dependent score
    assert name == "judge0-j0"


def test_judged_reward_is_the_same_resident_and_through_the_service_manager(judge_folders):
    cfg = PipelineConfig(reward=RewardConfig(judges=judge_folders, judge_weight=0.5),
                         actions=ActionsConfig(enabled=True, service_memory_mb=6))
    toks = judge_tokenizers(judge_folders)
    expected = 1.0 + 0.5 * sum(score(make(), toks[name], "the answer is 42", "42")
                               for name, make in judge_factories(judge_folders).items()) / 3

    async def both():
        resident = await with_judges(cfg.reward, None, Bytes(), None)(traj("the answer is 42"))
        actions = run_actions(cfg)
        try:
            served = await with_judges(cfg.reward, None, Bytes(), actions)(traj("the answer is 42"))
            return resident, served, actions.metrics()
        finally:
            await actions.close()
    resident, served, m = asyncio.run(both())
    assert resident == pytest.approx(expected) and served == pytest.approx(expected)
    assert m["system/actions/reward_model/count"] == 3 and m["system/actions/service/evictions"] >= 1
    assert with_judges(RewardConfig(), None, Bytes(), None) is None  # no judges: the env's return as before
