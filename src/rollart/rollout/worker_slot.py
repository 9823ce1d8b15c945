"""The proxy's view of one inference worker, and how a worker's errors read on the proxy's side.

A worker is anything with ``async send(message)`` and ``async call(method)``: an ``ActorHandle`` of an
``InferenceWorker`` actor, or ``LocalWorker`` around an in-process one. Requests are typed messages from
``rollart.types`` (``GenerateRequest``, ``AbortRequest``, ``UpdateWeights``) dispatched by their type to the
method the worker marks ``@handles`` for it; ``call`` serves the plain queries (version, stats).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from rollart.actors.dispatch import message_table
from rollart.types import InvalidRequestError


class LocalWorker:
    """An in-process InferenceWorker behind the same ``send`` / ``call`` interface as an actor handle."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.handlers = message_table(type(worker))

    async def send(self, message: Any) -> Any:
        handler = self.handlers.get(type(message))
        if handler is None:
            raise TypeError(f"{type(self.worker).__qualname__} handles no {type(message).__qualname__} message")
        return await getattr(self.worker, handler)(message)

    async def call(self, method: str, *args: Any) -> Any:
        return await getattr(self.worker, method)(*args)


@dataclass(eq=False)
class WorkerSlot:
    """The proxy's view of one inference worker."""
    name: str
    hw_class: str
    handle: Any
    outstanding: int = 0
    """Prompt + max new tokens of the requests this proxy has running on it."""
    failures: int = 0
    """Deaths observed (one per crash, however many requests it took down)."""
    healthy: bool = True
    """False from a death until the worker answers again."""
    dead: bool = False
    """Removed: no longer routed to."""
    version: int = 0
    routed: int = 0
    recovering: asyncio.Future | None = None


def dead_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the worker died" (the request may be re-issued), not "the request was bad"."""
    try:
        from rollart.actors.errors import ActorDeadError
    except ImportError:  # pragma: no cover - runtime not installed: only in-process workers
        return (ConnectionError,)
    return (ActorDeadError, ConnectionError)


def local_error(e: BaseException) -> BaseException:
    """A worker's per-request error as the caller's InvalidRequestError (it crossed the wire by name)."""
    matches = getattr(e, "matches", None)
    if matches is not None and matches(InvalidRequestError):
        return InvalidRequestError(getattr(e, "message", str(e)))
    return e
