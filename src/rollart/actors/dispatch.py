"""What an actor class exposes, read once when the actor is constructed: its public methods and how
each runs (``method_table``), and which typed request messages it handles (``message_table``).

Marks an actor class author puts on methods: ``@blocking`` (run a sync method in a worker thread) and
``@handles(MessageType, ...)`` (this method answers ``handle.send(MessageType(...))``).
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

from rollart.actors.codec import wire_allowed
from rollart.loader import load

HOOKS = {"on_start", "on_stop"}
"""Lifecycle hooks the server calls itself; never callable remotely."""


def blocking(fn: Callable) -> Callable:
    """Mark a sync actor method to run in a worker thread instead of inline on the event loop."""
    fn.__rollart_blocking__ = True
    return fn


def handles(*message_types: type) -> Callable[[Callable], Callable]:
    """Mark an actor method as the handler of these request message types: ``await h.send(msg)`` calls
    it with ``msg`` as its single argument. Each type must be a dataclass allowed on the wire (see
    ``wire_dataclass``); one type has one handler per actor class; streams stay ``handle.stream()``.

        @wire_dataclass
        @dataclass
        class Abort:
            request_id: str

        class Worker:
            @handles(Abort)
            async def abort(self, msg: Abort) -> bool: ...
    """
    if not message_types:
        raise TypeError("@handles needs at least one message type")
    for tp in message_types:
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            raise TypeError(f"@handles expects dataclass types, got {tp!r}")
        if not wire_allowed(tp):
            raise TypeError(f"@handles({tp.__qualname__}): {tp.__module__}.{tp.__qualname__} cannot cross the "
                            "wire; decorate it with @rollart.actors.wire_dataclass")

    def mark(fn: Callable) -> Callable:
        if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
            raise TypeError(f"@handles cannot mark the generator method {fn.__qualname__}: a request "
                            "message gets one reply; stream with handle.stream()")
        fn.__rollart_handles__ = (*getattr(fn, "__rollart_handles__", ()), *message_types)
        return fn

    return mark


def import_class(path: str) -> type:
    """``"package.module:ClassName"`` -> the class, with an error that says what to fix."""
    obj = load(path, "actor class")
    if not isinstance(obj, type):
        raise TypeError(f"actor class {path!r} is not a class")
    return obj


def _plain_function(cls: type, name: str) -> Any:
    fn = inspect.getattr_static(cls, name)
    return fn.__func__ if isinstance(fn, (staticmethod, classmethod)) else fn


def method_table(cls: type) -> dict[str, str]:
    """Public method name -> how it runs: 'sync' | 'thread' | 'async' | 'agen' | 'gen'."""
    table = {}
    for name in dir(cls):
        if name.startswith("_") or name in HOOKS:
            continue
        fn = _plain_function(cls, name)
        if not callable(fn) or isinstance(fn, type):
            continue
        if inspect.isasyncgenfunction(fn):
            table[name] = "agen"
        elif inspect.iscoroutinefunction(fn):
            table[name] = "async"
        elif inspect.isgeneratorfunction(fn):
            table[name] = "gen"
        else:
            table[name] = "thread" if getattr(fn, "__rollart_blocking__", False) else "sync"
    return table


def message_table(cls: type) -> dict[type, str]:
    """Request message type -> the name of the public method marked ``@handles`` for it. Raises
    TypeError for a mark on a private method or hook, or for two handlers of one type."""
    table: dict[type, str] = {}
    public = method_table(cls)
    for name in dir(cls):
        message_types = getattr(_plain_function(cls, name), "__rollart_handles__", ())
        if message_types and name not in public:
            raise TypeError(f"{cls.__qualname__}.{name} is marked @handles but is not a public method")
        for tp in message_types:
            if table.get(tp, name) != name:
                raise TypeError(f"{cls.__qualname__} handles {tp.__qualname__} twice: in {table[tp]} and {name}")
            table[tp] = name
    return table
