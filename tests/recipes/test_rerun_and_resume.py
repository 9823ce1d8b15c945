"""Covers re-running a recipe in the same run folder: without --resume it warns, with --resume it continues."""
import asyncio
import logging

from rollart.config import apply_overrides

from recipes.grpo_frozenlake import TASK, default_config
from rollart.pipeline import Coordinator

TINY = ["batch_groups=1", "rollout.group_size=2", "rollout.max_concurrency=4", "eval_episodes=1", "eval_every=0",
        "checkpoint_every=1", "actor_mode=inprocess", "quiet=true",
        "warmup_steps=0"]


def run(tmp_path, *overrides):
    cfg = apply_overrides(default_config(), [f"logdir={tmp_path}", *TINY, *overrides])
    return asyncio.run(Coordinator(cfg, [TASK]).run())


def test_rerun_warns_and_resume_continues(tmp_path, caplog):
    first = run(tmp_path, "total_steps=1")
    assert first.version == 1 and (tmp_path / "grpo_frozenlake" / "checkpoints" / "step_00000001").is_dir()
    with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
        again = run(tmp_path, "total_steps=1")
    assert again.version == 1  # started fresh, as asked ...
    assert "holds an earlier run's checkpoint (step_00000001)" in caplog.text and "--resume" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rollart.pipeline"):
        resumed = run(tmp_path, "total_steps=3", "--resume=true")
    assert "resumed from" in caplog.text
    assert (resumed.steps, resumed.version) == (2, 3)  # steps 2 and 3 on top of the checkpoint of step 1
