"""One measured figure per fault, and the summary line that lists them all.

A figure's value is a count (``env_exc_lost=0``), a ratio (``sandbox_contained=98/98``), ``fail(why)`` when the
fault could not be measured because the run it needs ended early, or ``n/a(why)`` when this checkout or machine
lacks what the fault needs. ``ok`` says whether the value is the one a fault-tolerant system gives. A figure's
detail says how the run it measured went (:func:`ended`, :func:`steps_done`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollart.faults.harness import Outcome


@dataclass
class Figure:
    name: str
    """The key on the summary line, e.g. ``env_exc_lost``."""
    value: str
    """What was measured (see the module docstring)."""
    ok: bool
    """The value a fault-tolerant system gives (``n/a`` counts as not ok: nothing was shown)."""
    detail: str = ""
    """One line: what was injected and what was counted."""
    seconds: float = 0.0
    """Wall time of the fault's run(s)."""
    extra: dict = field(default_factory=dict)
    """The raw counts behind the value (for tests and --json)."""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL" if not self.value.startswith("n/a") else "n/a "
        return f"{mark} {self.name}={self.value}  [{self.seconds:.0f} s] {self.detail}"


def slug(text: str, limit: int = 60) -> str:
    """A reason fit for ``fail(...)`` / ``n/a(...)`` on the summary line: no spaces, no parentheses, short."""
    text = re.sub(r"[\s()=]+", "-", text.strip()).strip("-")
    return text[:limit].rstrip("-") or "unknown"


def failed(name: str, why: str, detail: str = "", seconds: float = 0.0) -> Figure:
    return Figure(name, f"fail({slug(why)})", False, detail or why, seconds)


def not_available(name: str, why: str, seconds: float = 0.0) -> Figure:
    return Figure(name, f"n/a({slug(why)})", False, why, seconds)


def summary(figures: list[Figure]) -> str:
    """The last line: ``name=value`` for every figure, in the order measured."""
    return " ".join(f"{f.name}={f.value}" for f in figures)


def ended(outcome: Outcome) -> str:
    """How a run that did not complete ended: its error, or that it ended early."""
    return outcome.error or "the run ended early"


def steps_done(outcome: Outcome, total: int) -> str:
    """``3/6 steps``: how far a run got."""
    return f"{outcome.steps}/{total} steps"
