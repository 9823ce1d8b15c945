"""logger=wandb: in wandb's offline mode a logger session's scalars, histogram, text and config reach the run's
.wandb file (read back with wandb's own reader) under the tags and steps tensorboard got; a resumed session
continues the same wandb run; an unknown logger or a missing wandb client is one line."""
import json
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rollart.config import ConfigError, apply_overrides
from rollart.monitor import MetricsLogger, check_loggers
from rollart.pipeline.config import PipelineConfig
from tests.monitor.logged_config import LoggedConfig


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """wandb offline, quiet, with its settings and caches under tmp_path: nothing leaves the machine."""
    pytest.importorskip("wandb", reason="wandb is not installed (pip install wandb, or the test extra)")
    for key, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_PROJECT": "rollart-test",
                       "WANDB_ERROR_REPORTING": "false", "WANDB_CONFIG_DIR": str(tmp_path / "wb_config"),
                       "WANDB_CACHE_DIR": str(tmp_path / "wb_cache"), "WANDB_DATA_DIR": str(tmp_path / "wb_data")
                       }.items():
        monkeypatch.setenv(key, value)
    return tmp_path / "run"


def _wandb_records(run_dir) -> list[list[dict]]:
    """Each offline run's records, in order, as wandb's transaction-log reader prints them."""
    files = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert files, f"no offline .wandb file under {run_dir}/wandb"
    out = []
    for f in files:
        text = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(f)],
                              capture_output=True, text=True, check=True, timeout=120).stdout
        out.append([json.loads(line) for line in text.splitlines() if line.startswith("{")])
    return out


def _history(records: list[dict]) -> list[dict]:
    return [r["history"]["item"] for r in records if r["type"] == "history"]


def _wandb_scalars(rows: list[dict]) -> dict[tuple[str, int], float]:
    """(tag, rollart step) -> value of every namespaced scalar (media fields carry a dot: ``tag._type``)."""
    return {(k, row["step"]): v for row in rows for k, v in row.items()
            if "/" in k and "." not in k and isinstance(v, (int, float))}


def _tensorboard_scalars(logdir) -> dict[tuple[str, int], float]:
    ea = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    ea.Reload()
    return {(tag, e.step): e.value for tag in ea.Tags()["scalars"] for e in ea.Scalars(tag)}


def test_wandb_offline_gets_what_tensorboard_gets(offline):
    with MetricsLogger(offline, loggers=("tensorboard", "wandb")) as logger:
        logger.log_config(LoggedConfig(), step=0)
        for step in range(1, 4):
            logger.log({"losses/policy": 0.1 * step, "charts/version": step, "system/train_s": 0.25}, step)
        logger.log_counts("rollout/evicted", {"stale": 2}, step=3)
        logger.histogram("rollout/staleness", [1, 0, 2, 2], step=3)
        logger.log({"eval/success": 0.5}, step=2)        # a held-out evaluation that started at step 2 ends late
        logger.log_text("rollout/hw_affinity", "math -> H800", step=3)
    tensorboard = _tensorboard_scalars(offline)
    assert len(tensorboard) == 11 and tensorboard[("eval/success", 2)] == pytest.approx(0.5)

    [records] = _wandb_records(offline)
    rows = _history(records)
    wandb_scalars = _wandb_scalars(rows)
    assert wandb_scalars.keys() == tensorboard.keys()
    for key, value in tensorboard.items():
        assert wandb_scalars[key] == pytest.approx(value, rel=1e-6), key  # tensorboard stores float32
    [hist] = [r for r in rows if r.get("rollout/staleness._type") == "histogram"]
    assert hist["step"] == 3 and hist["rollout/staleness.values"] == [1, 1, 2]  # one bin per lag 0, 1, 2
    texts = {(k.removesuffix("._type"), r["step"]) for r in rows for k, v in r.items() if v == "html-file"}
    assert texts == {("config", 0), ("rollout/hw_affinity", 3)}
    [run] = [r["run"] for r in records if r["type"] == "run"]
    assert run["project"] == "rollart-test" and run["display_name"] == offline.name
    config = run["config"]["update"]
    assert config["total_steps"] == 5 and config["train"] == {"lr": 1e-3}
    assert json.loads((offline / "config.json").read_text()) == {"total_steps": 5, "train": {"lr": 1e-3}}
    step_axis = [r["metric"] for r in records if r["type"] == "metric" and r["metric"].get("glob_name") == "*"]
    assert step_axis and step_axis[0]["step_metric"] == "step"


def test_resumed_session_continues_the_same_wandb_run(offline):
    for session in range(2):
        with MetricsLogger(offline, loggers=("wandb",)) as logger:
            if session:
                logger.rewind(1)
            logger.log({"charts/version": 1 + session}, step=1 + session)
    first, second = _wandb_records(offline)
    ids = [[r["run"]["run_id"] for r in records if r["type"] == "run"] for records in (first, second)]
    assert ids[0] == ids[1] and len(ids[0]) == 1
    assert _wandb_scalars(_history(second)) == {("charts/version", 2): 2}
    assert not list(offline.glob("events.out.tfevents*"))  # wandb alone: no tensorboard files


def test_command_line_names_both_loggers(offline):
    assert apply_overrides(PipelineConfig(), ["logger=tensorboard,wandb"]).logger == ("tensorboard", "wandb")


def test_logger_setting_is_checked_in_one_line(monkeypatch):
    for bad in [("mlflow",), (), ("tensorboard", "tensorboard")]:
        with pytest.raises(ConfigError, match="name one or more of tensorboard, wandb") as err:
            PipelineConfig(logger=bad)
        assert "\n" not in str(err.value)
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: the import fails
    for make in (lambda: check_loggers(["tensorboard", "wandb"]), lambda: PipelineConfig(logger=("wandb",)),
                 lambda: MetricsLogger("unused", loggers=("wandb",))):
        with pytest.raises(ConfigError) as err:
            make()
        assert str(err.value) == "logger=wandb needs the wandb client: pip install wandb"
