"""DaemonThreadPool: the daemon threads an ``EnvHost`` runs blocking env calls on, and the single-timer
watchdog that times those calls out.

Results return to the event loop in batches through a per-loop mailbox; a hung call strands only its
own daemon thread (``abandon`` writes it off and a replacement can start), never the loop.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import queue
import threading
from typing import Any, Callable


class _Mailbox:
    """Finished pool calls on their way back to one event loop, handed over in batches.

    The first completion after a drain schedules one drain (one self-pipe write wakes the loop);
    completions arriving before that drain runs only queue. When many envs finish together (a
    lockstep turn) that is one wake-up and one loop callback for the burst instead of one each.
    """
    __slots__ = ("loop", "items", "scheduled", "on_done")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_done: Callable[["_Job"], None]):
        self.loop = loop
        self.items: collections.deque = collections.deque()
        self.scheduled = threading.Lock()
        """Held while a drain is scheduled: taken without blocking, so no thread ever waits on it."""
        self.on_done = on_done

    def post(self, job: "_Job", ok: bool, value: Any) -> None:
        """From a pool thread: ``job`` finished (or was skipped); resolve its future on the loop."""
        self.items.append((job, ok, value))  # before testing `scheduled`: see drain()
        if not self.scheduled.acquire(blocking=False):
            return  # a drain is pending; it releases `scheduled` before popping, so it takes this
        try:
            self.loop.call_soon_threadsafe(self.drain)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    def drain(self) -> None:
        """On the loop: settle every queued job. ``scheduled`` is released before popping, so an item
        appended after this drain found the queue empty schedules a drain of its own."""
        self.scheduled.release()
        items, on_done = self.items, self.on_done
        while items:
            job, ok, value = items.popleft()
            on_done(job)
            future = job.future
            if future is not None and not future.done():
                future.set_result(value) if ok else future.set_exception(value)


class _Job:
    """One call queued on the pool; its outcome comes back through ``mailbox`` (None: nobody waits)."""
    __slots__ = ("fn", "args", "mailbox", "future", "started", "abandoned", "counted", "deadline")

    def __init__(self, fn: Callable, args: tuple, mailbox: _Mailbox | None, wait: bool):
        self.fn, self.args, self.mailbox = fn, args, mailbox
        self.future = mailbox.loop.create_future() if wait and mailbox is not None else None
        self.started = self.abandoned = False
        self.counted = mailbox is not None
        """Counts as outstanding in the pool until its completion is drained (or it is abandoned)."""
        self.deadline = 0.0


class _Expired(Exception):
    """A call outlived its timeout (raised into the awaiting coroutine by the watchdog)."""


class _Watchdog:
    """Call timeouts of one host with a single loop timer instead of one timer per call.

    ``watch(job)`` records the job (its ``deadline`` in loop time); ``forget(job)`` when it finished.
    One timer sits at the earliest deadline known when it was set; when it fires it fails every
    overdue call with :class:`_Expired` and re-arms at the earliest remaining deadline. A call times
    out at its deadline exactly as with its own timer; the per-call cost is a dict insert and delete.
    """

    def __init__(self) -> None:
        self.jobs: dict[_Job, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._at = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, job: _Job, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:  # a host used again under a new event loop (another asyncio.run)
            self.jobs = {j: None for j in self.jobs if j.mailbox.loop is loop}
            self._timer, self._at, self._loop = None, float("inf"), loop
        self.jobs[job] = None
        if job.deadline < self._at:
            self._arm(loop, job.deadline)

    def forget(self, job: _Job) -> None:
        self.jobs.pop(job, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._at = when
        self._timer = loop.call_at(when, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer, self._at = None, float("inf")
        now = loop.time() + 1e-6  # the loop may run a timer up to its clock resolution early
        nearest = float("inf")
        for job in list(self.jobs):
            if job.deadline <= now:
                del self.jobs[job]
                if not job.future.done():
                    job.future.set_exception(_Expired())
            elif job.deadline < nearest:
                nearest = job.deadline
        if nearest < float("inf"):
            self._arm(loop, nearest)


class DaemonThreadPool:
    """A growing pool of daemon threads running blocking env calls for an event loop.

    Jobs go through one shared queue; results come back in batches through a per-loop
    :class:`_Mailbox`. The pool's counters are only touched on the loop's thread (no lock shared
    with the workers on the hot path: a contended lock costs two context switches per call when
    many env threads wake together). ``abandon(job)`` writes off a thread stuck in a call: it stops
    counting against ``max_workers`` (a replacement can start) and exits if its call ever returns.
    Daemon threads never block exit.
    """

    def __init__(self, max_workers: int, name: str = "env"):
        self.max_workers = max_workers
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._live = 0
        """Threads counted against max_workers (loop thread only)."""
        self._outstanding = 0
        """Submitted jobs whose completion has not been drained yet, abandoned ones excluded. Over
        all loops, and a closed loop's calls never drain: counting too many only starts a spare thread,
        counting too few would queue a call behind a thread that is still busy."""
        self._ids = itertools.count()
        self._mailboxes: dict[asyncio.AbstractEventLoop, _Mailbox] = {}

    def prestart(self, n: int) -> None:
        """Start idle threads until ``n`` are live."""
        while self._live < min(n, self.max_workers):
            self._live += 1
            self._spawn()

    def run(self, fn: Callable, *args: Any) -> _Job:
        """Queue ``fn(*args)``; await ``job.future`` (an asyncio future of the running loop)."""
        return self._submit(_Job(fn, args, self._mailbox(asyncio.get_running_loop()), wait=True))

    def fire(self, fn: Callable, *args: Any) -> None:
        """Queue ``fn(*args)`` and forget it (best-effort cleanup such as env.close)."""
        try:
            mailbox = self._mailbox(asyncio.get_running_loop())
        except RuntimeError:  # no loop: nothing will drain a completion, so it is not counted
            mailbox = None
        self._submit(_Job(fn, args, mailbox, wait=False))

    def abandon(self, job: _Job) -> None:
        """Write off the thread running ``job`` (a hung call), if it started; from the loop thread."""
        if job.started and not job.abandoned:
            job.abandoned = True
            self._live -= 1
            self._settle(job)

    @property
    def live_threads(self) -> int:
        return self._live

    # ------------------------------------------------------------------ internals
    def _mailbox(self, loop: asyncio.AbstractEventLoop) -> _Mailbox:
        mailbox = self._mailboxes.get(loop)
        if mailbox is None:
            for old in [lp for lp in self._mailboxes if lp.is_closed()]:
                del self._mailboxes[old]  # loops of earlier asyncio.run()s
            mailbox = self._mailboxes[loop] = _Mailbox(loop, self._settle)
        return mailbox

    def _settle(self, job: _Job) -> None:
        if job.counted:
            job.counted = False
            self._outstanding -= 1

    def _submit(self, job: _Job) -> _Job:
        if job.counted:
            self._outstanding += 1
        self._queue.put(job)
        if self._outstanding > self._live and self._live < self.max_workers:
            self._live += 1  # every live thread may be busy: start one more
            self._spawn()
        return job

    def _spawn(self) -> None:
        threading.Thread(target=self._work, name=f"{self.name}-{next(self._ids)}", daemon=True).start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            job = get()
            # `started` is set before the cancellation check: abandon() (after the future is done)
            # then either sees started and writes this thread off, or this thread sees the future done
            job.started = True
            if job.future is not None and job.future.done():  # cancelled or timed out while queued
                job.started, ok, value = False, False, None
            else:
                try:
                    ok, value = True, job.fn(*job.args)
                except BaseException as e:  # noqa: BLE001 - delivered to the awaiting coroutine
                    ok, value = False, e
            if job.mailbox is not None:
                job.mailbox.post(job, ok, value)
            if job.abandoned:
                return  # written off while stuck; the pool already replaced this thread
