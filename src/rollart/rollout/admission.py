"""The proxy's suspend/resume gate (weight-sync steps ② and ④ of RollArt §6.2).

While suspended, new requests wait here in arrival order; requests already running are not touched.
``resume`` admits every waiter (FIFO); ``refuse`` turns away one trajectory's waiters (its abort).
"""
from __future__ import annotations

import asyncio


class AdmissionGate:
    """Holds back new requests while suspended; plain asyncio futures, no polling."""

    def __init__(self) -> None:
        self.suspended = False
        self._waiters: list[tuple[str, asyncio.Future]] = []

    def suspend(self) -> None:
        self.suspended = True

    def resume(self) -> None:
        self.suspended = False
        waiters, self._waiters = self._waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(True)

    async def wait(self, trajectory_id: str) -> bool:
        """Wait until resumed (True) or this trajectory is refused meanwhile (False)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((trajectory_id, fut))
        try:
            return await fut
        finally:
            self._waiters = [(t, f) for t, f in self._waiters if f is not fut]

    def refuse(self, trajectory_id: str) -> int:
        """Release this trajectory's waiting requests as not admitted; returns how many there were."""
        n = 0
        for tid, fut in list(self._waiters):
            if tid == trajectory_id and not fut.done():
                fut.set_result(False)
                n += 1
        self._waiters = [(t, f) for t, f in self._waiters if not f.done()]
        return n
