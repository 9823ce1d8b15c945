"""``RestartPolicy``: how often, and how soon, a dead actor is started again in place."""
from __future__ import annotations

from dataclasses import dataclass

from rollart.config import ConfigError


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
