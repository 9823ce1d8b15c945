"""Engine backends as plug-ins: ``create_engine("torch" | "vllm", config)``.

Each backend is a ``"module:Class"`` string resolved only when asked for, so an optional heavy
dependency (vllm) is imported only by the process that really uses that backend.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from rollart.engine.protocol import Engine
from rollart.loader import load, split

ENGINES: dict[str, str] = {
    "torch": "rollart.engine.llm_engine:LLMEngine",
    "vllm": "rollart.engine.vllm_backend:VLLMEngine",
}
"""backend name -> entry point of its engine class (constructed with the engine config)."""

_CONFIG = "rollart.engine.config:EngineConfig"


def register_engine(name: str, entry_point: str) -> None:
    """Add (or replace) a backend: ``entry_point`` is ``"package.module:Class"``."""
    split(entry_point, "engine entry point")  # a malformed one is refused here, not when the engine starts
    ENGINES[name] = entry_point


def load_entry_point(entry_point: str) -> Any:
    return load(entry_point, "engine entry point")


def engine_config(config: Any) -> Any:
    """An ``EngineConfig`` from a config object or a plain dict (as sent to an actor)."""
    cls = load_entry_point(_CONFIG)
    if isinstance(config, cls):
        return config
    if isinstance(config, dict):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(config) - known
        if unknown:
            raise ValueError(f"unknown engine settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**config)
    raise TypeError(f"engine config must be an EngineConfig or a dict, got {type(config).__name__}")


def create_engine(backend: str, config: Any) -> Engine:
    """Build the engine of ``backend`` from ``config`` (EngineConfig or dict of its fields)."""
    if backend not in ENGINES:
        raise ValueError(f"unknown engine backend {backend!r}; choose one of {sorted(ENGINES)}")
    cls = load_entry_point(ENGINES[backend])
    return cls(engine_config(config))
