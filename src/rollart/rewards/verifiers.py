"""Verifiers: grade one answer against a row's ground truth, as a float reward (1.0 right, 0.0 wrong).

Every verifier is a plain function ``verifier(text, reference, **extra) -> float``: ``text`` is the model's answer,
``reference`` the row's ground truth and ``extra`` the row's other columns (a code row's ``test`` and
``entry_point``, a numeric row's ``rel_tol``); columns a verifier does not use are ignored. The same function
scores inside an env and as a function of the serverless reward endpoint (each built-in is in its default set,
:data:`rollart.rewards.registry.BUILTIN_FUNCTIONS`, so ``reward.function=math_verify`` works).

Built-ins, by name (:data:`BUILTINS`):

- ``math_verify``: math-verify's answer in the text (a ``\\boxed{}`` first, then an "answer is ..." phrase, then
  the last LaTeX or plain expression) equals the reference (LaTeX, fractions, decimals, equivalent expressions:
  ``1/2``, ``0.5`` and ``\\frac{1}{2}`` are one answer); bounded in time from any thread (:mod:`.math_equal`).
- ``exact_match``, ``regex_match``, ``numeric``: on the *final answer*, the content of the last ``\\boxed{...}``
  if there is one, else the whole text.
- ``code_tests``: the row's tests pass against the answer's code in the sandbox (:mod:`.code_verifier`).
- ``format_reward``: 1.0 when the answer has the asked-for format (a ``\\boxed{}``, or a regex).

``with_format(verifier, weight)`` adds a format bonus: ``correctness + weight * format``. ``verifier_of(name)``
gives a built-in by name or a user's ``"package.module:function"``.

A wrong or missing answer scores 0.0; a row a verifier cannot use (no reference, a pattern that does not compile,
no tests) raises ValueError in one line saying what is wrong; math-verify running over its time raises
TimeoutError. The env or endpoint running the verifier turns either into a dropped trajectory with its reason
counted, never a stopped run.
"""
from __future__ import annotations

import difflib
import math
import re
import unicodedata
from fractions import Fraction
from typing import Callable

from rollart.loader import load
from rollart.rewards.code_verifier import code_tests
from rollart.rewards.math_equal import math_equal

Verifier = Callable[..., float]
"""``verifier(text: str, reference: str, **extra) -> float``."""

EXACT_TRIM = " \t\n\r\f\v.,;:!?\"'`*"
"""Characters ``exact_match`` strips from both ends of the answer and the reference (whitespace, sentence
punctuation, quotes, markdown emphasis); signs, brackets, ``$`` and ``%`` are kept."""
REL_TOL, ABS_TOL = 1e-6, 1e-9
"""``numeric``'s default tolerances (a row's ``rel_tol`` / ``abs_tol`` columns override them)."""
BOXED_PATTERN = r"\\boxed\s*\{"
"""``format_reward``'s default format: a ``\\boxed{`` anywhere in the answer."""

_NUMBER = re.compile(r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?(?:/\d+)?")


def _text(text, verifier: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{verifier}: the answer must be text, got {type(text).__name__}")
    return text


def _reference(reference, verifier: str) -> str:
    if isinstance(reference, (int, float)) and not isinstance(reference, bool):
        reference = str(reference)
    if not isinstance(reference, str) or not reference.strip():
        raise ValueError(f"{verifier}: the row has no reference answer (got {reference!r})")
    return reference


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` whose braces balance, or None."""
    start = text.rfind("\\boxed")
    while start != -1:
        i = start + len("\\boxed")
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    return text[i + 1:j]
        start = text.rfind("\\boxed", 0, start)
    return None


def final_answer(text: str) -> str:
    """The last ``\\boxed{...}``'s content if the text has one, else the whole text."""
    boxed = last_boxed(text)
    return text if boxed is None else boxed


def normalise(s: str) -> str:
    """What ``exact_match`` compares: Unicode NFKC, case folded, every run of whitespace made one space, and the
    :data:`EXACT_TRIM` characters stripped from both ends."""
    return " ".join(unicodedata.normalize("NFKC", s).casefold().split()).strip(EXACT_TRIM)


def math_verify(text: str, reference: str, **extra) -> float:
    """1.0 if math-verify finds the answer in ``text`` equivalent to ``reference``, else 0.0 (no answer: 0.0)."""
    return 1.0 if math_equal(_text(text, "math_verify"), _reference(reference, "math_verify")) else 0.0


def exact_match(text: str, reference: str, **extra) -> float:
    """1.0 if the final answer equals ``reference`` after :func:`normalise` on both, else 0.0."""
    answer = final_answer(_text(text, "exact_match"))
    return 1.0 if normalise(answer) == normalise(_reference(reference, "exact_match")) else 0.0


def regex_match(text: str, reference: str = "", *, pattern: str | None = None, **extra) -> float:
    """1.0 if the pattern (a ``pattern`` column, else the reference) is found in the final answer (``re.search``:
    anchor it with ``^...$`` for a whole match; flags inline, e.g. ``(?i)``), else 0.0."""
    source = pattern if pattern is not None else _reference(reference, "regex_match")
    if not isinstance(source, str) or not source:
        raise ValueError(f"regex_match: the row's pattern must be non-empty text, got {source!r}")
    try:
        compiled = re.compile(source)
    except re.error as e:
        raise ValueError(f"regex_match: the row's pattern {source[:80]!r} does not compile ({e})") from None
    return 1.0 if compiled.search(final_answer(_text(text, "regex_match"))) else 0.0


def _value(number: str) -> float:
    number = number.replace(",", "")
    if "/" in number:
        num, den = number.split("/")
        return float(Fraction(num) / Fraction(den)) if float(den) != 0 else math.nan
    return float(number)


def _tolerance(value, name: str, default: float) -> float:
    if value is None:  # a row whose tolerance column is empty
        return default
    try:
        tol = float(value)
    except (TypeError, ValueError):
        tol = math.nan
    if not tol >= 0:
        raise ValueError(f"numeric: the row's {name}={value!r} must be a number >= 0")
    return tol


def numeric(text: str, reference: str, *, rel_tol: float | None = None, abs_tol: float | None = None,
            **extra) -> float:
    """1.0 if the last number of the final answer is within ``rel_tol`` (relative) or ``abs_tol`` (absolute) of
    the reference, else 0.0 (defaults :data:`REL_TOL`, :data:`ABS_TOL`). Numbers: integers, decimals, ``1,234``
    thousands, ``1e-3`` exponents, ``3/4``."""
    ref = _reference(reference, "numeric").strip()
    if not _NUMBER.fullmatch(ref):
        raise ValueError(f"numeric: the row's reference {ref[:80]!r} is not a number")
    rel, absolute = _tolerance(rel_tol, "rel_tol", REL_TOL), _tolerance(abs_tol, "abs_tol", ABS_TOL)
    numbers = _NUMBER.findall(final_answer(_text(text, "numeric")))
    if not numbers:
        return 0.0
    got, want = _value(numbers[-1]), _value(ref)
    return 1.0 if math.isclose(got, want, rel_tol=rel, abs_tol=absolute) else 0.0


def format_reward(text: str, reference: str = "", *, format_pattern: str | None = None, **extra) -> float:
    """1.0 if ``text`` has the format: ``format_pattern`` found by ``re.search`` (default :data:`BOXED_PATTERN`,
    a boxed answer), else 0.0. The reference is not used."""
    try:
        found = re.search(format_pattern or BOXED_PATTERN, _text(text, "format_reward"))
    except re.error as e:
        raise ValueError(f"format_reward: format_pattern {format_pattern!r} does not compile ({e})") from None
    return 1.0 if found else 0.0


def with_format(verifier: Verifier, weight: float = 0.1, pattern: str | None = None) -> Verifier:
    """A verifier scoring ``verifier(...) + weight * format_reward(text, format_pattern=pattern)``: with
    ``weight=0.1`` a right, boxed answer scores 1.1, a wrong boxed one 0.1, a right unboxed one 1.0.

    For the endpoint, bind it at module level (``my_reward = with_format(math_verify, 0.1)``) and serve
    ``mymodule:my_reward``."""
    if not callable(verifier):
        raise TypeError(f"with_format: {verifier!r} is not a verifier function")
    if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
        raise ValueError(f"with_format: weight={weight!r} must be a finite number >= 0")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"with_format: pattern {pattern!r} does not compile ({e})") from None

    def scored(text: str, reference: str, **extra) -> float:
        return float(verifier(text, reference, **extra)) + weight * format_reward(text, format_pattern=pattern)

    scored.__name__ = scored.__qualname__ = f"{getattr(verifier, '__name__', 'verifier')}_with_format"
    scored.__doc__ = f"correctness + {weight:g} x format_reward (format {pattern or BOXED_PATTERN!r})."
    return scored


BUILTINS: dict[str, Verifier] = {fn.__name__: fn for fn in (
    math_verify, exact_match, regex_match, numeric, code_tests, format_reward)}
"""The built-in verifiers by name."""


def verifier_of(name_or_spec: str) -> Verifier:
    """A built-in verifier by name (``"math_verify"``), or a user's by ``"package.module:function"``."""
    if not isinstance(name_or_spec, str) or not name_or_spec.strip():
        raise ValueError(f"verifier {name_or_spec!r}: give a built-in name ({', '.join(BUILTINS)}) or "
                         "'package.module:function'")
    name = name_or_spec.strip()
    if ":" in name:
        fn = load(name, "verifier")
        if not callable(fn):
            raise ValueError(f"verifier {name!r} names a {type(fn).__name__}, not a function "
                             "fn(text, reference, **extra) -> float")
        return fn
    if name not in BUILTINS:
        close = difflib.get_close_matches(name, list(BUILTINS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown verifier {name!r}: {hint}built-in: {', '.join(BUILTINS)}; or give a user's "
                         "'package.module:function'")
    return BUILTINS[name]
