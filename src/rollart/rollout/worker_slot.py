"""The proxy's view of one inference worker, and how a worker's errors read on the proxy's side.

A worker is reached through an ``ActorRef``: an ``ActorHandle`` of an ``InferenceWorker`` actor, or a
``LocalHandle`` around an in-process one. Requests are typed messages from ``rollart.messages``
(``GenerateRequest``, ``AbortRequest``, ``UpdateWeights``, ``GetVersion``, ...) dispatched by their type to the
method the worker marks ``@handles`` for it.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rollart.actors import ActorRef
from rollart.types import InvalidRequestError


@dataclass(eq=False)
class WorkerSlot:
    """The proxy's view of one inference worker."""
    name: str
    hw_class: str
    handle: ActorRef
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
    from rollart.actors import RemoteError
    if isinstance(e, RemoteError) and e.matches(InvalidRequestError):
        return InvalidRequestError(e.message)
    return e
