"""Text games in the spirit of GEM-game: a multi-turn guess-the-number and a single-turn sort.

GuessNumber: a secret integer in [1, high]; each guess gets "higher" / "lower" feedback; reward 1
when guessed within the turn limit (a time-limit wrapper at registration). A wasted turn costs
``invalid_penalty`` (default 0), as an invalid move does in FrozenLake: an answer holding no number, or a
guess outside [1, high] or already ruled out by earlier feedback (below a "too low" guess or above a
"too high" one). Without it a model trained from scratch sees all-zero groups (it rarely answers with a
number at first) and, once it does, no signal for using the feedback until it finds the secret.
SortNumbers: one turn; the agent writes the given numbers in ascending order; reward 1 if exactly right.
"""
from __future__ import annotations

import re

import gymnasium as gym
import numpy as np

from envs.text_space import text_space
from rollart.rollout.env_protocol import EnvDefaults
from rollart.rewards.verifiers import exact_match

_INT = re.compile(r"-?\d+")


class GuessNumber(EnvDefaults, gym.Env):
    """Guess a secret number with higher/lower feedback (multi-turn)."""

    metadata = {"render_modes": ["ansi"]}
    system_prompt = "Guess the secret number. Answer with one number."
    max_new_tokens = 8

    def __init__(self, high: int = 100, invalid_penalty: float = 0.0, render_mode: str | None = None):
        if high < 2:
            raise ValueError(f"high must be >= 2, got {high}")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty must be >= 0, got {invalid_penalty}")
        self.high = high
        self.invalid_penalty = invalid_penalty
        self.render_mode = render_mode
        self.observation_space = text_space(128)
        self.action_space = text_space(32)
        self.secret, self.low_bound, self.high_bound = 1, 1, high

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(1, self.high + 1))
        self.low_bound, self.high_bound = 1, self.high
        return f"I picked a number from 1 to {self.high}. Your guess?", {"success": False}

    def step(self, action: str):
        found = _INT.search(action) if isinstance(action, str) else None
        if found is None:
            return "Answer with one number.", -self.invalid_penalty, False, False, {"success": False, "invalid": True}
        guess = int(found.group(0))
        if guess == self.secret:
            return "Correct!", 1.0, True, False, {"success": True}
        # a guess the range or earlier feedback already rules out wastes the turn like a non-answer
        ruled_out = not self.low_bound <= guess <= self.high_bound
        reward = -self.invalid_penalty if ruled_out else 0.0
        info = {"success": False, "ruled_out": ruled_out}
        if guess < self.secret:
            self.low_bound = max(self.low_bound, guess + 1)
            return f"{guess} is too low. Higher.", reward, False, False, info
        self.high_bound = min(self.high_bound, guess - 1)
        return f"{guess} is too high. Lower.", reward, False, False, info

    def render(self) -> str:
        return f"secret in [{self.low_bound}, {self.high_bound}]"

    def sample_action(self, rng: np.random.Generator) -> str:
        return str(int(rng.integers(1, self.high + 1)))

    def scripted_action(self, observation: str) -> str:
        """Binary search on the feedback seen so far."""
        return str((self.low_bound + self.high_bound) // 2)


class SortNumbers(EnvDefaults, gym.Env):
    """Write the given numbers in ascending order (single turn)."""

    metadata = {"render_modes": ["ansi"]}
    system_prompt = "Sort the numbers in ascending order. Answer with the numbers separated by spaces."
    max_new_tokens = 32

    def __init__(self, count: int = 5, high: int = 99, lenient: bool = False, render_mode: str | None = None):
        """``lenient``: any answer whose integers, in order, are the sorted numbers counts (a pretrained
        model's "The sorted numbers are 2, 5, 9." is right); otherwise the answer must be exactly "2 5 9"."""
        if count < 2:
            raise ValueError(f"count must be >= 2, got {count}")
        self.count, self.high, self.lenient = count, high, lenient
        self.render_mode = render_mode
        self.observation_space = text_space(256)
        self.action_space = text_space(256)
        self.numbers: list[int] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.numbers = [int(x) for x in self.np_random.integers(0, self.high + 1, size=self.count)]
        return "Sort: " + " ".join(map(str, self.numbers)), {"success": False}

    def step(self, action: str):
        want = " ".join(map(str, sorted(self.numbers)))
        text = action if isinstance(action, str) else ""
        if self.lenient:
            text = " ".join(re.findall(r"-?\d+", text))
        reward = exact_match(text, want)
        obs = "Correct." if reward else f"Wrong. The answer was {want}."
        return obs, reward, True, False, {"success": reward == 1.0}

    def render(self) -> str:
        return " ".join(map(str, self.numbers))

    def sample_action(self, rng: np.random.Generator) -> str:
        return " ".join(map(str, rng.permutation(self.numbers)))

    def scripted_action(self, observation: str) -> str:
        return " ".join(map(str, sorted(self.numbers)))
