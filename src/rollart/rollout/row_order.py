"""The order a dataset task's rows are dealt to GRPO groups: ``RowOrder`` deals them epoch after epoch, each epoch
a permutation drawn from (seed, epoch), so every row once per epoch. A row is *outstanding* from when it is dealt
until its group is trained (``settle``); a group that fails hands its row back (``give_back``) and the row is
dealt again next. Its state (epoch, rows dealt, rows outstanding or handed back) is what a checkpoint keeps: a
resumed run deals the rows whose groups had not been trained first, so it skips no row and trains none twice."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from rollart.config import ConfigError


@dataclass
class RowOrder:
    """Deals ``n`` rows (indices 0..n-1 of a task's split) epoch after epoch, each epoch in its own order."""
    n: int
    seed: int = 0
    epoch: int = 0
    """Epochs completed."""
    dealt: int = 0
    """Rows of the current epoch dealt so far."""
    again: list[int] = field(default_factory=list)
    """Rows to deal before the order goes on (handed back, or not trained before a resume)."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError("a dataset task needs at least one training row")
        self._perm = self._permutation(self.epoch)
        self.outstanding: Counter[int] = Counter()
        """Rows dealt whose groups are not trained yet."""

    def _permutation(self, epoch: int) -> list[int]:
        perm = list(range(self.n))
        random.Random(f"order/{self.seed}/{epoch}").shuffle(perm)
        return perm

    def next(self) -> int:
        """The next row index."""
        if self.again:
            row = self.again.pop(0)
        else:
            if self.dealt == self.n:
                self.epoch, self.dealt = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            row = self._perm[self.dealt]
            self.dealt += 1
        self.outstanding[row] += 1
        return row

    def settle(self, row: int) -> None:
        """``row``'s group was trained."""
        if self.outstanding[row] > 0:
            self.outstanding[row] -= 1
        if not self.outstanding[row]:
            del self.outstanding[row]

    def give_back(self, row: int) -> None:
        """``row``'s group failed: deal it again next."""
        self.settle(row)
        self.again.append(row)

    def state(self) -> dict:
        """Where the order stands, the rows not yet trained to be dealt first after a resume."""
        return {"n": self.n, "seed": self.seed, "epoch": self.epoch, "dealt": self.dealt,
                "again": [*self.again, *sorted(self.outstanding.elements())]}

    @classmethod
    def restore(cls, state: dict) -> "RowOrder":
        return cls(int(state["n"]), int(state["seed"]), int(state["epoch"]), int(state["dealt"]),
                   [int(r) for r in state.get("again", [])])
