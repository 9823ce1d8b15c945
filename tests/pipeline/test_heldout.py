"""Held-out evaluation: disjointness from training is enforced; it runs in the background of an async run."""
import asyncio
import dataclasses

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import envs  # noqa: F401
from rollart.config import ConfigError
from rollart.pipeline import Coordinator
from rollart.pipeline.heldout import check_disjoint, env_instances
from rollart.rollout.env_manager import TaskSpec
from run_configs import config

TRAIN = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0",
                 env_kwargs={"invalid_hint": False, "random_start": True}, max_new_tokens=1, max_turns=6)
OTHER_MAP = ["SFFF", "FFFH", "HFFF", "FHFG"]
HELDOUT = dataclasses.replace(TRAIN, name="FrozenLake-heldout", env_kwargs={**TRAIN.env_kwargs, "desc": OTHER_MAP})


def test_a_training_task_as_heldout_is_one_clear_line():
    with pytest.raises(ConfigError, match="held-out task 'again' plays the training task 'FrozenLake'") as e:
        check_disjoint([TRAIN], [dataclasses.replace(TRAIN, name="again")])
    assert "\n" not in str(e.value)


def test_shared_instances_are_refused_other_maps_pass():
    # the default map from its S cell only: one of the 11 start cells training samples
    from_s = dataclasses.replace(TRAIN, name="from-S", env_kwargs={"invalid_hint": False})
    with pytest.raises(ConfigError, match="shares 1 of its 1 instances with training task 'FrozenLake'"):
        check_disjoint([TRAIN], [from_s])
    check_disjoint([TRAIN], [HELDOUT])  # another map: disjoint
    assert len(env_instances(TRAIN)) == 11 and env_instances(HELDOUT).isdisjoint(env_instances(TRAIN))
    random_maps = dataclasses.replace(TRAIN, name="random", env_kwargs={"random_map": True})
    assert env_instances(random_maps) is None
    check_disjoint([TRAIN], [random_maps])


def test_heldout_eval_runs_in_the_background_of_async_training(tmp_path, tiny_model):
    # held-out env steps are slow (0.6 s): an evaluation spans several train steps, which must go on meanwhile
    slow = dataclasses.replace(HELDOUT, faults={"mean": 0.6, "std": 0.0})
    cfg = config(tmp_path, tiny_model, mode="async", alpha=1, total_steps=5, eval_every=1, eval_at_end=False,
                 heldout_episodes=3)
    coordinator = Coordinator(cfg, [TRAIN], heldout_tasks=[slow])
    result = asyncio.run(coordinator.run())
    assert result.steps == 5
    heldout = coordinator.parts.heldout
    # every train step triggered one; the ones that found the previous evaluation still running were skipped:
    # train steps finished while it played
    assert heldout.started >= 1 and heldout.skipped >= 1 and heldout.started + heldout.skipped == 5
    step, metrics = heldout.results[0]
    assert metrics["eval/episodes"] == 3 and 0.0 <= metrics["eval/success"] <= 1.0
    assert metrics["eval/policy_version"] >= step - 1 - cfg.alpha
    acc = EventAccumulator(str(tmp_path / "t"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("eval/success", "eval/reward_mean", "eval/episodes", "eval/policy_version",
                "eval/success/FrozenLake-heldout", "mismatch/tokens"):
        assert tag in tags, tags
    assert [e.value for e in acc.Scalars("eval/episodes")] == [3.0] * heldout.finished
