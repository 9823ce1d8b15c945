"""reward.judges: the env's return plus judge_weight x the mean judge score, the same with resident judges and
through the GPU-service manager (restored / evicted), and the run's action scheduler carries the judges."""
import asyncio

import pytest

from rollart.actions.config import ActionsConfig
from rollart.pipeline import PipelineConfig
from rollart.pipeline.scoring import run_actions, with_judges
from rollart.rewards.config import RewardConfig
from rollart.rewards.judge_model import judge_models, score
from rollart.types import Trajectory


class Bytes:
    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode()


def traj(answer: str) -> Trajectory:
    ids = list(answer.encode())
    return Trajectory("t", "g", "T", token_ids=[1] + ids, loss_mask=[0] + [1] * len(ids),
                      info={"env_return": 1.0, "env": {"answer": "42"}})


def test_judged_reward_is_the_same_resident_and_through_the_service_manager():
    cfg = PipelineConfig(reward=RewardConfig(judges=3, judge_weight=0.5),
                         actions=ActionsConfig(enabled=True, service_memory_mb=6))
    judges = judge_models(3)
    expected = 1.0 + 0.5 * sum(score(make(), "the answer is 42", "42") for make in judges.values()) / 3

    async def both():
        resident = await with_judges(cfg, None, Bytes(), None)(traj("the answer is 42"))
        actions = run_actions(cfg)
        try:
            served = await with_judges(cfg, None, Bytes(), actions)(traj("the answer is 42"))
            return resident, served, actions.metrics()
        finally:
            await actions.close()
    resident, served, m = asyncio.run(both())
    assert resident == pytest.approx(expected) and served == pytest.approx(expected)
    assert m["system/actions/reward_model/count"] == 3 and m["system/actions/service/evictions"] >= 1
    assert with_judges(PipelineConfig(), None, Bytes(), None) is None  # no judges: the env's return as before
