"""A safe calculator for tool calls: arithmetic expressions evaluated over a whitelisted AST.

No ``eval``/``exec``: the expression is parsed with :mod:`ast` and only numbers, + - * / // % **,
unary signs, parentheses and a few math functions are interpreted. Sizes are bounded so a model
cannot stall the env host with ``9**9**9``.
"""
from __future__ import annotations

import ast
import math
import operator

MAX_EXPRESSION_CHARS = 200
MAX_ABS_VALUE = 1e15
MAX_EXPONENT = 64

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt,
              "floor": math.floor, "ceil": math.ceil}


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be evaluated; the message says why."""


def evaluate(expression: str) -> int | float:
    """Value of an arithmetic ``expression``; raises CalculatorError for anything else."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return _checked(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} too large (max {MAX_EXPONENT})")
        try:
            return _checked(_BINARY[type(node.op)](left, right))
        except (ZeroDivisionError, OverflowError, ValueError) as e:
            raise CalculatorError(str(e)) from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
            and not node.keywords:
        args = [_eval(a) for a in node.args]
        try:
            return _checked(_FUNCTIONS[node.func.id](*args))
        except (TypeError, ValueError, OverflowError) as e:
            raise CalculatorError(f"{node.func.id}: {e}") from None
    raise CalculatorError(f"{type(node).__name__} is not allowed; use numbers, + - * / // % ** "
                          f"and {sorted(_FUNCTIONS)}")


def _checked(value: int | float) -> int | float:
    if isinstance(value, complex) or abs(value) > MAX_ABS_VALUE:
        raise CalculatorError(f"result out of range (|x| <= {MAX_ABS_VALUE:g})")
    return value


def format_number(value: int | float) -> str:
    """Integers without a decimal point; other floats rounded to 6 significant decimals."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:.6g}"
