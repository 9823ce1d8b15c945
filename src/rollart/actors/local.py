"""``LocalHandle``: an in-process object behind the interface of an actor handle (``ActorRef``), for parts that
run in the caller's process (tests, cheap envs): a typed message goes to the method marked ``@handles`` for its
type, as the actor runtime would dispatch it, without a socket."""
from __future__ import annotations

import inspect
from typing import Any, Callable

from rollart.actors.dispatch import message_table


class LocalHandle:
    """Send to ``obj`` in this process. Never dies, never restarts: ``supervised`` is False."""

    supervised = False
    alive = True
    restarts = 0
    dead_reason = ""

    def __init__(self, obj: Any, name: str = "") -> None:
        self.obj = obj
        self.name = name or type(obj).__name__
        self.handlers = message_table(type(obj))

    async def send(self, message: Any, timeout: float | None = None) -> Any:
        handler = self.handlers.get(type(message))
        if handler is None:
            raise TypeError(f"{type(self.obj).__qualname__} handles no {type(message).__qualname__} message")
        result = getattr(self.obj, handler)(message)
        return await result if inspect.isawaitable(result) else result

    def on_restart(self, callback: Callable[[str, str], Any]) -> None:
        """An in-process object never restarts: nothing to call back."""

    def on_dead(self, callback: Callable[[str, str], Any]) -> None:
        """An in-process object never dies: nothing to call back."""
