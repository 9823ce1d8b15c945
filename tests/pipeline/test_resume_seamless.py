"""Covers a seamless --resume in a real run: tensorboard steps continue without duplicates (read back from the
event files), the buffer's and the proxy's cumulative counters and the elapsed time carry over, and the
progress line's rate counts only the resumed segment."""
import asyncio
import io
import shutil

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rollart.monitor import ProgressBar
from rollart.pipeline import Coordinator

from recipes.grpo_frozenlake import TASK
from run_configs import recipe_config


def run(tmp_path, *overrides):
    cfg = recipe_config(tmp_path, "actor_mode=inprocess", "keep_checkpoints=0", *overrides)
    return asyncio.run(Coordinator(cfg, [TASK]).run())


def test_resume_continues_tensorboard_and_counters(tmp_path):
    first = run(tmp_path, "total_steps=3", "checkpoint_every=2")
    run_dir = tmp_path / "grpo_frozenlake"
    # as if killed after step 3 was logged but before its checkpoint: the newest checkpoint is step 2
    shutil.rmtree(run_dir / "checkpoints" / "step_00000003")
    resumed = run(tmp_path, "total_steps=5", "checkpoint_every=2", "--resume=true")
    assert [h["step"] for h in resumed.history] == [3, 4, 5]

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    steps = [e.step for e in events.Scalars("charts/version")]
    assert steps == [1, 2, 3, 4, 5]  # step 3 of the stopped run was purged, the resumed run's kept
    assert [e.value for e in events.Scalars("charts/version")] == [1.0, 2.0, 3.0, 4.0, 5.0]

    per_step = 2  # batch_groups x group_size
    assert first.buffer["trained"] == 3 * per_step
    assert resumed.buffer["trained"] == 5 * per_step  # 2 steps before the checkpoint + 3 after, not 3
    assert resumed.buffer["groups_trained"] == 5
    assert resumed.buffer["accepted"] == (resumed.buffer["trained"] + resumed.buffer["evicted"]
                                          + resumed.buffer["buffered"])

    before = first.history[1]  # step 2, what the checkpoint holds
    after = resumed.history[0]  # step 3 of the resumed run
    assert after["rollout/routing/requests"] > before["rollout/routing/requests"]
    assert after["system/elapsed_s"] > before["system/elapsed_s"]


def test_progress_rate_and_eta_count_only_the_resumed_segment():
    bar = ProgressBar(200, stream=io.StringIO(), start_step=100)
    line = bar.render(110, elapsed=40.0)  # 10 steps in 40 s since the resume
    assert "110/200" in line and "4.00s/step" in line and "eta 6:00" in line and "elapsed 0:40" in line
    assert "0.00s/step" in bar.render(100, elapsed=5.0)  # nothing done yet: no rate
    fresh = ProgressBar(200, stream=io.StringIO())
    assert "4.00s/step" in fresh.render(10, elapsed=40.0)
