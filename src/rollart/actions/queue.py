"""The unified FCFS action queue (ARL-Tangram §4.2: FCFS order avoids starving any trajectory)."""
from __future__ import annotations

from typing import Iterator, Optional

from rollart.actions.action import Action


class ActionQueue:
    """First-come first-served; removal by id (cancelled actions) keeps the others' order."""

    def __init__(self) -> None:
        self._items: dict[int, Action] = {}  # insertion-ordered

    def push(self, action: Action) -> None:
        if action.id in self._items:
            raise ValueError(f"action #{action.id} is already queued")
        self._items[action.id] = action

    def remove(self, action_id: int) -> Optional[Action]:
        """Drop a queued action (idempotent: unknown ids return None)."""
        return self._items.pop(action_id, None)

    def head(self, n: Optional[int] = None) -> list[Action]:
        """The first ``n`` actions in arrival order (all if None)."""
        if n is None:
            return list(self._items.values())
        out = []
        for a in self._items.values():
            if len(out) >= n:
                break
            out.append(a)
        return out

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Action]:
        return iter(list(self._items.values()))

    def __contains__(self, action_id: int) -> bool:
        return action_id in self._items
