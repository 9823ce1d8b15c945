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
    test_speedup: tuple[float, ...] = (1.0, 0.45)
    """Profiled speed-up of a test run on 1, 2, ... cores over one core (ARL-Tangram profiles each action
    type in advance). A test run whose suite splits over several cores (TaskSpec.step_action) may get up to
    min(its suite's cap, len(test_speedup), the cores) cores, the scheduler choosing how many. The default
    is what ``tools/bench/actions_real.py --profile`` measured for the 22 built-in SWE hidden suites split
    per test file on a shared 2-core machine: 0.45 (each pytest process pays its ~0.2 s start-up for tests of
    milliseconds, so a split doubles the CPU), which keeps them on one core; give your suites' curve."""
    service_memory_mb: float = 0.0
    """Device memory budget of the GPU-service manager (model-based rewards, reward.judges): services beyond
    it are evicted least recently used first and restored from their disk copy when called again (0: room
    for every service at once)."""
    test_t_ori_s: float = 1.0
    """A single-core test run's duration (s) assumed until the run has measured its own."""

    def __post_init__(self) -> None:
        if self.step_cores < 1:
            raise ConfigError(f"actions.step_cores={self.step_cores} must be >= 1")
        self.test_speedup = tuple(float(x) for x in self.test_speedup)
        if not self.test_speedup or self.test_speedup[0] != 1.0 or any(
                not 0 < x <= m + 1 for m, x in enumerate(self.test_speedup)):
            raise ConfigError(f"actions.test_speedup={self.test_speedup}: speed-ups on 1, 2, ... cores, the "
                              "first 1.0 and the m-th in (0, m]")
        if self.service_memory_mb < 0:
            raise ConfigError(f"actions.service_memory_mb={self.service_memory_mb} must be >= 0 (0: no limit)")
        if not self.test_t_ori_s > 0:
            raise ConfigError(f"actions.test_t_ori_s={self.test_t_ori_s} must be > 0")
        if self.reward_calls_per_period < 0 or not self.reward_period_s > 0:
            raise ConfigError("actions.reward_calls_per_period must be >= 0 and actions.reward_period_s > 0")
        if self.enabled and self.step_cores > len(self.usable_cores()):
            raise ConfigError(f"actions.step_cores={self.step_cores} but only {len(self.usable_cores())} cores "
                              f"are given (actions.cores={self.cores or 'all'})")

    def usable_cores(self) -> tuple[int, ...]:
        """``cores``, or every core this process may run on."""
        return tuple(self.cores) or tuple(sorted(os.sched_getaffinity(0)))
