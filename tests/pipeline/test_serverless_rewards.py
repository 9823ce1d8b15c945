"""Serverless rewards in a training run: reward.serverless=true starts `python -m rollart.rewards.serve` as a
real process, trajectories are scored over real HTTP, failures after retries drop trajectories with their
reason counted, and the endpoint is stopped at the end."""
import asyncio
import os
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import envs  # noqa: F401
import reward_funcs
from rollart.config import ConfigError
from rollart.pipeline import Coordinator
from rollart.rewards.config import RewardConfig
from rollart.rewards.local import LocalEndpoint
from rollart.rollout.env_manager import TaskSpec
from rollart.rewards.dispatch import RewardDispatcher, endpoint_reward
from rollart.rewards.client import ClientConfig, RewardClient
from rollart.types import Trajectory
from run_configs import config

FROZEN = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
                  max_new_tokens=1, max_turns=6)
VALID_MOVE = f"{reward_funcs.__name__}:valid_move"


@pytest.fixture(autouse=True)
def worker_import_path(monkeypatch):
    """The endpoint's processes import reward_funcs the way this test did."""
    top = str(Path(reward_funcs.__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [top, os.environ.get("PYTHONPATH")])))


class Tok:
    """Stands in for a tokenizer: token ids are character codes."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


def answered(text: str, i: int) -> Trajectory:
    return Trajectory(trajectory_id=f"t{i}", group_id="g", task="FrozenLake", token_ids=[ord(c) for c in text],
                      loss_mask=[1] * len(text), status="done", info={"env": {"answer": "L"}})


async def score_all(cfg: RewardConfig, trajectories: list[Trajectory]) -> tuple[RewardDispatcher, RewardClient, dict]:
    async with LocalEndpoint(cfg) as url:
        client = RewardClient(url, config=ClientConfig(retries=cfg.retries, backoff=0.01, timeout=30), seed=0)
        try:
            dispatcher = RewardDispatcher(endpoint_reward(client.call, cfg.function, Tok()), timeout_s=120)
            await asyncio.gather(*(dispatcher.score(t) for t in trajectories))
            stats = await client.stats()
        finally:
            await client.close()
    return dispatcher, client, stats


async def test_a_flaky_endpoint_loses_nothing():
    """30% of calls fail (raise, worker crash, hang): every trajectory is scored right or dropped, reason counted."""
    cfg = RewardConfig(serverless=True, function="valid_move", functions=(VALID_MOVE,), retries=1, fault_rate=0.3,
                       fault_seed=3, call_timeout_s=1.0, max_workers=4)
    trajectories = [answered("L" if i % 2 else "no", i) for i in range(40)]
    dispatcher, client, stats = await score_all(cfg, trajectories)
    scored = [t for t in trajectories if t.status == "done"]
    dropped = [t for t in trajectories if t.status == "failed"]
    assert len(scored) + len(dropped) == len(trajectories)
    assert all(t.reward == (1.0 if t.token_ids == [ord("L")] else 0.0) for t in scored)
    assert all(t.reason.startswith("reward: RewardCallError") for t in dropped)
    assert dispatcher.counters == {"scored": len(scored), "failed": len(dropped)}
    assert sum(dispatcher.dropped.values()) == len(dropped)
    assert stats["ok"] == len(scored)  # one successful call per scored trajectory
    assert stats["calls"] == client.attempts  # every attempt reached the endpoint and was answered
    assert stats["failed"] > 0 and client.attempts > len(trajectories)  # faults happened and were retried


async def test_a_reward_failing_after_retries_drops_its_trajectory():
    cfg = RewardConfig(serverless=True, function="valid_move", functions=(VALID_MOVE,), retries=2, fault_rate=1.0,
                       call_timeout_s=1.0)
    trajectories = [answered("L", i) for i in range(3)]
    dispatcher, client, stats = await score_all(cfg, trajectories)
    assert [t.status for t in trajectories] == ["failed"] * 3
    assert all("failed after 3 attempts" in t.reason for t in trajectories)
    assert client.attempts == stats["calls"] == 9
    assert set(dispatcher.dropped) <= {"endpoint_http_500", "endpoint_http_504"}


def run_cfg(tmp_path, model, **reward):
    return config(tmp_path, model, total_steps=2, eval_episodes=1, eval_at_end=False, reward=RewardConfig(**reward))


def test_a_run_scores_through_a_local_endpoint_and_stops_it(tmp_path, tiny_model):
    cfg = run_cfg(tmp_path, tiny_model, serverless=True, function="valid_move", functions=(VALID_MOVE,),
                  fault_rate=0.3, retries=1, call_timeout_s=1.0)
    coordinator = Coordinator(cfg, [FROZEN])
    result = asyncio.run(coordinator.run())
    assert result.steps == 2
    local = coordinator.parts.scoring.local
    assert local.url.startswith("http://127.0.0.1:") and local.proc.returncode is not None  # stopped at the end
    acc = EventAccumulator(result.run_dir)
    acc.Reload()
    last = {tag: acc.Scalars(tag)[-1].value for tag in acc.Tags()["scalars"]
            if tag.startswith(("rollout/scoring/", "system/reward_endpoint/"))}
    assert last["rollout/scoring/scored"] >= 2 * 2 * 4
    kinds = sum(v for k, v in last.items() if k.startswith("rollout/scoring/dropped/"))
    assert last["rollout/scoring/dropped"] == kinds
    assert last["system/reward_endpoint/attempts"] >= last["rollout/scoring/scored"] + last["rollout/scoring/dropped"]
    assert last["system/reward_endpoint/spawned"] >= 1  # the endpoint's pool scaled up from zero
    # the trained rewards are the endpoint's: a move letter scores 1, anything else 0
    assert {h["charts/reward"] for h in result.history} <= {x / 8 for x in range(9)}


def test_reward_settings_are_checked_before_the_run(tmp_path, tiny_model):
    with pytest.raises(ConfigError, match="choose one"):
        RewardConfig(endpoint="http://127.0.0.1:1", serverless=True)
    with pytest.raises(ConfigError, match="not served by reward.functions"):
        RewardConfig(serverless=True, function="nope")
    with pytest.raises(ConfigError, match="http:// or https://"):
        RewardConfig(endpoint="localhost:8700")
    with pytest.raises(ConfigError, match="reward.tasks"):
        Coordinator(run_cfg(tmp_path, tiny_model, endpoint="http://127.0.0.1:1", tasks=("Chess",)), [FROZEN])


def test_an_unreachable_endpoint_drops_trajectories_not_the_process():
    async def go():
        client = RewardClient("http://127.0.0.1:9", config=ClientConfig(retries=1, backoff=0.0, timeout=5))
        dispatcher = RewardDispatcher(endpoint_reward(client.call, "valid_move", Tok()))
        try:
            trajectories = [answered("L", i) for i in range(2)]
            await asyncio.gather(*(dispatcher.score(t) for t in trajectories))
        finally:
            await client.close()
        return trajectories, dispatcher
    trajectories, dispatcher = asyncio.run(go())
    assert [t.status for t in trajectories] == ["failed", "failed"]
    assert dispatcher.dropped == {"endpoint_unreachable": 2}
    assert dispatcher.metrics()["rollout/scoring/dropped/endpoint_unreachable"] == 2.0


@pytest.mark.slow
def test_multitask_recipe_scores_mathtool_through_a_serverless_endpoint(tmp_path):
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    proc = subprocess.run([sys.executable, "-m", "recipes.grpo_multitask", "tasks=MathTool",
                           "reward.serverless=true", "reward.tasks=MathTool", f"logdir={tmp_path}", "total_steps=1",
                           "batch_groups=2", "rollout.group_size=2", "rollout.max_concurrency=4", "eval_episodes=1",
                           "actor_mode=inprocess"], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    acc = EventAccumulator(str(next(p for p in tmp_path.iterdir() if p.is_dir())))
    acc.Reload()
    assert acc.Scalars("rollout/scoring/scored")[-1].value >= 4
    assert acc.Scalars("system/reward_endpoint/spawned")[-1].value >= 1
