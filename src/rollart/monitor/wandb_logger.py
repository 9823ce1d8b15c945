"""WandbSink: a run's metrics sent to Weights & Biases through the ``wandb`` client (``logger=wandb``).

The wandb run is named after the run folder, keeps its files under ``<run folder>/wandb`` and gets the resolved
config as its config. The project is ``$WANDB_PROJECT`` (default ``rollart``); ``WANDB_ENTITY``,
``WANDB_MODE=offline`` (nothing leaves the machine; ``wandb sync`` uploads later) and the other ``WANDB_*``
settings are wandb's own.

Each value carries the run's step as the ``step`` metric, which every chart uses as its x-axis: wandb's own
step only grows, while a run logs a background held-out evaluation at the step it started from. A resumed run
continues the same wandb run (its id is kept in ``<run folder>/wandb_run_id``); what the interrupted run
logged past its checkpoint stays there, unlike tensorboard, which drops it.
"""
from __future__ import annotations

import html
import os
import secrets
from pathlib import Path
from typing import Any, Optional

import numpy as np

from rollart.config import ConfigError

STEP = "step"
"""The x-axis metric every logged value carries."""
WANDB_HINT = "logger=wandb needs the wandb client: pip install wandb"


class WandbSink:
    def __init__(self, logdir: Path):
        try:
            import wandb
        except ImportError:
            raise ConfigError(WANDB_HINT) from None
        self.wandb, self.logdir = wandb, logdir
        self.run: Any = None

    def _start(self, config: Optional[dict] = None) -> Any:
        """The wandb run, started at the first value (the config, in a run) so that it starts with the config."""
        id_file = self.logdir / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)
        id_file.write_text(run_id + "\n")
        self.run = self.wandb.init(project=os.environ.get("WANDB_PROJECT") or "rollart", name=self.logdir.name,
                                   dir=str(self.logdir), id=run_id, resume="allow", config=config,
                                   reinit="create_new")  # never hand back another run open in this process
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)
        return self.run

    def _log(self, row: dict[str, Any], step: int) -> None:
        (self.run or self._start()).log({**row, STEP: step})

    def scalars(self, values: dict[str, float], step: int) -> None:
        self._log(values, step)

    def histogram(self, tag: str, values: np.ndarray, bins: Optional[np.ndarray], step: int) -> None:
        hist = (self.wandb.Histogram(values.tolist()) if bins is None
                else self.wandb.Histogram(np_histogram=np.histogram(values, bins=bins)))
        self._log({tag: hist}, step)

    def text(self, tag: str, text: str, step: int) -> None:
        self._log({tag: self.wandb.Html(f"<pre>{html.escape(text)}</pre>", data_is_not_path=True)}, step)

    def config(self, data: dict, text: str, step: int) -> None:
        if self.run is None:
            self._start(config=data)
        else:
            self.run.config.update(data, allow_val_change=True)
        self.text("config", text, step)

    def rewind(self, step: int) -> None:
        """Nothing to drop: wandb keeps what it was sent (see the module docstring)."""

    def flush(self) -> None:
        """wandb streams what it is given; nothing is held here."""

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
