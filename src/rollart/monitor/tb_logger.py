"""Tensorboard logging with fixed tag namespaces (CleanRL style) and the resolved config at start.

Namespaces: ``charts/`` (headline curves: success, reward, version, tokens/s), ``losses/`` (loss terms,
grad norm, clip fraction, KL), ``rollout/`` (per-task reward/success, staleness, aborted/evicted
trajectories with reasons), ``system/`` (step-time breakdown: rollout, reward, get_batch wait, train,
weight push/pull), ``eval/`` (held-out evaluation), ``mismatch/`` (train/inference log-prob mismatch on
tokens of the trainer's own version: rollart.trainer.mismatch).

A resumed run passes ``purge_step`` = the first step it will log: tensorboard then drops what the interrupted
run logged from that step on (it was lost with the process), so no step appears twice.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

NAMESPACES = ("charts", "losses", "rollout", "system", "eval", "mismatch")


class MetricsLogger:
    """Writes real tensorboard event files under ``logdir`` via torch's SummaryWriter."""

    def __init__(self, logdir: str | Path, config: Any = None, flush_secs: int = 10, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.flush_secs = flush_secs
        self.writer = SummaryWriter(log_dir=str(self.logdir), flush_secs=flush_secs, purge_step=purge_step)
        if config is not None:
            self.log_config(config, step=purge_step or 0)

    def rewind(self, step: int) -> None:
        """Continue from ``step + 1``, dropping what was logged past ``step`` (a resumed run, or a trainer that
        went back to its checkpoint): no step appears twice."""
        from torch.utils.tensorboard import SummaryWriter

        self.writer.close()
        self.writer = SummaryWriter(log_dir=str(self.logdir), flush_secs=self.flush_secs, purge_step=step + 1)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Scalars; every key must start with one of NAMESPACES (e.g. ``losses/policy``)."""
        for key, value in metrics.items():
            ns = key.split("/", 1)[0]
            if ns not in NAMESPACES or "/" not in key:
                raise ValueError(f"metric {key!r} has no namespace; name it '<ns>/{key}' with ns in {NAMESPACES}")
            if isinstance(value, bool):
                value = float(value)
            if not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__}; "
                                "use histogram() for arrays and log_text() for text")
            self.writer.add_scalar(key, float(value), step)

    def histogram(self, tag: str, values: Iterable[float], step: int) -> None:
        """A histogram (e.g. ``rollout/staleness`` of per-token or per-trajectory version lag)."""
        arr = np.asarray(list(values), dtype=np.float64)
        if arr.size == 0:
            return
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"histogram {tag!r} has non-finite values")
        # integer-valued data (staleness) gets one bin per integer so counts read off directly
        if np.all(arr == np.round(arr)) and arr.max() - arr.min() <= 64:
            bins = np.arange(arr.min() - 0.5, arr.max() + 1.5)
            self.writer.add_histogram(tag, arr, step, bins=bins)
        else:
            self.writer.add_histogram(tag, arr, step)

    def log_counts(self, prefix: str, counts: Mapping[str, int], step: int) -> None:
        """One scalar per reason, e.g. ``log_counts("rollout/aborted", {"stale": 3, "env_error": 1}, step)``."""
        self.log({f"{prefix}/{reason}": n for reason, n in counts.items()}, step)

    def log_text(self, tag: str, text: str, step: int = 0) -> None:
        self.writer.add_text(tag, text, step)

    def log_config(self, config: Any, step: int = 0) -> str:
        """Record the resolved config: a text summary in tensorboard (at ``step``) and ``config.json`` next to
        the events."""
        if dataclasses.is_dataclass(config):
            from rollart.config import describe
            text, data = describe(config), dataclasses.asdict(config)
        else:
            data = dict(config)
            text = "\n".join(f"  {k} = {v!r}" for k, v in data.items())
        (self.logdir / "config.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
        # four-space indent renders as a code block in tensorboard's markdown
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), step)
        return text

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
