"""``ActorTable``: every actor the coordinator knows, by name and by its current incarnation's socket
identity, plus the futures of callers waiting for a named actor to join from another host."""
from __future__ import annotations

import asyncio
from typing import Iterator

from rollart.actors.record import ActorRecord, settle

_GONE = ("dead", "stopped")


class ActorTable:
    def __init__(self) -> None:
        self.closing = False
        """Set once shutdown begins: no new actors, no restarts, no joins."""
        self._by_name: dict[str, ActorRecord] = {}
        self._by_identity: dict[bytes, ActorRecord] = {}
        self._joined: dict[str, asyncio.Future] = {}

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[ActorRecord]:
        """A snapshot, so callers may add or remove actors while iterating."""
        return iter(list(self._by_name.values()))

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def get(self, name: str) -> ActorRecord | None:
        return self._by_name.get(name)

    def running_state(self, name: str) -> str | None:
        """The state of a not-yet-dead actor named ``name``; None if the name is free to (re)use."""
        rec = self._by_name.get(name)
        return rec.state if rec is not None and rec.state not in _GONE else None

    def add(self, rec: ActorRecord) -> None:
        self._by_name[rec.name] = rec

    def bind(self, rec: ActorRecord) -> None:
        """Route frames from ``rec.identity`` (its current incarnation) to ``rec``."""
        self._by_identity[rec.identity] = rec

    def unbind(self, identity: bytes) -> None:
        self._by_identity.pop(identity, None)

    def by_identity(self, identity: bytes) -> ActorRecord | None:
        return self._by_identity.get(identity)

    async def wait_ready(self, name: str, timeout: float | None) -> ActorRecord:
        """The record of ``name`` once it is ready, waiting for it to join first if it is not here."""
        rec = self._by_name.get(name)
        if rec is None or rec.state in _GONE:
            fut = self._joined.get(name)
            if fut is None:
                fut = self._joined[name] = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            rec = self._by_name[name]
        if rec.state != "ready":
            await asyncio.wait_for(asyncio.shield(rec.ready), timeout)
        return rec

    def announce_ready(self, rec: ActorRecord) -> None:
        settle(self._joined.pop(rec.name, None))
