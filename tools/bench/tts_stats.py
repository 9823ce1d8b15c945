"""Time to target over seeds, with runs censored at their budget: the statistics of tools/bench/time_to_score.py
(no torch, no actors: what its test checks)."""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass
class TimeToTarget:
    """One run's time to target: ``seconds`` reached, or censored at ``budget_s`` (``seconds`` None)."""
    seconds: Optional[float]
    budget_s: float

    @property
    def censored(self) -> bool:
        return self.seconds is None

    @property
    def value(self) -> float:
        """What the run shows: its time to target, or the budget it ran out (a lower bound)."""
        return self.budget_s if self.seconds is None else self.seconds


def time_to_target(evals: list[tuple[int, float]], elapsed_at: dict[int, float], target: float, consecutive: int,
                   budget_s: float) -> TimeToTarget:
    """The training time of the step whose evaluation completed ``consecutive`` evaluations in a row >= target
    (``evals``: (step, greedy success) in order; ``elapsed_at``: step -> training seconds at that step). A run
    that got there only past the budget counts as censored, as one that never got there."""
    if consecutive < 1:
        raise ValueError(f"consecutive={consecutive}: need >= 1 evaluation in a row")
    run = 0
    for step, success in evals:
        run = run + 1 if success >= target else 0
        if run >= consecutive and step in elapsed_at:
            seconds = elapsed_at[step]
            return TimeToTarget(seconds if seconds <= budget_s else None, budget_s)
    return TimeToTarget(None, budget_s)


@dataclasses.dataclass
class Summary:
    median: float
    median_censored: bool
    """The median falls on (or averages in) a censored run: the true median is >= ``median``."""
    low: float
    high: float
    high_censored: bool
    censored: int
    runs: int


def summarize(times: list[TimeToTarget]) -> Summary:
    """Median and range of times to target; censored runs sort after every reached one (they are at least their
    budget, and no reached time exceeds its budget) and enter with their budget."""
    if not times:
        raise ValueError("no runs to summarize")
    ordered = sorted(times, key=lambda t: (t.censored, t.value))
    n = len(ordered)
    middle = ordered[(n - 1) // 2: n // 2 + 1]
    return Summary(median=sum(t.value for t in middle) / len(middle),
                   median_censored=any(t.censored for t in middle),
                   low=ordered[0].value, high=ordered[-1].value, high_censored=ordered[-1].censored,
                   censored=sum(t.censored for t in times), runs=n)


def tts_ratio(baseline: Summary, rollart: Summary) -> tuple[float, str]:
    """Median time to target of the baseline ÷ rollart's (> 1: rollart is faster), and what kind of figure it
    is: ``exact`` (both medians reached), ``lower`` (only the baseline's censored: the ratio is at least this),
    ``upper`` (only rollart's censored: at most this), ``none`` (both censored: it says nothing, nan)."""
    if baseline.median_censored and rollart.median_censored:
        return float("nan"), "none"
    ratio = baseline.median / rollart.median
    if baseline.median_censored:
        return ratio, "lower"
    if rollart.median_censored:
        return ratio, "upper"
    return ratio, "exact"


def format_summary(s: Summary) -> str:
    ge = lambda c: ">=" if c else ""  # noqa: E731
    return (f"median {ge(s.median_censored)}{s.median:.0f} s, "
            f"range {s.low:.0f} to {ge(s.high_censored)}{s.high:.0f} s, "
            f"censored {s.censored}/{s.runs}")


def run_order(modes: list[str], seed_index: int) -> list[str]:
    """Seed s runs every mode, starting at mode s (rotated), so no mode always runs first or last."""
    k = seed_index % len(modes)
    return modes[k:] + modes[:k]
