"""The task mix of the batches: each task's share of the groups trained follows its weight (``rollout.keep_task_mix``).

Groups of different tasks take different times. A batch formed of whatever finished first holds more of the quick
tasks than their weights ask for, and under the per-turn α bound (RollArt §6.2) a task whose groups outlast the
window is hardly trained at all: ``tools/bench/async_training.py`` trained its GEM-math stand-in at 3 % of the
batches against the 20 % its weight asks for. Multi-task pipelines give each task its number of groups per batch;
``TaskMix`` does so for weights that need not divide the batch:

- ``draw()``: the task of the next group to start, the one furthest below its share of the groups kept (started and
  not lost: running, buffered, taken or failed);
- ``quota(count)``: how many groups of each task the next batch takes, so that each task's share of all the groups
  settled (taken, or failed) stays within a group of its weight's;
- ``pick(groups, count)``: which buffered groups fill that quota (each task's in the order given), and so which tasks
  the batch still lacks (``lacking``).

A group cut by the staleness bound or evicted is lost: its task is drawn again. A group whose envs failed is settled
as if taken, so a task whose envs keep failing is trained less, but never holds up the batches or the other tasks.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollart.rollout.env_manager import TaskSpec
    from rollart.types import Trajectory


class TaskMix:
    """See the module docstring."""

    def __init__(self, weights: dict[str, float]):
        if not weights or min(weights.values()) <= 0:
            raise ValueError(f"a task mix needs tasks with weights > 0, got {weights}")
        total = sum(weights.values())
        self.shares = {name: w / total for name, w in weights.items()}
        self.kept: Counter[str] = Counter()
        """Per task: groups drawn and not lost (running, buffered, taken or failed)."""
        self.settled: Counter[str] = Counter()
        """Per task: groups taken into batches, or failed."""
        self.lacking: set[str] = set()
        """The tasks the batch being formed still lacks (set by ``pick``, cleared by ``took``)."""
        self.unmet = 0
        """Batches formed first come first because no group of a task they lacked could come (``choose``; the buffer's
        stats report it as ``mix_unmet``)."""

    @classmethod
    def of(cls, tasks: Sequence[TaskSpec]) -> TaskMix | None:
        """The mix of ``tasks`` by their weights; None for one task (there is nothing to mix)."""
        return cls({t.name: t.weight for t in tasks}) if len(tasks) > 1 else None

    def draw(self) -> str:
        n = sum(self.kept.values()) + 1
        name = max(self.shares, key=lambda task: self.shares[task] * n - self.kept[task])
        self.kept[name] += 1
        return name

    def lost(self, task: str) -> None:
        """A group of ``task`` was cut or evicted: its task is drawn again."""
        self.kept[task] -= 1

    def failed(self, task: str) -> None:
        """A group of ``task`` could not be completed (its envs failed): settled, not drawn again."""
        self.settled[task] += 1

    def quota(self, count: int) -> Counter[str]:
        n = sum(self.settled.values()) + count
        want = {task: share * n - self.settled[task] for task, share in self.shares.items()}
        quota: Counter[str] = Counter()
        for _ in range(count):
            task = max(want, key=want.__getitem__)
            quota[task] += 1
            want[task] -= 1
        return quota

    def pick(self, groups: Sequence[list[Trajectory]], count: int) -> list[int]:
        """Indices into ``groups`` of the next batch's groups, each task's first ones; [] while the batch lacks a task."""
        need = self.quota(count)
        picked = []
        for i, group in enumerate(groups):
            if need[group[0].task] > 0:
                need[group[0].task] -= 1
                picked.append(i)
        self.lacking = {task for task, k in need.items() if k > 0}
        return [] if self.lacking else picked

    def choose(self, groups: Sequence[list[Trajectory]], count: int, can_start: bool, full: bool) -> list[int]:
        """The next batch's groups (indices into ``groups``): each task's quota, or [] to wait for a task the batch
        lacks while the buffer has room (not ``full``) and a group of that task runs or can start (``can_start``).
        When none can come, the first ``count`` groups this once (``unmet`` counts it): the batch never waits for
        ever."""
        picked = self.pick(groups, count)
        if picked or (not full and (can_start or any(self.coming(task, groups) > 0 for task in self.lacking))):
            return picked
        self.unmet += 1
        return list(range(count))

    def took(self, groups: Sequence[list[Trajectory]]) -> None:
        self.settled.update(group[0].task for group in groups)
        self.lacking = set()

    def coming(self, task: str, buffered: Sequence[list[Trajectory]]) -> int:
        """Groups of ``task`` drawn and neither lost, settled nor among ``buffered``: running or about to."""
        return self.kept[task] - self.settled[task] - sum(group[0].task == task for group in buffered)
