"""The AST-restricted calculator (no code execution) and the rule rewards."""
import pytest

from envs.calculator import CalculatorError, evaluate, format_number
from rollart.rewards.rules import extract_answer, math_reward, numbers_equal
from rollart.rewards.verifiers import exact_match


def test_arithmetic_and_whitelisted_functions():
    assert evaluate("2 + 3 * (4 - 1)") == 11
    assert evaluate("-7 // 2") == -4 and evaluate("2 ** 10") == 1024
    assert evaluate("sqrt(16) + abs(-2) + max(1, 5)") == 11.0
    assert format_number(evaluate("10 / 4")) == "2.5" and format_number(8.0) == "8"


@pytest.mark.parametrize("expr", ["__import__('os')", "open('/etc/passwd')", "(1).real", "x + 1",
                                  "[1, 2]", "lambda: 1", "9 ** 9 ** 9", "10 ** 20", "1 / 0",
                                  "True + 1", "'a' * 3", "1 if 1 else 2", "1" * 300])
def test_everything_else_is_refused_with_a_reason(expr):
    with pytest.raises(CalculatorError):
        evaluate(expr)


def test_answer_extraction_and_matching():
    assert extract_answer("so \\boxed{12} hmm \\boxed{13}") == "13"
    assert extract_answer("Answer: 1,024.") == "1,024"
    assert extract_answer("no answer here") is None
    assert numbers_equal("1,024", 1024) and numbers_equal("0.5", "1/2") and not numbers_equal("x", 1)
    assert math_reward("\\boxed{42}", 42) == 1.0 and math_reward("\\boxed{41}", 42) == 0.0
    assert exact_match("  1 2  3 ", "1 2 3") == 1.0 and exact_match("1 3 2", "1 2 3") == 0.0
