"""Rule-based rewards: extract a final answer from model text and compare it with the reference.

Used by the text environments (math-with-tool, games) and usable as a trajectory reward function.
Every function is pure and cheap; none raises on malformed model text (it scores 0 instead). Verifiers of a
dataset row's answer (exact, regex, numeric, math equivalence, code tests) are :mod:`rollart.rewards.verifiers`.
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_ANSWER = re.compile(r"answer\s*[:=]\s*([^\n]+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def extract_answer(text: str) -> str | None:
    """The final answer in ``text``: the last ``\\boxed{...}``, else the last ``Answer: ...`` line."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    answers = _ANSWER.findall(text)
    if answers:
        return answers[-1].strip().rstrip(".")
    return None


def parse_number(text: str) -> Fraction | None:
    """A number written as an int, decimal or fraction (commas, $ and % ignored), or None."""
    cleaned = text.replace(",", "").replace("$", "").replace("%", "").strip()
    match = _NUMBER.fullmatch(cleaned) or _NUMBER.search(cleaned)
    if not match:
        return None
    try:
        return Fraction(match.group(0))
    except (ValueError, ZeroDivisionError):
        return None


def numbers_equal(answer: str, reference: str | float | int, rel_tol: float = 1e-6) -> bool:
    """True when ``answer`` names the same number as ``reference`` (within ``rel_tol``)."""
    got = parse_number(answer)
    want = parse_number(str(reference))
    if got is None or want is None:
        return False
    return math.isclose(float(got), float(want), rel_tol=rel_tol, abs_tol=1e-9)


def math_reward(text: str, reference: str | float | int) -> float:
    """1.0 if the final answer in ``text`` equals ``reference`` numerically, else 0.0."""
    answer = extract_answer(text)
    return 1.0 if answer is not None and numbers_equal(answer, reference) else 0.0
