"""Evaluate + - * / expressions with parentheses (standard precedence)."""
import re

TOKEN = re.compile(r"\s*(?:(\d+)|(.))")


def tokenize(text):
    tokens = []
    for number, op in TOKEN.findall(text):
        if number:
            tokens.append(float(number))
        elif op in "+-*/()":
            tokens.append(op)
        elif op.strip():
            raise ValueError(f"unexpected character {op!r}")
    return tokens


def evaluate(text):
    tokens = tokenize(text)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def atom():
        tok = take()
        if tok == "(":
            value = expr()
            if take() != ")":
                raise ValueError("missing )")
            return value
        if isinstance(tok, float):
            return tok
        raise ValueError(f"unexpected token {tok!r}")

    def term():
        value = atom()
        while peek() in ("*", "/"):
            value = value * atom() if take() == "*" else value / atom()
        return value

    def expr():
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    result = expr()
    if pos != len(tokens):
        raise ValueError("trailing tokens")
    return result
