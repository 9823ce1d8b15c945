"""RolloutScheduler: GRPO groups of trajectories, redundant env rollouts, continuous production.

A group is ``group_size`` rollouts of one task instance (same env id, same reset seed); its task name
routes generation through hw_mapping. ``extra_envs_per_group`` launches more envs than
needed and ``extra_groups`` more groups than needed (RollArt §6.3): as soon as a group has its
target of complete trajectories its extras are cancelled (generation aborted via task cancellation,
env released), and as soon as a batch has its groups the extra groups are cancelled. A trajectory
that fails is replaced (same seed) while the group could still fall short; a group holding a finished member
that began too long ago to be trained (the per-turn α bound, ``SampleBuffer.can_join``) stops at once instead of
completing only to be evicted; and a group expected to outlast what is left of its start version's window waits
for the next version instead of starting (``defer_late_starts``). With several tasks, each task's share of the
groups started and of the batches follows its weight (``keep_task_mix``, ``TaskMix``): a group that is lost has
its task drawn again. A group that is not trained (cut, evicted, a cancelled extra) has its task instance dealt
again, a dataset row or an env's reset seed, so that neither the bound nor redundancy trains the instances with
short trajectories more than the others (an env seed whose envs failed is not dealt again). Every trajectory
interacts at its own pace (trajectory-level interaction, RollArt §6.1); the batched baseline of Fig. 5b wraps the
env manager (``rollart.sim.batched``).

``collect_batch(G)`` gathers one batch; ``run()`` keeps producing scored groups into the SampleBuffer
(asynchronous training) with at most ``max_concurrency`` envs open.
"""
from __future__ import annotations

import asyncio
import itertools
import random
import re
import time
from collections import Counter

from rollart.rollout.row_order import RowOrder
from rollart.rollout.scheduler_config import SchedulerConfig
from rollart.rollout.buffer import BufferClosed, SampleBuffer
from rollart.rollout.env_manager import EnvManager, TaskSpec
from rollart.rollout.late_starts import LateStarts
from rollart.rollout.task_mix import TaskMix
from rollart.rewards.dispatch import RewardDispatcher
from rollart.types import Trajectory


class RolloutError(RuntimeError):
    """Rollout cannot make progress (e.g. every group fails); the message names the common reasons."""


class _Group:
    """Book-keeping of one GRPO group while it runs."""

    def __init__(self, group_id: str, task: TaskSpec, seed: int):
        self.group_id, self.task, self.seed = group_id, task, seed
        self.results: asyncio.Queue[Trajectory] = asyncio.Queue()
        self.dropping = False  # set before the scheduler cancels this group's extras
        self.stale = False
        """The group stopped because a member it holds began too long ago to be trained (``SampleBuffer.can_join``)."""


class RolloutScheduler:
    """See module docstring."""

    def __init__(self, tasks: list[TaskSpec], manager: EnvManager, config: SchedulerConfig | None = None,
                 buffer: SampleBuffer | None = None, rewards: RewardDispatcher | None = None):
        if not tasks:
            raise ValueError("RolloutScheduler needs at least one TaskSpec")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must be unique (hw_mapping routes by task name): {names}")
        _check_env_ids(tasks, manager)
        self.tasks = tasks
        self.manager = manager
        self.config = config or SchedulerConfig()
        self.buffer = buffer
        self.rewards = rewards or RewardDispatcher()
        self._slots = asyncio.Semaphore(self.config.max_concurrency)
        self._rng = random.Random(self.config.seed)
        self.mix = TaskMix.of(tasks) if self.config.keep_task_mix else None
        """Which task each group is, and (through the buffer) each batch's quota of each task; None: drawn at random."""
        if buffer is not None:
            buffer.task_mix = self.mix
            buffer.on_evicted = lambda group: self._lost(group[0].task, group[0].info.get("seed"))
        self.row_orders = {t.name: RowOrder(t.rows, seed=self.config.seed) for t in tasks if t.rows}
        """Per dataset task: the order its rows are dealt in (one row per group, each once per epoch; a group that
        is not trained has its row dealt again)."""
        self.seeds_again: dict[str, list[int]] = {t.name: [] for t in tasks if not t.rows}
        """Per env task (no rows): the reset seeds of groups that were not trained for a reason other than their
        envs failing (cut by the staleness bound, evicted, cancelled extras), dealt again before new ones are drawn:
        neither the bound nor redundancy may leave out the instances whose trajectories run long."""
        self._group_ids = itertools.count()
        self._failed_in_a_row = 0
        self.counters: Counter = Counter()
        self.reasons: Counter = Counter()
        """Why trajectories did not make it into a group: 'failed: ...' / 'aborted: ...', numbers replaced by N
        so that reasons differing only in ids or ports count together."""
        self.reason_examples: dict[str, str] = {}
        """One exact reason text (the first seen, up to 400 characters) for each key of ``reasons``."""
        self.late = LateStarts(buffer, self.config.defer_late_starts, self.counters) if buffer is not None else None
        """When ``run()``'s groups start under the per-turn bound, and which task it starves."""

    # ------------------------------------------------------------------ public API
    async def collect_batch(self, num_groups: int) -> list[list[Trajectory]]:
        """Run groups until ``num_groups`` are complete; cancel the extras; return the groups."""
        if num_groups < 1:
            raise ValueError(f"num_groups must be >= 1, got {num_groups}")
        complete: asyncio.Queue[list[Trajectory] | None] = asyncio.Queue()
        groups: list[list[Trajectory]] = []
        failed = 0
        async with asyncio.TaskGroup() as tg:
            running: dict[asyncio.Task, _Group] = {}

            def launch() -> None:
                group = self._new_group()
                running[tg.create_task(self._group_to_queue(group, complete))] = group

            for _ in range(num_groups + self.config.extra_groups):
                launch()
            while len(groups) < num_groups:
                group = await complete.get()
                if group is None:  # a group could not be completed: try another task instance
                    failed += 1
                    if failed > self.config.max_failed_groups:
                        break
                    launch()
                else:
                    groups.append(group)
            for task, group in running.items():
                if not task.done():
                    task.cancel()  # extra groups: abort their generations, release their envs
                    self._lost(group.task.name, group.seed)
            while not complete.empty():  # extras that completed after the batch was full
                if extra := complete.get_nowait():
                    self._lost(extra[0].task, extra[0].info.get("seed"))
        if len(groups) < num_groups:
            raise RolloutError(self._failure_summary(failed))
        return groups

    async def run(self, max_groups: int | None = None) -> None:
        """Produce scored groups into the buffer until cancelled (or ``max_groups`` deposited)."""
        if self.buffer is None:
            raise RuntimeError("run() deposits into a SampleBuffer: pass buffer= to RolloutScheduler")
        per_group = self.config.group_size + self.config.extra_envs_per_group
        # Twice the groups that fit: a group's finished members free their env slots while its
        # stragglers run, and queued groups take them (envs stay busy; the env semaphore caps them).
        group_slots = asyncio.Semaphore(2 * max(1, -(-self.config.max_concurrency // per_group)))
        try:
            async with asyncio.TaskGroup() as tg:
                launched = 0
                while max_groups is None or launched < max_groups:
                    await group_slots.acquire()
                    await self.buffer.admit_group()
                    tg.create_task(self._group_to_buffer(self._new_group(), group_slots))
                    launched += 1
        except* (RolloutError, BufferClosed) as errors:  # one clear error, not a group of them
            raise errors.exceptions[0] from None

    def rows_trained(self, batch: list[Trajectory]) -> None:
        """The dataset rows of the groups in ``batch`` were trained (a checkpoint deals them no more)."""
        groups = {t.group_id: (t.task, t.info.get("seed")) for t in batch}
        for task, row in groups.values():
            if task in self.row_orders and row is not None:
                self.row_orders[task].settle(int(row))

    def rows_state(self) -> dict[str, dict]:
        """Where each dataset task's row order stands (kept in checkpoints)."""
        return {name: order.state() for name, order in self.row_orders.items()}

    def restore_rows(self, state: dict[str, dict]) -> None:
        """Continue the row orders of a checkpoint: rows not trained before it are dealt first."""
        for name, order_state in state.items():
            if name in self.row_orders and int(order_state["n"]) == self.row_orders[name].n:
                self.row_orders[name] = RowOrder.restore(order_state)

    def reseed(self, seed: int) -> None:
        """Restart the task draws and env reset seeds from ``seed`` (a resumed run draws new task instances)."""
        self._rng.seed(seed)
        for again in self.seeds_again.values():
            again.clear()

    def stats(self) -> dict:
        return {**self.counters, "envs_open": self.manager.pool.live,
                **{f"reason/{k}": v for k, v in self.reasons.most_common(8)}}

    # ------------------------------------------------------------------ groups
    def _new_group(self) -> _Group:
        if self.mix is not None:
            name = self.mix.draw()
            task = next(t for t in self.tasks if t.name == name)
        else:
            task = self._rng.choices(self.tasks, weights=[t.weight for t in self.tasks])[0]
        order, again = self.row_orders.get(task.name), self.seeds_again.get(task.name)
        if order is not None:
            seed = order.next()
        elif again:
            seed = again.pop(0)
            self.counters["groups_dealt_again"] += 1
        else:
            seed = self._rng.randrange(2**31)
        return _Group(f"g{next(self._group_ids)}", task, seed)

    async def _group_to_queue(self, group: _Group, out: asyncio.Queue) -> None:
        trajectories = await self._run_group(group)
        if trajectories is None:
            self._lost(group.task.name, group.seed, failed=not group.stale)
        out.put_nowait(trajectories)

    def _lost(self, task: str, seed: int | None, failed: bool = False) -> None:
        """A group that will not be trained (cut, evicted, an extra, or its envs ``failed``): its task instance comes
        again, a dataset row always (``RowOrder.give_back``), an env task's reset seed unless its envs failed (a seed
        that breaks its env would be tried again and again); and its task is drawn again unless its envs failed."""
        if seed is not None:
            if task in self.row_orders:
                self.row_orders[task].give_back(int(seed))
            elif task in self.seeds_again and not failed:
                self.seeds_again[task].append(int(seed))
        if self.mix is not None:
            (self.mix.failed if failed else self.mix.lost)(task)

    async def _group_to_buffer(self, group: _Group, slots: asyncio.Semaphore) -> None:
        try:
            await self.late.wait_turn(group.task.name)
            started = time.monotonic()
            trajectories = await self._run_group(group)
            if trajectories is not None or group.stale:  # a stale group's time is a lower bound of its duration
                self.late.finished(group.task.name, time.monotonic() - started, cut=group.stale)
            if trajectories is None:
                self._lost(group.task.name, group.seed, failed=not group.stale)
                await self.buffer.discard_group()
                if group.stale:
                    return  # the staleness bound, not the envs: no failure
                self._failed_in_a_row += 1
                if self._failed_in_a_row > self.config.max_failed_groups:
                    raise RolloutError(self._failure_summary(self._failed_in_a_row))
                return
            self._failed_in_a_row = 0
            await self.buffer.put(trajectories)
            self.counters["groups_deposited"] += 1
        finally:
            slots.release()

    def _failure_summary(self, failed: int) -> str:
        reasons = "; ".join(f"{self.reason_examples.get(r, r)} (x{n})" for r, n in self.reasons.most_common(3))
        return (f"{failed} GRPO groups in a row could not be completed (max_failed_groups="
                f"{self.config.max_failed_groups}); most common reasons: {reasons or 'none recorded'}")

    async def _run_group(self, group: _Group) -> list[Trajectory] | None:
        """The group's complete trajectories (exactly group_size), or None if it cannot be completed."""
        cfg = self.config
        done: list[Trajectory] = []
        replacements = 0
        async with asyncio.TaskGroup() as tg:
            members = []

            def launch() -> None:
                members.append(tg.create_task(self._trajectory(group, len(members))))
                self.counters["launched"] += 1

            for _ in range(cfg.group_size + cfg.extra_envs_per_group):
                launch()
            finished = 0
            while len(done) < cfg.group_size:
                if finished == len(members):
                    break  # every member finished and the group is short
                try:
                    traj = await group.results.get()
                except asyncio.CancelledError:
                    group.dropping = True  # the whole group is dropped: its members must not report
                    raise
                finished += 1
                if traj.status == "done":
                    done.append(traj)
                if len(done) < cfg.group_size and self._stale_members(done):
                    group.stale = True  # nothing it completes could be trained: free its envs for a group that can
                    self.counters["groups_stale"] += 1
                    break
                if traj.status == "done":
                    continue
                key = f"{traj.status}: " + re.sub(r"\d+", "N", traj.reason)[:120]
                self.reasons[key] += 1
                self.reason_examples.setdefault(key, f"{traj.status}: {traj.reason}"[:400])
                self.counters[traj.status] += 1
                running = len(members) - finished
                if len(done) + running < cfg.group_size and replacements < cfg.max_replacements:
                    replacements += 1
                    self.counters["replaced"] += 1
                    launch()
            group.dropping = True
            for member in members:
                if not member.done():
                    member.cancel()  # redundant extras (or a stale group's members): generation aborted, env released
                    self.counters["cancelled_stale" if group.stale else "cancelled_extras"] += 1
        if len(done) < cfg.group_size:
            if not group.stale:
                self.counters["groups_failed"] += 1
            return None
        self.counters["groups_complete"] += 1
        return done

    def _stale_members(self, done: list[Trajectory]) -> bool:
        return self.buffer is not None and not all(self.buffer.can_join(t.start_version) for t in done)

    async def _trajectory(self, group: _Group, index: int) -> None:
        tid = f"{group.group_id}-{index}"
        try:
            async with self._slots:
                traj = await self.manager.run(group.task, tid, group.group_id, group.seed)
                if traj.status == "done":
                    await self.rewards.score(traj)  # scored the moment it finishes
        except asyncio.CancelledError:
            if group.dropping:
                raise
            # cancelled by the staleness gate while releasing its env: report it, never hang the group
            traj = Trajectory(trajectory_id=tid, group_id=group.group_id, task=group.task.name,
                              status="aborted", reason="cancelled by the staleness gate")
            asyncio.current_task().uncancel()
        group.results.put_nowait(traj)


def _check_env_ids(tasks: list[TaskSpec], manager: EnvManager) -> None:
    """Unknown env ids fail at construction with gymnasium's "did you mean" — for in-process hosts
    (remote hosts may register envs this process does not know; their errors come per trajectory)."""
    from rollart.rollout.env_host import EnvHost

    if not all(isinstance(h, EnvHost) for h in manager.pool.host_objects):
        return
    import gymnasium as gym

    for task in tasks:
        if not hasattr(task, "env_id"):
            continue  # an agent task (rollart.gateway.agent_task): no env
        try:
            gym.spec(task.env_id)
        except gym.error.Error as e:
            raise ValueError(f"task {task.name!r}: {e}") from None
