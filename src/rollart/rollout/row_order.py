"""The order a dataset task's rows are dealt to GRPO groups: ``RowOrder`` deals them epoch after epoch, each epoch
a permutation drawn from (seed, epoch), so every row once per epoch. A dealt row is *outstanding* until its group
is trained (``settle``: logged as trained in its epoch) or fails (``give_back``: dealt again next, still in its
epoch). The state (epoch, rows dealt, rows outstanding or handed back, the trained log) is what a checkpoint
keeps: a resumed run deals the rows whose groups had not been trained first (regenerated from the same rows),
so across any number of stops and resumes every row of an epoch is trained exactly once."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from rollart.config import ConfigError


def episode_seeds(rows: int, episodes: int, base: int) -> range:
    """Reset seeds of ``episodes`` evaluation episodes of a task: its first ``rows`` (each at most once) when it has
    rows, else ``base``, ``base + 1``, ..."""
    return range(min(episodes, rows)) if rows else range(base, base + episodes)


@dataclass
class RowOrder:
    """Deals ``n`` rows (indices 0..n-1 of a task's split) epoch after epoch, each epoch in its own order."""
    n: int
    seed: int = 0
    epoch: int = 0
    """Epochs completed."""
    dealt: int = 0
    """Rows of the current epoch dealt so far."""
    again: list[tuple[int, int]] = field(default_factory=list)
    """(row, epoch) to deal before the order goes on: handed back, or not trained before a resume."""
    trained: list[tuple[int, int]] = field(default_factory=list)
    """(epoch, row) of every group trained, in order (what a checkpoint proves was trained)."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError("a dataset task needs at least one training row")
        self._perm = self._permutation(self.epoch)
        self.outstanding: dict[int, list[int]] = {}
        """Row -> the epochs of its deals whose groups are neither trained nor failed yet."""

    def _permutation(self, epoch: int) -> list[int]:
        perm = list(range(self.n))
        random.Random(f"order/{self.seed}/{epoch}").shuffle(perm)
        return perm

    def next(self) -> int:
        """The next row index."""
        if self.again:
            row, epoch = self.again.pop(0)
        else:
            if self.dealt == self.n:
                self.epoch, self.dealt = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            row, epoch = self._perm[self.dealt], self.epoch
            self.dealt += 1
        self.outstanding.setdefault(row, []).append(epoch)
        return row

    def _close(self, row: int) -> int | None:
        """The epoch of ``row``'s oldest outstanding deal, no longer outstanding (None: not outstanding)."""
        epochs = self.outstanding.get(row)
        if not epochs:
            return None
        epoch = epochs.pop(0)
        if not epochs:
            del self.outstanding[row]
        return epoch

    def settle(self, row: int) -> None:
        """``row``'s group was trained."""
        epoch = self._close(row)
        if epoch is not None:
            self.trained.append((epoch, row))

    def give_back(self, row: int) -> None:
        """``row``'s group failed: deal it again next."""
        epoch = self._close(row)
        if epoch is not None:
            self.again.append((row, epoch))

    def trained_in(self, epoch: int) -> list[int]:
        """The rows trained in ``epoch``, in the order they were trained."""
        return [row for e, row in self.trained if e == epoch]

    def state(self) -> dict:
        """Where the order stands; the rows not trained yet are dealt first after a resume."""
        pending = [(row, e) for row, epochs in sorted(self.outstanding.items()) for e in epochs]
        return {"n": self.n, "seed": self.seed, "epoch": self.epoch, "dealt": self.dealt,
                "again": [list(x) for x in [*self.again, *sorted(pending, key=lambda x: (x[1], x[0]))]],
                "trained": [list(x) for x in self.trained]}

    @classmethod
    def restore(cls, state: dict) -> "RowOrder":
        return cls(int(state["n"]), int(state["seed"]), int(state["epoch"]), int(state["dealt"]),
                   [(int(r), int(e)) for r, e in state.get("again", [])],
                   [(int(e), int(r)) for e, r in state.get("trained", [])])
