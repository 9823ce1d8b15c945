"""Math with a calculator tool (in the spirit of GEM-math): few turns, decode-heavy.

Problems are generated locally from the reset seed (multi-step arithmetic and short word problems).
Each turn the agent either calls the tool — ``<calc>EXPR</calc>`` or ``<python>EXPR</python>``, both
evaluated by the AST-restricted :mod:`envs.calculator` (nothing is exec'd) — or answers with
``\\boxed{N}`` (or ``Answer: N``), which ends the episode and is checked by rule. Reward 1 if right.
"""
from __future__ import annotations

import re

import gymnasium as gym
import numpy as np

from envs.calculator import CalculatorError, evaluate, format_number
from envs.text_space import text_space
from rollart.rollout.env_protocol import EnvDefaults
from rollart.rewards.rules import extract_answer, numbers_equal

SYSTEM_PROMPT = ("Solve the problem. You may compute with <calc>expression</calc>; "
                 "give the final answer as \\boxed{number}.")
_TOOL = re.compile(r"<(calc|python)>(.*?)</\1>", re.DOTALL)
_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana"]
_ITEMS = ["apples", "books", "marbles", "stamps", "cookies", "pencils"]


def make_problem(rng: np.random.Generator) -> tuple[str, int]:
    """A (question, integer answer) pair drawn from ``rng``."""
    kind = int(rng.integers(3))
    a, b, c = (int(x) for x in rng.integers(2, 60, size=3))
    if kind == 0:
        return f"What is {a} * {b} + {c}?", a * b + c
    if kind == 1:
        return f"What is ({a} + {b}) * {c} - {a}?", (a + b) * c - a
    name, item = str(rng.choice(_NAMES)), str(rng.choice(_ITEMS))
    bags = int(rng.integers(2, 9))
    return (f"{name} has {a} {item} and buys {bags} boxes with {b} {item} each, "
            f"then gives away {c}. How many {item} does {name} have now?", a + bags * b - c)


class MathToolEnv(EnvDefaults, gym.Env):
    """Arithmetic/word problems with an optional calculator tool (see module docstring)."""

    metadata = {"render_modes": ["ansi"]}
    system_prompt = SYSTEM_PROMPT
    max_new_tokens = 256

    def __init__(self, render_mode: str | None = None):
        self.render_mode = render_mode
        self.observation_space = text_space(512)
        self.action_space = text_space(1024)
        self.question, self.answer = "", 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.question, self.answer = make_problem(self.np_random)
        return self.question, {"success": False, "answer": self.answer}

    def step(self, action: str):
        text = action if isinstance(action, str) else ""
        final = extract_answer(text)
        if final is not None:
            correct = numbers_equal(final, self.answer)
            obs = "Correct." if correct else "Wrong."
            return obs, float(correct), True, False, {"success": correct, "answer": self.answer}
        call = _TOOL.search(text)
        if call is None:
            obs = "No tool call or answer found. Use <calc>expression</calc> or \\boxed{number}."
            return obs, 0.0, False, False, {"success": False, "tool_error": "no call"}
        try:
            obs = "Result: " + format_number(evaluate(call.group(2)))
            info = {"success": False}
        except CalculatorError as e:
            obs, info = f"Tool error: {e}", {"success": False, "tool_error": str(e)}
        return obs, 0.0, False, False, info

    def render(self) -> str:
        return self.question

    def sample_action(self, rng: np.random.Generator) -> str:
        if rng.random() < 0.5:
            return f"<calc>{int(rng.integers(100))} * {int(rng.integers(100))}</calc>"
        return f"\\boxed{{{int(rng.integers(1000))}}}"

    def scripted_action(self, observation: str) -> str:
        """Compute the expression in the question with the tool, then answer with the result."""
        if observation.startswith("Result: "):
            return f"\\boxed{{{observation.split(': ', 1)[1]}}}"
        expression = re.search(r"What is (.*)\?", observation)
        if expression:
            return f"<calc>{expression.group(1)}</calc>"
        return f"\\boxed{{{self.answer}}}"  # word problems: the script knows the answer
