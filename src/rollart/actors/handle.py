"""``ActorHandle`` (what callers hold) and ``RestartPolicy``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from rollart.config import ConfigError

if TYPE_CHECKING:
    from rollart.actors.record import _ActorRecord
    from rollart.actors.system import ActorSystem


@dataclass
class RestartPolicy:
    max_restarts: int = 0
    """Times a dead actor is restarted in place (same name, fresh constructor) before it is marked dead.
    Only actors that started successfully once are restarted; a failing first start raises from spawn()."""
    backoff: float = 0.1
    """Seconds before the first restart; doubles with every further restart of the same actor."""
    max_backoff: float = 5.0
    """Upper bound on the delay between restarts."""

    def __post_init__(self) -> None:
        if not (isinstance(self.max_restarts, int) and self.max_restarts >= 0):
            raise ConfigError(f"RestartPolicy.max_restarts must be an int >= 0, got {self.max_restarts!r}")
        if self.backoff < 0 or self.max_backoff < self.backoff:
            raise ConfigError(f"RestartPolicy needs 0 <= backoff <= max_backoff, got {self.backoff}, "
                              f"{self.max_backoff}")

    def delay(self, restart_number: int) -> float:
        return min(self.backoff * 2 ** max(restart_number - 1, 0), self.max_backoff)


class ActorHandle:
    """A reference to one named actor. Cheap to copy; stays valid across restarts of the actor.

    ``await h.call("m", *args, timeout=5, **kw)`` or ``await h.m(*args, **kw)`` calls a method;
    ``async for x in h.stream("gen", *args)`` iterates an (async) generator method. Attribute calls
    cannot reach methods named like handle members (``call``, ``stream``, ``stop``, ``name``, ...) or a
    ``timeout`` keyword argument: use ``h.call_with(method, args, kwargs, timeout)`` for those.
    """

    __slots__ = ("_system", "_rec")

    def __init__(self, system: "ActorSystem", rec: "_ActorRecord"):
        self._system = system
        self._rec = rec

    @property
    def name(self) -> str:
        return self._rec.name

    @property
    def state(self) -> str:
        """starting | setup | ready | restarting | dead | stopping | stopped"""
        return self._rec.state

    @property
    def alive(self) -> bool:
        return self._rec.state in ("starting", "setup", "ready", "restarting")

    @property
    def restarts(self) -> int:
        return self._rec.restarts

    @property
    def pid(self) -> int | None:
        """Process id of the current incarnation (the coordinator's pid for in-process actors)."""
        return self._rec.pid

    @property
    def methods(self) -> list[str]:
        return list(self._rec.methods)

    @property
    def dead_reason(self) -> str:
        return self._rec.dead_reason

    def call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Awaitable result of ``method(*args, **kwargs)`` on the actor. Cancelling it cancels the call."""
        return self._system._call(self._rec, method, args, kwargs, timeout)

    def call_with(self, method: str, args: tuple | list = (), kwargs: dict | None = None,
                  timeout: float | None = None) -> Any:
        return self._system._call(self._rec, method, args, kwargs or {}, timeout)

    def stream(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> AsyncIterator:
        """Items of an (async) generator method. ``timeout`` bounds the wait for each item."""
        return self._system._stream(self._rec, method, args, kwargs, timeout)

    async def stop(self, timeout: float = 10.0) -> None:
        """Ask the actor to run on_stop() and exit; kill it after ``timeout``. Pending calls fail."""
        await self._system._stop_actor(self._rec, timeout)

    def on_dead(self, callback: Callable[[str, str], Any]) -> None:
        """``callback(name, reason)`` once the actor is dead for good (restarts exhausted)."""
        self._rec.dead_callbacks.append(callback)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        call = self._system._call
        rec = self._rec

        def remote_method(*args: Any, **kwargs: Any) -> Any:
            return call(rec, method, args, kwargs, None)

        remote_method.__name__ = method
        return remote_method

    def __repr__(self) -> str:
        return f"<ActorHandle {self._rec.name} {self._rec.cls_path} {self._rec.state}>"
