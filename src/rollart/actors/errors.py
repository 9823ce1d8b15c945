"""Errors raised by the actor runtime.

Two kinds, as in vLLM's engine client: a call can fail on its own (``RemoteError`` — the method
raised; ``ActorTimeoutError`` — it took too long) and the actor keeps serving; or the actor is gone
(``ActorDeadError``) and every call pending on it fails with that error.
"""
from __future__ import annotations


class ActorError(Exception):
    """Base class for every error the actor runtime raises."""


class WireError(ActorError, ValueError):
    """A message or payload could not be encoded or decoded (malformed frame, unsupported type).

    ``code`` says what was wrong in one short key that frames broken the same way share (``bad_header``,
    ``unknown_kind``, ``bad_payload``, ...): the coordinator counts rejected frames by it."""

    def __init__(self, *args: object, code: str = "malformed"):
        super().__init__(*args)
        self.code = code


class ActorDeadError(ActorError):
    """The actor died (process exit, missed heartbeats) or was stopped; the call did not complete."""

    def __init__(self, actor: str, reason: str, call: str = ""):
        """``call``: what the caller was waiting for when the actor died (a method or message class name)."""
        waiting = f" (while waiting for its answer to {call})" if call else ""
        super().__init__(f"actor {actor!r} is dead: {reason}{waiting}")
        self.actor = actor
        self.reason = reason
        self.call = call


class ActorTimeoutError(ActorError, TimeoutError):
    """A call did not finish within its timeout; a cancel was sent to the actor."""

    def __init__(self, actor: str, method: str, timeout: float):
        super().__init__(f"call {actor}.{method}() timed out after {timeout:g} s (cancel sent to the actor)")
        self.actor = actor
        self.method = method
        self.timeout = timeout


class RemoteError(ActorError):
    """The remote method raised. Carries the remote exception's type name, message and traceback text.

    ``remote_type`` is the qualified name (``"builtins.ValueError"``,
    ``"rollart.types.InvalidRequestError"``); ``matches(cls)`` compares by name, since the
    exception object itself never crosses the wire (no pickle).
    """

    def __init__(self, actor: str, method: str, remote_type: str, message: str, traceback: str = "",
                 mro_names: tuple[str, ...] = ()):
        super().__init__(f"{actor}.{method}() raised {remote_type}: {message}")
        self.mro_names = tuple(mro_names) or (remote_type,)
        self.actor = actor
        self.method = method
        self.remote_type = remote_type
        self.message = message
        self.traceback = traceback

    @property
    def type_name(self) -> str:
        """Short class name of the remote exception, e.g. ``"ValueError"``."""
        return self.remote_type.rsplit(".", 1)[-1]

    def matches(self, exc_type: type[BaseException]) -> bool:
        """True if the remote exception was ``exc_type`` (by qualified name) or a subclass of it."""
        return f"{exc_type.__module__}.{exc_type.__qualname__}" in self.mro_names

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n--- remote traceback ---\n{self.traceback}" if self.traceback else base
