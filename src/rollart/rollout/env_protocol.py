"""The env protocol: what the rollout reads from an env besides gymnasium's ``reset``/``step``.

An env is a plain ``gymnasium.Env`` with text observations and text actions. It may also give the
rollout two per-env defaults by mixing in :class:`EnvDefaults` (or by defining the same two class
attributes); a :class:`~rollart.rollout.env_manager.TaskSpec`'s own values win over them::

    class EchoEnv(EnvDefaults, gym.Env):
        system_prompt = "Repeat the word shown."
        max_new_tokens = 8

The env host reads them once, when it makes the env, through :func:`env_defaults`.
"""
from __future__ import annotations

import numbers
from typing import Any


class EnvDefaults:
    """Mixin declaring an env's rollout defaults; see the module docstring."""

    system_prompt: str = ""
    """System prompt of every trajectory on this env ("" = none), unless TaskSpec.system_prompt is set."""
    max_new_tokens: int = 0
    """Token budget of each answer (0 = the rollout's default, 64), unless TaskSpec.max_new_tokens is set."""


def env_defaults(env: Any) -> tuple[str, int]:
    """``(system_prompt, max_new_tokens)`` of ``env`` (wrappers looked through); an env that declares
    neither has EnvDefaults' values. A value of the wrong type is a TypeError naming the env class."""
    base = getattr(env, "unwrapped", env)
    prompt = getattr(base, "system_prompt", EnvDefaults.system_prompt)
    budget = getattr(base, "max_new_tokens", EnvDefaults.max_new_tokens)
    prompt = "" if prompt is None else prompt
    budget = 0 if budget is None else budget
    if not isinstance(prompt, str):
        raise TypeError(f"{type(base).__name__}.system_prompt must be a str, got {type(prompt).__name__}")
    if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 0:
        raise TypeError(f"{type(base).__name__}.max_new_tokens must be an int >= 0, got {budget!r}")
    return prompt, int(budget)
