"""The one loader of ``"package.module:name"`` strings: actor classes, engine and trainer plug-ins, env entry
points, step actions, reward functions and wire dataclasses are all named this way.

    load("rollart.rewards.rules:math_reward", "reward function")   # the function
    load("pkg.mod:Outer.Inner", "actor class")                     # a dotted name inside the module

Every failure is a :class:`LoadError` of one line: the kind of thing and the string, what was wrong (not a
``module:name`` string, a module that does not import and why, a module without that name) and what to fix.
An error raised while the module itself runs (a bug in it) is not caught: it keeps its traceback.
"""
from __future__ import annotations

import importlib
from typing import Any


class LoadError(ImportError, ValueError):
    """A ``"package.module:name"`` string that names nothing importable; the message says what to fix.

    Both an ImportError (the import failed) and a ValueError (the string is a bad value), so that a caller
    catching either keeps working."""


def split(spec: str, kind: str = "object") -> tuple[str, str]:
    """``"package.module:name"`` -> ``("package.module", "name")``; a LoadError unless both parts are given."""
    module, sep, name = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    module, name = module.strip(), name.strip()
    if not sep or not module or not name:
        raise LoadError(f"{kind} {spec!r} is not a 'package.module:name' string")
    return module, name


def load(spec: str, kind: str = "object") -> Any:
    """The object ``spec`` names (``"package.module:name"``, the name may be dotted); ``kind`` says what it is
    for in the error message (e.g. "actor class", "reward function")."""
    module_name, name = split(spec, kind)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise LoadError(f"{kind} {spec!r}: cannot import module {module_name!r} ({e}); check the part before the "
                        "':' and that its package is installed or on PYTHONPATH") from e
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LoadError(f"{kind} {spec!r}: module {module_name!r} has no {name!r}; check the part after "
                            "the ':'") from None
    return obj
