"""actions.enabled=true in training runs: env steps and serverless reward calls of a real run go through the
action scheduler and its decisions reach tensorboard; grpo_swe and grpo_humaneval run with it on (slow)."""
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import envs  # noqa: F401
from rollart.actions.basic import max_in_window
from rollart.actions.config import ActionsConfig
from rollart.pipeline import Coordinator
from rollart.rewards.config import RewardConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig
from run_configs import config

ROOT = Path(__file__).resolve().parents[2]
MATH = TaskSpec(name="MathTool", env_id="rollart/MathTool-v0", max_new_tokens=8, max_turns=2)


def scalars(run_dir) -> dict[str, float]:
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_env_steps_and_reward_calls_of_a_run_are_scheduled_actions(tmp_path, tiny_model):
    cfg = config(tmp_path, tiny_model, total_steps=2, rollout=SchedulerConfig(group_size=2, max_concurrency=8),
                 eval_at_end=False, actions=ActionsConfig(enabled=True, reward_calls_per_period=8, reward_period_s=0.5),
                 reward=RewardConfig(serverless=True))
    coordinator = Coordinator(cfg, [MATH])
    result = asyncio.run(coordinator.run())
    assert result.steps == 2
    s = scalars(result.run_dir)
    steps, rewards = sum(s["system/actions/env_step/count"]), sum(s["system/actions/reward/count"])
    assert steps >= 2 * 2 * 2 and rewards >= 2 * 2 * 2  # every trained trajectory stepped and was scored
    assert all(v == 1 for v in s["system/actions/env_step/units_mean"])  # actions.step_cores cores granted
    assert "system/actions/env_step/queue_s_mean" in s and "system/actions/evictions" in s
    quota = coordinator.parts.actions.pools["api:reward"]
    assert max_in_window(quota.history, 0.5) <= 8  # the endpoint's quota held over the whole run


def run_recipe(module: str, tmp_path: Path, *overrides: str) -> tuple[dict, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", module, f"logdir={tmp_path}", "total_steps=1", "batch_groups=1",
                           "rollout.group_size=2", "rollout.max_concurrency=4", "eval_episodes=1", "actor_mode=inprocess",
                           "actions.enabled=true", *overrides], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return scalars(next(p for p in tmp_path.iterdir() if p.is_dir())), proc.stdout


@pytest.mark.slow
def test_grpo_swe_runs_its_test_runs_as_elastic_actions(tmp_path):
    s, out = run_recipe("recipes.grpo_swe", tmp_path, "env_max_turns=2", "max_new_tokens=16")
    assert sum(line.startswith("actions: ") for line in out.splitlines()) == 1  # how cores are enforced, once
    assert sum(s["system/actions/test_run/count"]) >= 2  # every episode ends in its hidden test run
    assert all(1 <= v <= 2 for v in s["system/actions/test_run/units_mean"])  # within the suites' 2-file cap
    assert all(v == 1 for v in s.get("system/actions/sandbox_command/units_mean", [1]))
    assert "system/actions/test_run/queue_s_mean" in s and "system/actions/evictions" in s


@pytest.mark.slow
def test_grpo_humaneval_scores_with_judges_restored_and_evicted_by_the_service_manager(tmp_path):
    # 3 judges of 3.5 MiB each in a 6 MiB budget: each trajectory's scoring restores and evicts
    from rollart.tools.make_tiny_model import make_tiny_model
    judges = ",".join(str(make_tiny_model(tmp_path / f"judge{i}", seed=100 + i)) for i in range(3))
    s, _ = run_recipe("recipes.grpo_humaneval", tmp_path, "max_new_tokens=16", f"reward.judges={judges}",
                      "actions.service_memory_mb=6")
    assert sum(s["system/actions/test_run/count"]) >= 2 and all(v == 1 for v in s["system/actions/test_run/units_mean"])
    assert sum(s["system/actions/reward_model/count"]) >= 2 * 3
    assert s["system/actions/service/restores"][-1] >= 3 and s["system/actions/service/evictions"][-1] >= 1
    assert max(s["system/actions/service/resident_mb"]) <= 6
