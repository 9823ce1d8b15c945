"""Which stateless reward functions a serverless endpoint may run, by name.

Functions are named with ``module:function`` specs (optionally ``alias=module:function``) so that the
server and each worker process import them the same way. Unknown names get a "did you mean" error.
:data:`BUILTIN_FUNCTIONS` is the set a run's own endpoint serves unless ``reward.functions`` says otherwise.
"""
from __future__ import annotations

import difflib
from typing import Callable, Iterable

from rollart.loader import load, split

BUILTIN_FUNCTIONS = (
    "rollart.rewards.rules:math_reward",
    "rollart.rewards.verifiers:math_verify",
    "rollart.rewards.verifiers:exact_match",
    "rollart.rewards.verifiers:regex_match",
    "rollart.rewards.verifiers:numeric",
    "rollart.rewards.code_verifier:code_tests",
    "rollart.rewards.verifiers:format_reward",
)
"""The rule reward and the built-in verifiers (:mod:`rollart.rewards.verifiers`), each served under its own name."""


class UnknownFunctionError(KeyError):
    """The requested function is not registered; the message lists close names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def parse_spec(spec: str) -> tuple[str, str, str]:
    """``[alias=]module:function`` -> (name, module, function)."""
    spec = spec.strip()
    alias, _, target = spec.rpartition("=")
    module, func = split(target, "reward function")
    return alias or func, module, func


def load_function(module: str, func: str) -> Callable:
    fn = load(f"{module}:{func}", "reward function")
    if not callable(fn):
        raise ValueError(f"reward function '{module}:{func}' is not callable")
    return fn


class FunctionRegistry:
    """name -> callable, built from specs (the server validates; workers import the same specs)."""

    def __init__(self, specs: Iterable[str] = ()):
        self.specs: dict[str, str] = {}
        self.functions: dict[str, Callable] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: str) -> str:
        name, module, func = parse_spec(spec)
        if name in self.functions:
            raise ValueError(f"function name {name!r} registered twice; give one an alias=module:fn")
        self.functions[name] = load_function(module, func)
        self.specs[name] = f"{name}={module}:{func}"
        return name

    def get(self, name: str) -> Callable:
        if name not in self.functions:
            close = difflib.get_close_matches(name, list(self.functions), n=3)
            hint = f"; did you mean {close}?" if close else f"; registered: {sorted(self.functions)}"
            raise UnknownFunctionError(f"unknown reward function {name!r}{hint}")
        return self.functions[name]

    def __contains__(self, name: str) -> bool:
        return name in self.functions
