"""A wrapper that makes any env slow, heavy-tailed, failing or hanging — for benchmarks and fault tests;
``TaskSpec.faults`` wraps every env of a task in it (the env host applies it).

Per call to ``step`` (and ``reset`` when ``on_reset``): sleep ``max(0, N(mean, std))`` seconds; with
probability ``straggler_prob`` multiply that delay by a Pareto(``straggler_alpha``) factor scaled by
``straggler_scale`` (a heavy tail); with probability ``fail_prob`` raise :class:`InjectedEnvError`;
with probability ``hang_prob`` block for ``hang_seconds``; with probability ``exit_prob`` end the whole
process with ``os._exit`` (an env that dies and takes its host down, like a segfault). The wrapper draws from its own RNG
(``fault_seed``), so envs of one GRPO group see the same task but different latencies. Every injected
delay is added to ``info["injected_delay_total"]`` so benchmarks can compute the ideal critical path.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np


class InjectedEnvError(RuntimeError):
    """A failure injected on purpose by :class:`InjectFaults`."""


@dataclass
class FaultConfig:
    mean: float = 0.0
    """Mean injected delay per call, seconds."""
    std: float = 0.0
    """Standard deviation of the Gaussian delay (the sample is clipped at 0)."""
    straggler_prob: float = 0.0
    """Probability that a call is a straggler (delay multiplied by a heavy-tailed factor)."""
    straggler_scale: float = 5.0
    """Minimum straggler factor (Pareto scale); the factor is scale * Pareto(alpha) >= scale."""
    straggler_alpha: float = 2.0
    """Pareto tail index of the straggler factor (smaller = heavier tail)."""
    fail_prob: float = 0.0
    """Probability that a call raises InjectedEnvError."""
    hang_prob: float = 0.0
    """Probability that a call blocks for hang_seconds (longer than any sane timeout)."""
    hang_seconds: float = 3600.0
    """How long a hang lasts."""
    exit_prob: float = 0.0
    """Probability that a call kills the hosting process (os._exit(70)): an env that dies."""
    on_reset: bool = False
    """Also inject into reset (delay, failure, hang)."""
    fault_seed: int | None = None
    """Seed of the wrapper's own RNG (None: fresh entropy)."""

    def __post_init__(self) -> None:
        if self.mean < 0 or self.std < 0 or self.hang_seconds < 0:
            raise ValueError("mean, std and hang_seconds must be >= 0")
        for name in ("straggler_prob", "fail_prob", "hang_prob", "exit_prob"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p}")
        if self.straggler_scale < 1 or self.straggler_alpha <= 0:
            raise ValueError("straggler_scale must be >= 1 and straggler_alpha > 0")


class InjectFaults(gym.Wrapper):
    """See module docstring. ``InjectFaults(env, FaultConfig(mean=0.05, std=0.01))`` or kwargs."""

    def __init__(self, env: gym.Env, config: FaultConfig | None = None, **kwargs):
        super().__init__(env)
        self.config = config if config is not None else FaultConfig(**kwargs)
        self.rng = np.random.default_rng(self.config.fault_seed)
        self.delay_total = 0.0
        self.calls = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.delay_total = 0.0
        if self.config.on_reset:
            self._inject("reset")
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "injected_delay_total": self.delay_total}

    def step(self, action):
        self._inject("step")
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "injected_delay_total": self.delay_total}

    def sample_delay(self) -> float:
        c = self.config
        delay = max(0.0, float(self.rng.normal(c.mean, c.std))) if c.std > 0 else c.mean
        if c.straggler_prob and self.rng.random() < c.straggler_prob:
            delay *= c.straggler_scale * (1.0 + float(self.rng.pareto(c.straggler_alpha)))
        return delay

    def _inject(self, where: str) -> None:
        c = self.config
        self.calls += 1
        delay = self.sample_delay()
        fail = c.fail_prob and self.rng.random() < c.fail_prob
        hang = c.hang_prob and self.rng.random() < c.hang_prob
        if c.exit_prob and self.rng.random() < c.exit_prob:
            os._exit(70)
        if delay > 0:
            time.sleep(delay)
            self.delay_total += delay
        if fail:
            raise InjectedEnvError(f"injected failure in {where} (call {self.calls})")
        if hang:
            time.sleep(c.hang_seconds)

    def describe(self) -> dict:
        return asdict(self.config)
