"""TensorboardSink: a run's metrics as tensorboard event files (torch's SummaryWriter), the default logger.

A rewind re-opens the writer with ``purge_step`` = the first step to come: tensorboard then drops what was
logged from that step on, so no step appears twice.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np


class TensorboardSink:
    def __init__(self, logdir: Path, flush_secs: int = 10, purge_step: Optional[int] = None):
        from torch.utils.tensorboard import SummaryWriter

        self.logdir, self.flush_secs = logdir, flush_secs
        self.writer = SummaryWriter(log_dir=str(logdir), flush_secs=flush_secs, purge_step=purge_step)

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def histogram(self, tag: str, values: np.ndarray, bins: Optional[np.ndarray], step: int) -> None:
        self.writer.add_histogram(tag, values, step, bins="tensorflow" if bins is None else bins)

    def text(self, tag: str, text: str, step: int) -> None:
        self.writer.add_text(tag, text, step)

    def config(self, data: dict, text: str, step: int) -> None:
        # four-space indent renders as a code block in tensorboard's markdown
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), step)

    def rewind(self, step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer.close()
        self.writer = SummaryWriter(log_dir=str(self.logdir), flush_secs=self.flush_secs, purge_step=step + 1)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()
