"""ActionsConfig: ARL-Tangram action scheduling in a training run (``actions.*`` on a recipe's command line)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from rollart.config import ConfigError


@dataclass
class ActionsConfig:
    """When enabled, env steps (with the sandbox commands and test runs they start) and reward calls of the
    run are actions submitted to one :class:`rollart.actions.runtime.ActionScheduler`."""

    enabled: bool = False
    """Schedule env steps and reward calls as actions (CPU cores granted and pinned; API quota)."""
    cores: tuple[int, ...] = ()
    """Cores the CPU manager hands to env steps (empty: every core this process may run on)."""
    step_cores: int = 1
    """Cores one env step holds while it runs; the processes it starts are pinned to them."""
    reward_calls_per_period: int = 0
    """API quota of the reward endpoint: at most this many calls started per ``reward_period_s`` (0: only a
    concurrency cap of reward.max_concurrency)."""
    reward_period_s: float = 1.0
    """The quota's sliding window in seconds."""

    def __post_init__(self) -> None:
        if self.step_cores < 1:
            raise ConfigError(f"actions.step_cores={self.step_cores} must be >= 1")
        if self.reward_calls_per_period < 0 or not self.reward_period_s > 0:
            raise ConfigError("actions.reward_calls_per_period must be >= 0 and actions.reward_period_s > 0")
        if self.enabled and self.step_cores > len(self.usable_cores()):
            raise ConfigError(f"actions.step_cores={self.step_cores} but only {len(self.usable_cores())} cores "
                              f"are given (actions.cores={self.cores or 'all'})")

    def usable_cores(self) -> tuple[int, ...]:
        """``cores``, or every core this process may run on."""
        return tuple(self.cores) or tuple(sorted(os.sched_getaffinity(0)))
