"""A dataset row as an episode: ``rollart/Dataset-v0`` serves the rows of one task of a user's file
(``rollart.data``) and scores the answer with a verifier (``rollart.rewards.verifiers``).

``reset(seed=i)`` plays row ``i`` of the task's split (modulo its length): the coordinator deals training rows
as reset seeds, every row once per epoch, and evaluation plays rows 0, 1, ... of the held-out split. One answer
ends the episode (reward = the verifier's score, plus ``format_weight`` when the answer is in ``\\boxed{}``);
with ``tools=True`` the model may first call a calculator, ``<calc>expression</calc>`` (AST-restricted,
nothing is exec'd), and the episode ends at its first answer without a call or at the turn limit.
"""
from __future__ import annotations

import re

import gymnasium as gym
import numpy as np

from envs.calculator import CalculatorError, evaluate, format_number
from envs.text_space import text_space
from rollart.data.rows import Columns, Row
from rollart.data.tasks import split_of
from rollart.rewards.rules import extract_answer
from rollart.rewards.verifiers import format_reward, verifier_of
from rollart.rollout.env_protocol import EnvDefaults

TOOL_HINT = " You may compute with <calc>expression</calc> before you answer."
_CALL = re.compile(r"<calc>(.*?)</calc>", re.DOTALL)
_OWN = ("text", "reference")
"""Verifier arguments a row's columns cannot take."""


class DatasetEnv(EnvDefaults, gym.Env):
    """The rows of one task of a dataset file (see the module docstring)."""

    metadata = {"render_modes": ["ansi"]}
    max_new_tokens = 256

    def __init__(self, path: str, source: str, split: str = "train", columns: dict | None = None,
                 heldout: float = 0.1, split_seed: int = 0, verifier: str = "math_verify",
                 format_weight: float = 0.0, tools: bool = False, render_mode: str | None = None):
        self.rows = _rows(path, columns, source, split, heldout, split_seed)
        self.verify = verifier_of(verifier)
        self.format_weight, self.tools, self.render_mode = format_weight, tools, render_mode
        self.observation_space = text_space(8192)
        self.action_space = text_space(8192)
        self.row: Row = self.rows[0]
        self.index = 0

    @classmethod
    def task_instances(cls, path: str, source: str, split: str = "train", columns: dict | None = None,
                       heldout: float = 0.1, split_seed: int = 0, **_: object) -> frozenset:
        """The prompts this task's split plays (held-out ones must be ones training never plays)."""
        return frozenset(r.prompt for r in _rows(path, columns, source, split, heldout, split_seed))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        index = (options or {}).get("row", seed if seed is not None else int(self.np_random.integers(len(self.rows))))
        self.index = int(index) % len(self.rows)
        self.row = self.rows[self.index]
        prompt = self.row.prompt + (TOOL_HINT if self.tools else "")
        return prompt, {"success": False, "row": self.index, "answer": self.row.answer}

    def step(self, action: str):
        text = action if isinstance(action, str) else ""
        call = _CALL.search(text) if self.tools else None
        if call is not None and extract_answer(text) is None:
            try:
                obs, info = "Result: " + format_number(evaluate(call.group(1))), {"success": False}
            except CalculatorError as e:
                obs, info = f"Tool error: {e}", {"success": False, "tool_error": str(e)}
            return obs, 0.0, False, False, info
        extra = {k: v for k, v in self.row.extra.items() if k not in _OWN}
        score = float(self.verify(text, self.row.answer, **extra))
        correct = score >= 1.0
        bonus = self.format_weight * format_reward(text) if self.format_weight else 0.0
        info = {"success": correct, "row": self.index, "verifier_score": score}
        return ("Correct." if correct else "Wrong."), score + bonus, True, False, info

    def render(self) -> str:
        return self.row.prompt

    def sample_action(self, rng: np.random.Generator) -> str:
        return f"\\boxed{{{int(rng.integers(0, 100))}}}"

    def scripted_action(self, obs: str) -> str:
        """The reference answer, boxed (what ``python -m rollart.rollout.play`` checks the verifier with)."""
        return f"The answer is \\boxed{{{self.row.answer}}}."


def _rows(path: str, columns: dict | None, source: str, split: str, heldout: float,
          split_seed: int) -> list[Row]:
    rows = split_of(path, Columns(**(columns or {})), source, split, heldout, split_seed)
    if not rows:
        raise ValueError(f"data={path!r}: task {source!r} has no rows in split {split!r}")
    return rows
