"""A compact one-line progress bar for training loops (no dependency; redraws in place on a TTY)."""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _fmt_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


class ProgressBar:
    """``[######....] 12/200 6% 0.61s/step eta 1:54 | reward 0.53 success 0.81``.

    On a terminal the line is redrawn in place; otherwise (CI logs, files) one line is printed every
    ``every`` steps and at the end, so logs stay readable. A resumed run passes ``start_step`` (the step it
    resumed at): s/step, ETA and elapsed then count only the steps this process ran.
    """

    def __init__(self, total: int, width: int = 20, stream: TextIO | None = None, every: int = 10,
                 prefix: str = "train", start_step: int = 0):
        if total <= 0:
            raise ValueError(f"ProgressBar total must be positive, got {total}")
        if not 0 <= start_step <= total:
            raise ValueError(f"ProgressBar start_step must be in [0, total={total}], got {start_step}")
        self.total, self.width, self.every, self.prefix = total, width, every, prefix
        self.start_step = start_step
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.last_line = ""

    def render(self, step: int, elapsed: float, **fields: Any) -> str:
        frac = min(step / self.total, 1.0)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        done_here = step - self.start_step
        rate = elapsed / done_here if done_here > 0 else 0.0
        eta = rate * (self.total - step)
        extra = " ".join(f"{k} {_fmt_value(v)}" for k, v in fields.items())
        line = (f"{self.prefix} [{bar}] {step}/{self.total} {frac:4.0%} {rate:.2f}s/step "
                f"eta {_fmt_duration(eta)} elapsed {_fmt_duration(elapsed)}")
        return line + (f" | {extra}" if extra else "")

    def update(self, step: int, **fields: Any) -> str:
        """Show progress after ``step`` steps with extra ``key value`` fields; returns the line."""
        self.last_line = self.render(step, time.monotonic() - self.start, **fields)
        if self.tty:
            self.stream.write("\r\x1b[K" + self.last_line)
            self.stream.flush()
        elif step % self.every == 0 or step >= self.total or step == 1:
            self.stream.write(self.last_line + "\n")
            self.stream.flush()
        return self.last_line

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
