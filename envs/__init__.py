"""rollart's shipped environments (text games, tool use, code, SWE), registered with gymnasium under ``rollart/``.

The library never imports this package: ``import envs`` (recipes do; ``--import envs`` for
``python -m rollart.rollout.play``) registers every id below, then ``gymnasium.make("rollart/FrozenLake-v0")``
builds one. Each env is a plain ``gymnasium.Env`` with text observations and text actions that mixes in
``rollart.rollout.env_protocol.EnvDefaults`` (its system prompt and per-answer token budget), and
``sample_action(rng)`` / ``scripted_action(obs)`` let ``python -m rollart.rollout.play`` drive it without a model.

Envs that live in sub-packages (``envs.swe``, ``envs.humaneval``) register themselves: if such a
package defines ``register_envs()`` (returning its ids) or ``register()`` (with ``ENV_ID``), it is called
here; a missing or broken optional package is a warning, never an import error of ``envs``.
"""
from __future__ import annotations

import importlib
import warnings

import gymnasium as gym

NAMESPACE = "rollart"

_SHIPPED = [
    # id, entry point, max turns, default kwargs
    ("FrozenLake-v0", "envs.frozenlake:FrozenLakeText", 12, {"is_slippery": False}),
    ("FrozenLakeRandom-v0", "envs.frozenlake:FrozenLakeText", 12,
     {"is_slippery": False, "random_map": True, "spell_position": True}),
    ("MathTool-v0", "envs.math_tool:MathToolEnv", 4, {}),
    ("GuessNumber-v0", "envs.games:GuessNumber", 8, {"high": 100}),
    ("SortNumbers-v0", "envs.games:SortNumbers", 1, {"count": 5}),
    ("Dataset-v0", "envs.dataset:DatasetEnv", 8, {}),
]

# Sub-packages that register their own envs through a register_envs() function.
_SELF_REGISTERING = ["envs.swe", "envs.humaneval"]


def register_envs() -> list[str]:
    """Register every shipped env (idempotent); returns the registered ids."""
    ids = []
    for name, entry_point, max_turns, kwargs in _SHIPPED:
        env_id = f"{NAMESPACE}/{name}"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, max_episode_steps=max_turns,
                         kwargs=dict(kwargs), disable_env_checker=True)
        ids.append(env_id)
    for module in _SELF_REGISTERING:
        try:
            package = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:  # the package exists but one of its imports is missing
                warnings.warn(f"{module} not registered: {e}", stacklevel=2)
            continue
        except Exception as e:  # a broken optional package must not break `import envs`
            warnings.warn(f"{module} not registered: {type(e).__name__}: {e}", stacklevel=2)
            continue
        hook = getattr(package, "register_envs", None) or getattr(package, "register", None)
        if not callable(hook):
            continue
        try:
            registered = hook()
        except Exception as e:  # noqa: BLE001 - same rule: never break `import envs`
            warnings.warn(f"{module}.{hook.__name__}() failed: {type(e).__name__}: {e}", stacklevel=2)
            continue
        ids.extend(registered or ([package.ENV_ID] if hasattr(package, "ENV_ID") else []))
    return ids


REGISTERED = register_envs()
