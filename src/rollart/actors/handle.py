"""``ActorHandle``: what callers hold to reach one named actor; ``ActorRef``: what a run asks of any actor it
talks to, however that actor is reached."""
from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable, Protocol


class ActorRef(Protocol):
    """What the run needs of an actor: an ``ActorHandle``, or anything standing in for one (a group of
    data-parallel trainer ranks, a job's view of a shared service, an in-process object behind
    ``rollart.actors.LocalHandle``). Requests are typed messages (``rollart.messages``)."""

    @property
    def name(self) -> str: ...

    @property
    def alive(self) -> bool:
        """False once it is dead for good (its restarts spent)."""

    @property
    def restarts(self) -> int:
        """Times this run's runtime restarted it (0 for one it does not supervise)."""

    @property
    def dead_reason(self) -> str: ...

    @property
    def supervised(self) -> bool:
        """This run's runtime restarts it when it dies (what recovery acts on); False for shared services and
        in-process objects."""

    def send(self, message: Any, timeout: float | None = None) -> Awaitable[Any]:
        """The answer of the actor's method that handles ``type(message)``."""

    def on_restart(self, callback: Callable[[str, str], Any]) -> None:
        """``callback(name, reason)`` whenever an incarnation dies and a restart is under way (never, for one
        this run does not supervise)."""

from rollart.actors.calls import PendingCalls
from rollart.actors.record import ActorRecord


class ActorHandle:
    """A reference to one named actor. Cheap to copy; stays valid across restarts of the actor.

    ``await h.call("m", *args, timeout=5, **kw)`` or ``await h.m(*args, **kw)`` calls a method;
    ``await h.send(Msg(...))`` sends a typed request message to the method that handles its class
    (see ``rollart.actors.handles``); ``async for x in h.stream("gen", *args)`` iterates an (async)
    generator method. Attribute calls cannot reach methods named like handle members (``call``,
    ``send``, ``stream``, ``stop``, ``name``, ...) or a ``timeout`` keyword argument: use
    ``h.call_with(method, args, kwargs, timeout)`` for those.
    """

    __slots__ = ("_rec", "_calls", "_stop")

    def __init__(self, rec: ActorRecord, calls: PendingCalls,
                 stop: Callable[[ActorRecord, float], Awaitable[None]]):
        self._rec = rec
        self._calls = calls
        self._stop = stop

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

    supervised = True

    def call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Awaitable result of ``method(*args, **kwargs)`` on the actor. Cancelling it cancels the call."""
        return self._calls.call(self._rec, method, args, kwargs, timeout)

    def call_with(self, method: str, args: tuple | list = (), kwargs: dict | None = None,
                  timeout: float | None = None) -> Any:
        return self._calls.call(self._rec, method, args, kwargs or {}, timeout)

    def send(self, message: Any, timeout: float | None = None) -> Any:
        """Awaitable result of the actor method that handles ``type(message)``, called with ``message``.
        An actor that handles no such message answers with a RemoteError (TypeError); it keeps serving."""
        return self._calls.send(self._rec, message, timeout)

    def stream(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> AsyncIterator:
        """Items of an (async) generator method. ``timeout`` bounds the wait for each item."""
        return self._calls.stream(self._rec, method, args, kwargs, timeout)

    async def stop(self, timeout: float = 10.0) -> None:
        """Ask the actor to run on_stop() and exit; kill it after ``timeout``. Pending calls fail."""
        await self._stop(self._rec, timeout)

    def on_dead(self, callback: Callable[[str, str], Any]) -> None:
        """``callback(name, reason)`` once the actor is dead for good (restarts exhausted)."""
        self._rec.dead_callbacks.append(callback)

    def on_restart(self, callback: Callable[[str, str], Any]) -> None:
        """``callback(name, reason)`` each time an incarnation dies and a restart is under way (its peers can drop
        what they were waiting on from it at once, instead of timing out)."""
        self._rec.restart_callbacks.append(callback)

    def restart_with(self, **kwargs: Any) -> None:
        """Constructor keywords the actor's later incarnations (its restarts) get in place of those it started with
        (e.g. the new address of a peer that moved to another node)."""
        self._rec.kwargs.update(kwargs)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        call = self._calls.call
        rec = self._rec

        def remote_method(*args: Any, **kwargs: Any) -> Any:
            return call(rec, method, args, kwargs, None)

        remote_method.__name__ = method
        return remote_method

    def __repr__(self) -> str:
        return f"<ActorHandle {self._rec.name} {self._rec.cls_path} {self._rec.state}>"


def answering(ref: ActorRef) -> bool:
    """False while an actor this run's runtime supervises is starting or restarting: a request sent to it then waits
    for its next incarnation, for as long as that takes (a restart that waits for capacity: indefinitely). Other
    references (in-process objects, shared services, trainer groups) answer or fail on their own."""
    return not isinstance(ref, ActorHandle) or ref.state == "ready"
