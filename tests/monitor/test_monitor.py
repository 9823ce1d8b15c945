"""Covers rollart.monitor: real tensorboard event files read back with EventAccumulator (scalars per
namespace, staleness histogram, config text), trajectory metrics and the progress line."""
import io
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rollart.monitor import MetricsLogger, ProgressBar, trajectory_metrics
from rollart.types import Trajectory
from rollart.versions import staleness_values
from tests.monitor.logged_config import LoggedConfig


def _traj(task, reward, success, versions, status="done", reason=""):
    n = len(versions)
    return Trajectory(trajectory_id=f"{task}{reward}{status}", group_id="g", task=task, token_ids=[1] * (n + 1),
                      loss_mask=[0] + [1] * n, logprobs=[0.0] * (n + 1), versions=[-1] + versions,
                      reward=reward, success=success, num_turns=2, status=status, reason=reason,
                      timings={"env_step": 0.5})


def _read(logdir):
    ea = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    ea.Reload()
    return ea


def test_scalars_histogram_and_config_are_readable(tmp_path):
    trajs = [_traj("FrozenLake", 1.0, True, [3, 4]), _traj("FrozenLake", 0.0, False, [4]),
             _traj("math", 0.5, True, [2, 4]), _traj("math", 0.0, False, [1], status="aborted", reason="stale")]
    with MetricsLogger(tmp_path, config=LoggedConfig()) as logger:
        for step in range(1, 4):
            logger.log({"losses/policy": 0.1 * step, "charts/version": step, "system/train_s": 0.25}, step)
        logger.log(trajectory_metrics(trajs, version=4), step=3)
        logger.histogram("rollout/staleness", staleness_values(trajs[:3], 4), step=3)
        logger.log_counts("rollout/evicted", {"stale": 2}, step=3)
    ea = _read(tmp_path)
    tags = ea.Tags()
    assert [e.value for e in ea.Scalars("losses/policy")] == pytest.approx([0.1, 0.2, 0.3])
    assert [e.step for e in ea.Scalars("charts/version")] == [1, 2, 3]
    assert ea.Scalars("rollout/success/FrozenLake")[0].value == pytest.approx(0.5)
    assert ea.Scalars("rollout/reward/math")[0].value == pytest.approx(0.5)  # aborted one left out
    assert ea.Scalars("rollout/aborted/stale")[0].value == 1
    assert ea.Scalars("rollout/evicted/stale")[0].value == 2
    assert ea.Scalars("charts/success")[0].value == pytest.approx(2 / 3)
    assert ea.Scalars("system/traj_env_step_s_mean")[0].value == pytest.approx(0.5)
    hist = ea.Histograms("rollout/staleness")[0].histogram_value
    assert hist.num == 3 and hist.min == 0 and hist.max == 2  # lags 1, 0, 2
    assert "config/text_summary" in tags["tensors"]
    text = ea.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "total_steps = 5" in text and "train.lr = 0.001" in text and "Learning rate." in text
    assert json.loads((tmp_path / "config.json").read_text())["train"]["lr"] == 1e-3


def test_logger_rejects_unnamespaced_and_non_numeric(tmp_path):
    with MetricsLogger(tmp_path) as logger:
        with pytest.raises(ValueError, match="no namespace"):
            logger.log({"reward": 1.0}, 0)
        with pytest.raises(ValueError, match="no namespace"):
            logger.log({"misc/reward": 1.0}, 0)
        with pytest.raises(TypeError, match="histogram"):
            logger.log({"charts/x": [1, 2]}, 0)


def test_progress_bar_lines():
    out = io.StringIO()
    bar = ProgressBar(total=20, stream=out, every=10, width=10)
    for step in range(1, 21):
        bar.update(step, reward=0.5, success=0.25)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # steps 1, 10, 20 on a non-terminal stream
    assert lines[-1].startswith("train [##########] 20/20 100%") and "reward 0.5 success 0.25" in lines[-1]
    assert "[#####.....] 10/20" in lines[1]
    with pytest.raises(ValueError, match="positive"):
        ProgressBar(0)
