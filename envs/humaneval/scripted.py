"""Scripted HumanEval answers (no model): canonical solutions, wrong answers, non-answers."""
from __future__ import annotations

from envs.humaneval.data import Problem


def canonical_answer(problem: Problem) -> str:
    """The canonical solution as a model would write it: the whole function in a code block."""
    return f"Here is the function:\n```python\n{problem.prompt}{problem.canonical_solution}```\n"


def wrong_answer(problem: Problem) -> str:
    return f"```python\ndef {problem.entry_point}(*args, **kwargs):\n    return None\n```"


def exit_early_answer(problem: Problem) -> str:
    """Tries to pass by leaving before the asserts run."""
    return f"```python\nimport os\ndef {problem.entry_point}(*args, **kwargs):\n    return None\nos._exit(0)\n```"


def no_answer(problem: Problem | None = None) -> str:
    return "I am not sure how to solve this."
