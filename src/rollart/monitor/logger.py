"""MetricsLogger: a run's metrics under fixed tag namespaces (CleanRL style) and its resolved config at start,
written to each logger the run names (``logger=tensorboard``, the default; ``wandb``; or both,
``logger=tensorboard,wandb``) with the same tags and steps.

Namespaces: ``charts/`` (headline curves: success, reward, version, tokens/s), ``losses/`` (loss terms,
grad norm, clip fraction, KL), ``rollout/`` (per-task reward/success, staleness, aborted/evicted
trajectories with reasons), ``system/`` (step-time breakdown: rollout, reward, get_batch wait, train,
weight push/pull), ``eval/`` (held-out evaluation), ``mismatch/`` (train/inference log-prob mismatch on
tokens of the trainer's own version: rollart.trainer.mismatch).

A resumed run calls ``rewind(step)``: tensorboard then drops what the interrupted run logged past ``step`` (it
was lost with the process), so no step appears twice; wandb keeps what it was sent (``rollart.monitor.wandb_logger``).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol

import numpy as np

from rollart.config import ConfigError
from rollart.monitor.tb_logger import TensorboardSink
from rollart.monitor.wandb_logger import WANDB_HINT, WandbSink

NAMESPACES = ("charts", "losses", "rollout", "system", "eval", "mismatch")
LOGGERS = ("tensorboard", "wandb")
"""Where a run's metrics can go (``PipelineConfig.logger`` names one or more)."""


def check_loggers(loggers: Iterable[str]) -> None:
    """One ConfigError line for an unknown or repeated logger name, none at all, or wandb not installed."""
    names = list(loggers)
    unknown = [n for n in names if n not in LOGGERS]
    if unknown or not names or len(set(names)) < len(names):
        raise ConfigError(f"logger={','.join(names)!r}: name one or more of {', '.join(LOGGERS)}, each once "
                          "(e.g. logger=tensorboard,wandb)")
    if "wandb" in names and importlib.util.find_spec("wandb") is None:
        raise ConfigError(WANDB_HINT)


class Sink(Protocol):
    """One place metrics go; MetricsLogger has checked and shaped what it is given."""

    def scalars(self, values: dict[str, float], step: int) -> None: ...
    def histogram(self, tag: str, values: np.ndarray, bins: Optional[np.ndarray], step: int) -> None: ...
    def text(self, tag: str, text: str, step: int) -> None: ...
    def config(self, data: dict, text: str, step: int) -> None: ...
    def rewind(self, step: int) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def _open(name: str, logdir: Path, flush_secs: int, purge_step: Optional[int]) -> Sink:
    if name == "tensorboard":
        return TensorboardSink(logdir, flush_secs, purge_step)
    return WandbSink(logdir)


class MetricsLogger:
    """Checks and shapes metrics, then hands them to each of ``loggers`` (tensorboard event files under
    ``logdir`` via torch's SummaryWriter; a wandb run whose files sit under ``logdir/wandb``)."""

    def __init__(self, logdir: str | Path, config: Any = None, flush_secs: int = 10, purge_step: int | None = None,
                 loggers: Iterable[str] = ("tensorboard",)):
        check_loggers(loggers)
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.sinks: list[Sink] = [_open(name, self.logdir, flush_secs, purge_step) for name in loggers]
        if config is not None:
            self.log_config(config, step=purge_step or 0)

    def rewind(self, step: int) -> None:
        """Continue from ``step + 1`` (a resumed run, or a trainer that went back to its checkpoint): tensorboard
        drops what was logged past ``step``, so no step appears twice there."""
        for sink in self.sinks:
            sink.rewind(step)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Scalars; every key must start with one of NAMESPACES (e.g. ``losses/policy``)."""
        values = {}
        for key, value in metrics.items():
            ns = key.split("/", 1)[0]
            if ns not in NAMESPACES or "/" not in key:
                raise ValueError(f"metric {key!r} has no namespace; name it '<ns>/{key}' with ns in {NAMESPACES}")
            if isinstance(value, bool):
                value = float(value)
            if not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__}; "
                                "use histogram() for arrays and log_text() for text")
            values[key] = float(value)
        if values:
            for sink in self.sinks:
                sink.scalars(values, step)

    def histogram(self, tag: str, values: Iterable[float], step: int) -> None:
        """A histogram (e.g. ``rollout/staleness`` of per-token or per-trajectory version lag)."""
        arr = np.asarray(list(values), dtype=np.float64)
        if arr.size == 0:
            return
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"histogram {tag!r} has non-finite values")
        # integer-valued data (staleness) gets one bin per integer so counts read off directly
        bins = None
        if np.all(arr == np.round(arr)) and arr.max() - arr.min() <= 64:
            bins = np.arange(arr.min() - 0.5, arr.max() + 1.5)
        for sink in self.sinks:
            sink.histogram(tag, arr, bins, step)

    def log_counts(self, prefix: str, counts: Mapping[str, int], step: int) -> None:
        """One scalar per reason, e.g. ``log_counts("rollout/aborted", {"stale": 3, "env_error": 1}, step)``."""
        self.log({f"{prefix}/{reason}": n for reason, n in counts.items()}, step)

    def log_text(self, tag: str, text: str, step: int = 0) -> None:
        for sink in self.sinks:
            sink.text(tag, text, step)

    def log_config(self, config: Any, step: int = 0) -> str:
        """Record the resolved config: ``config.json`` in ``logdir``, the config of a wandb run, and a text
        summary under the tag ``config`` (at ``step``)."""
        if dataclasses.is_dataclass(config):
            from rollart.config import describe
            text, data = describe(config), dataclasses.asdict(config)
        else:
            data = dict(config)
            text = "\n".join(f"  {k} = {v!r}" for k, v in data.items())
        data = json.loads(json.dumps(data, default=str))  # plain JSON values, as every logger can store them
        (self.logdir / "config.json").write_text(json.dumps(data, indent=2) + "\n")
        for sink in self.sinks:
            sink.config(data, text, step)
        return text

    def flush(self) -> None:
        for sink in self.sinks:
            sink.flush()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
