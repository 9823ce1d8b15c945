"""SampleBuffer: versioned store of scored GRPO groups, and the asynchronous bound α (RollArt §6.2).

The trainer pipeline calls ``set_version(n)`` when the inference workers switch to version n (the
"current agent LLM" of RollArt §6.2) and ``await get_batch(B)``
for whole GRPO groups. The scheduler deposits finished groups with ``await put(group)`` (it blocks
while the buffer is full: backpressure). Modes, all in this one class:

- ``async`` (ROLLART, default α=1): a trajectory that began under a version older than n−α is aborted
  even mid-flight — checked before every generation (``admit_turn``) and, for trajectories already
  generating, by cancelling them in ``set_version`` — and stale groups are evicted before a batch forms
  (the pipeline also bounds starts with ``max_outstanding_groups``, as for areal: a batch's groups count
  against it until its train step is done);
- ``areal``: the bound is checked only when a trajectory starts (AReaL); in-flight trajectories
  are never aborted and finished ones never evicted for staleness — only the capacity throttles;
- ``oneoff``: start-only like areal with α=1, but groups started before n−1 are evicted at batch time;
- ``sync``: ``async`` with α=0: every batch comes entirely from the current version.

Capacity (trajectories) bounds what is held: with E concurrent envs, (α+1)·E keeps it O(α·E). With a ``TaskMix``
(``rollout.keep_task_mix``, several tasks) a batch takes each task's quota of groups and waits for a task it lacks
while a group of it runs or can still start.
Accounting: ``accepted == trained + evicted (by reason) + buffered`` always holds.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import Callable

from rollart.rollout.buffer_config import BufferConfig
from rollart.rollout.late_starts import VersionClock
from rollart.rollout.task_mix import TaskMix
from rollart.types import Trajectory
from rollart.versions import trained_versions


class BufferClosed(RuntimeError):
    """The buffer was closed while a caller waited on it."""


class SampleBuffer:
    """See module docstring."""

    def __init__(self, config: BufferConfig | None = None, version: int = 0,
                 version_clock: VersionClock | None = None):
        self.config = config or BufferConfig()
        self.version_clock = version_clock or VersionClock()
        """When the last versions came (``rollart.rollout.late_starts``)."""
        self.version = version
        self.groups: deque[list[Trajectory]] = deque()
        self.buffered = 0
        self.max_buffered = 0
        self.counters: Counter = Counter()
        """accepted, trained (trajectories); groups_accepted, groups_trained."""
        self.evicted: Counter = Counter()
        """Trajectories evicted from the buffer, by reason."""
        self.aborted: Counter = Counter()
        """In-flight trajectories aborted by the gate, by reason (never entered the buffer)."""
        self._inflight: dict[str, tuple[int, asyncio.Task]] = {}
        self._stale: dict[str, str] = {}
        self._changed = asyncio.Condition()
        self._closed = False
        self.outstanding_groups = 0
        """Groups admitted to start and not yet discarded or trained (see max_outstanding_groups)."""
        self._taken: deque[int] = deque()
        """Groups of each batch ``get_batch`` gave out whose train step is not done (oldest first)."""
        self._retired_before = self.window_start()
        """Per-turn modes: trajectories begun before this version can join no batch (the window's start, or further
        on once ``retire_before_next`` has retired what the next batch cannot take)."""
        self.task_mix: TaskMix | None = None
        """The batches' task mix, set by the RolloutScheduler that fills the buffer (None: first come first)."""
        self.on_evicted: Callable[[list[Trajectory]], None] | None = None
        """Called with each group that leaves untrained: the RolloutScheduler that fills the buffer draws its task
        again (``task_mix``) and deals its task instance again."""

    # ------------------------------------------------------------------ the gate (EnvManager side)
    @property
    def per_turn(self) -> bool:
        return self.config.mode in ("async", "sync")

    def window_start(self) -> int:
        return self.version - self.config.alpha

    def admit_turn(self, start_version: int, first_turn: bool) -> str | None:
        """None if a trajectory started at ``start_version`` may generate again, else the reason."""
        if not (self.per_turn or first_turn):
            return None
        if start_version < self.window_start():
            reason = (f"stale: started at version {start_version}, current {self.version}, "
                      f"alpha {self.config.alpha}")
            self.aborted["stale"] += 1
            return reason
        return None

    def can_join(self, start_version: int) -> bool:
        """Whether a trajectory begun at ``start_version`` can still be trained (a group holding one that cannot
        is dropped whole when it completes: the scheduler stops such a group at once)."""
        return not self.per_turn or start_version >= max(self._retired_before, self.window_start())

    def track(self, trajectory_id: str, start_version: int, task: asyncio.Task) -> None:
        self._inflight[trajectory_id] = (start_version, task)

    def untrack(self, trajectory_id: str) -> None:
        self._inflight.pop(trajectory_id, None)
        self._stale.pop(trajectory_id, None)

    def stale_reason(self, trajectory_id: str) -> str | None:
        return self._stale.get(trajectory_id)

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    async def admit_group(self) -> None:
        """Wait until one more group may start (``max_outstanding_groups``), then count it."""
        limit = self.config.max_outstanding_groups
        async with self._changed:
            while limit and self.outstanding_groups >= limit:
                self._raise_if_closed()
                await self._changed.wait()
            self._raise_if_closed()
            self.outstanding_groups += 1
            self.counters["outstanding_groups_max"] = max(self.counters["outstanding_groups_max"],
                                                          self.outstanding_groups)
            self._changed.notify_all()  # a batch waiting for a task sees whether a group of it can still start

    async def discard_group(self) -> None:
        """An admitted group ended without reaching the buffer (it failed): it no longer counts."""
        async with self._changed:
            self._settle_group()
            self._changed.notify_all()

    # ------------------------------------------------------------------ the trainer side
    async def set_version(self, version: int) -> None:
        """New policy version: abort in-flight trajectories and evict groups that left the window."""
        if version < self.version:
            raise ValueError(f"versions only go forward: {version} < current {self.version}")
        if version > self.version:
            self.version_clock.came()
        self.version = version
        if self.per_turn:
            self._abort_inflight_before(self.window_start(), "stale_midflight", "stale mid-flight: started at "
                                        f"version {{start}}, current {version}, alpha {self.config.alpha}")
        async with self._changed:
            self._evict_stale()
            self._changed.notify_all()

    async def batch_trained(self) -> None:
        """The oldest batch ``get_batch`` gave out is trained: its groups no longer count against
        ``max_outstanding_groups``."""
        async with self._changed:
            if self._taken:
                self.outstanding_groups = max(0, self.outstanding_groups - self._taken.popleft())
            self._changed.notify_all()

    async def rewind(self, version: int) -> tuple[int, int]:
        """The policy went back to ``version`` (its trainer restarted from a checkpoint). Samples newer than
        it came from weights that are gone: by the alpha rule, a buffered group is kept when its newest
        trained token is at most ``version + alpha``, else dropped, and in-flight trajectories that started
        after ``version + alpha`` are aborted. Returns (trajectories kept, trajectories dropped)."""
        limit = version + self.config.alpha
        self.version = version
        self._retired_before = self.window_start()
        self.version_clock.reset()
        while self._taken:  # the batches in training went with the trainer: their replays hold back no starts
            self.outstanding_groups = max(0, self.outstanding_groups - self._taken.popleft())
        for tid, (start, task) in list(self._inflight.items()):
            if start > limit and tid not in self._stale:
                self._stale[tid] = f"rewound: started at version {start}, policy back at {version}"
                self.aborted["rewound"] += 1
                task.cancel()
        dropped = 0
        async with self._changed:
            groups: deque[list[Trajectory]] = deque()
            for group in self.groups:
                newest = max(max(trained_versions(t), default=t.start_version) for t in group)
                if newest > limit:
                    self._drop(group, "rewound")
                    self.buffered -= len(group)
                    dropped += len(group)
                else:
                    groups.append(group)
            self.groups = groups
            dropped += self._evict_stale()
            self._changed.notify_all()
        return self.buffered, dropped

    async def retire_before_next(self, next_version: int) -> int:
        """The next batch will be formed at version >= ``next_version``: abort in-flight trajectories and
        evict buffered groups that started before its window (``next_version - alpha``) now, instead of
        at that update — they can join no batch, and their env slots go to trajectories that can
        (per-turn modes; the coordinator calls it right after taking a batch). Returns how many."""
        if not self.per_turn:
            return 0
        cutoff = next_version - self.config.alpha
        self._retired_before = max(self._retired_before, cutoff)
        n = self._abort_inflight_before(cutoff, "stale_ahead", "started at version {start}: cannot join the "
                                        f"next batch (version >= {next_version}, alpha {self.config.alpha})")
        async with self._changed:
            n += self._evict_stale(cutoff, reason="stale_ahead")
            self._changed.notify_all()
        return n

    async def get_batch(self, n: int) -> list[Trajectory]:
        """Block until ``n`` fresh trajectories (whole groups, each task's quota with a task mix) are buffered; return
        them, first come first (in per-turn modes those begun longest ago first: a short task's groups that finished
        since must not push them out)."""
        g = self.config.group_size
        if n < g or n % g or n > self.config.capacity:
            raise ValueError(f"batch size {n} must be a multiple of group_size {g} and <= capacity "
                             f"{self.config.capacity}")
        async with self._changed:
            while True:
                self._raise_if_closed()
                self._evict_stale()
                if self.buffered >= n and (picked := self._pick(n // g)):
                    break
                await self._changed.wait()
            taken = [self.groups[i] for i in picked]
            chosen = set(picked)
            self.groups = deque(group for i, group in enumerate(self.groups) if i not in chosen)
            if self.task_mix is not None:
                self.task_mix.took(taken)
            batch = [t for group in taken for t in group]
            self.buffered -= n
            self.counters["groups_trained"] += len(taken)
            self._taken.append(n // g)  # they count until their train step is done (batch_trained)
            self.counters["trained"] += len(batch)
            self._changed.notify_all()
            return batch

    async def until_next_version_or_lacking(self, task: str, timeout: float) -> None:
        """Wait until the version moves on, the batch being formed lacks ``task``, or ``timeout`` seconds pass (a
        group held back for the next version starts at once when the batch waits for its task)."""
        version = self.version
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(
                    lambda: self.version != version or self._closed or self.lacks(task)), timeout)

    def lacks(self, task: str) -> bool:
        """Whether the batch being formed waits for a group of ``task`` (with a task mix)."""
        return self.task_mix is not None and task in self.task_mix.lacking

    # ------------------------------------------------------------------ the scheduler side
    async def put(self, group: list[Trajectory]) -> bool:
        """Deposit one scored group (waits while full). False if it arrived already stale (evicted)."""
        if len(group) != self.config.group_size:
            raise ValueError(f"a group must have group_size={self.config.group_size} trajectories, "
                             f"got {len(group)}")
        async with self._changed:
            while self.buffered + len(group) > self.config.capacity:
                self._raise_if_closed()
                await self._changed.wait()
            self._raise_if_closed()
            self.counters["accepted"] += len(group)
            self.counters["groups_accepted"] += 1
            if self._is_stale(group):
                self._drop(group, "stale_on_arrival")
                self._changed.notify_all()
                return False
            self.groups.append(group)
            self.buffered += len(group)
            self.max_buffered = max(self.max_buffered, self.buffered)
            self._changed.notify_all()
            return True

    async def close(self) -> None:
        """Wake every waiter with BufferClosed (shutdown)."""
        self._closed = True
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ accounting
    def stats(self) -> dict:
        return {"version": self.version, "buffered": self.buffered, "max_buffered": self.max_buffered,
                "inflight": self.inflight, **self.counters,
                "evicted": sum(self.evicted.values()), "aborted": sum(self.aborted.values()),
                **{f"evicted/{k}": v for k, v in self.evicted.items()},
                **{f"aborted/{k}": v for k, v in self.aborted.items()},
                **({"mix_unmet": self.task_mix.unmet} if self.task_mix is not None else {})}

    def accounting_ok(self) -> bool:
        return self.counters["accepted"] == (self.counters["trained"] + sum(self.evicted.values())
                                             + self.buffered)

    # ------------------------------------------------------------------ internals
    def _pick(self, count: int) -> list[int]:
        """Indices of the groups the next batch takes; [] while it waits for a task it lacks."""
        if self.per_turn:
            self.groups = deque(sorted(self.groups, key=lambda group: min(t.start_version for t in group)))
        mix = self.task_mix
        if mix is None:
            return list(range(count))
        lacked, limit = mix.lacking, self.config.max_outstanding_groups
        picked = mix.choose(self.groups, count, can_start=not limit or self.outstanding_groups < limit,
                            full=self.buffered + self.config.group_size > self.config.capacity)
        if mix.lacking != lacked:
            self._changed.notify_all()  # held-back groups of a task the batch now lacks start
        return picked

    def _is_stale(self, group: list[Trajectory], cutoff: int | None = None) -> bool:
        if self.config.mode == "areal":
            return False
        return min(t.start_version for t in group) < (self.window_start() if cutoff is None else cutoff)

    def _evict_stale(self, cutoff: int | None = None, reason: str = "stale") -> int:
        if self.config.mode == "areal":
            return 0
        keep: deque[list[Trajectory]] = deque()
        n = 0
        for group in self.groups:
            if self._is_stale(group, cutoff):
                self._drop(group, reason)
                self.buffered -= len(group)
                n += len(group)
            else:
                keep.append(group)
        self.groups = keep
        return n

    def _drop(self, group: list[Trajectory], reason: str) -> None:
        """A group leaves untrained (caller holds the lock, adjusts ``buffered`` and notifies)."""
        self.evicted[reason] += len(group)
        self._settle_group()
        if self.on_evicted is not None:
            self.on_evicted(group)

    def _settle_group(self) -> None:
        """A group left for good (trained, evicted or failed); caller holds the lock and notifies."""
        self.outstanding_groups = max(0, self.outstanding_groups - 1)

    def _abort_inflight_before(self, cutoff: int, counter: str, why: str) -> int:
        n = 0
        for tid, (start, task) in list(self._inflight.items()):
            if start < cutoff and tid not in self._stale:
                self._stale[tid] = why.format(start=start)
                self.aborted[counter] += 1
                task.cancel()
                n += 1
        return n

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise BufferClosed("the sample buffer was closed")
