"""``ActorRecord``: the coordinator's bookkeeping for one named actor across its incarnations
(state, identity, process or task, restart count, callbacks). The ``ActorTable`` owns the records;
the other coordinator pieces read and update the record they are handed.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from rollart.actors.restart import RestartPolicy

LIVE_STATES = ("starting", "setup", "ready")
"""States of an incarnation that is (being) brought up or serving: the ones a death can end."""


@dataclass(eq=False)
class ActorRecord:
    name: str
    cls_path: str
    args: list
    kwargs: dict
    mode: str  # process | inprocess | remote
    restart: RestartPolicy
    env: dict
    state: str = "starting"
    identity: bytes = b""
    incarnation: int = 0
    ready: asyncio.Future | None = None
    proc: Any = None
    task: asyncio.Task | None = None
    pid: int | None = None
    host: str = ""
    methods: list = field(default_factory=list)
    restarts: int = 0
    started_once: bool = False
    init_sent: bool = False
    last_seen: float = 0.0
    cpu_sample: tuple | None = None
    """(cpu ticks, when) of a silent process, to tell busy from hung."""
    dead_reason: str = ""
    dead_callbacks: list = field(default_factory=list)
    restart_callbacks: list = field(default_factory=list)
    setup_calls: list = field(default_factory=list)
    handle: Any = None
    """The ``ActorHandle`` callers hold; typed loosely so that records need not know handles."""


def settle(fut: asyncio.Future | None, exc: BaseException | None = None) -> None:
    """Resolve ``fut`` (with ``exc`` if given) unless it is already done."""
    if fut is None or fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)
        fut.exception()  # mark retrieved: nobody may be waiting on it
