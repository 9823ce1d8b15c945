"""Scheduler: per-job request queues, HRRS ordering, automatic context switches (PlexRL §4.4, §5.2).

Every request (a typed operation, ``rollart.multiplex.messages``) becomes a ``QueuedOperation`` holding an
asyncio future, appended to its job's FIFO queue; ``submit`` returns at once. One dispatcher task per
deployment repeatedly takes the best queue head:

    HRRS   priority = (W + S_eff) / S_eff,  S_eff = E + 1[switch] * C
           W = time waited, E = estimated execution time (EMA of that job's past ops of that kind),
           C = estimated context-switch cost (EMA of measured switches), switch = the job is not resident.
    FCFS   the oldest head.

If the chosen job is not the resident one, the dispatcher prepends ``Offload`` (of the resident job) and
``Load`` (of the chosen one); the next-best job of another kind gets a ``Prefetch`` hint. Per-job order is
FIFO; a long wait raises any job's priority without bound, so nobody starves
(tests/multiplex/test_multiplex_scheduler.py).

Job FSM: QUEUED (registered) -> RUNNING (first operation admitted while holding the deployment lock)
-> COMPLETED (``complete_job``) or FAILED (its worker group died). SLO (§7.2): a job's *waiting duty
ratio* wait / (wait + execution) over its recent operations; ``add_job`` refuses to co-locate a new job
on a deployment where a job already exceeds ``slo_max_wait_ratio``.
"""
from __future__ import annotations

import asyncio
import collections
import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rollart.messages import WeightBuckets
from rollart.multiplex.messages import AddJob, Load, Materialize, Offload, Prefetch, RemoveJob, op_name

log = logging.getLogger("rollart.multiplex")

NO_SWITCH_OPS = (RemoveJob, WeightBuckets, Materialize)
"""Operations served without making the job resident (from managed state, or pure bookkeeping)."""


class JobState(str, enum.Enum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class SLOViolation(RuntimeError):
    """Co-locating another job would break the waiting-duty-ratio bound of a resident job."""


class JobClosedError(RuntimeError):
    """The job was completed or failed; its pending requests are dropped with this error."""


@dataclass
class QueuedOperation:
    job: str
    request: Any
    op: str
    """The request's operation kind ('train_step', ...): what its execution time is estimated by."""
    arrival: float
    future: asyncio.Future
    admitted: float = float("nan")


@dataclass
class Job:
    id: str
    deployment: str
    state: JobState = JobState.QUEUED
    queue: collections.deque = field(default_factory=collections.deque)
    recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=64))
    """(wait_s, exec_s) of recent operations, for the SLO."""
    est: dict[str, float] = field(default_factory=dict)
    """EMA of execution time per operation kind."""
    reason: str = ""
    """Why it was completed or failed."""

    def wait_ratio(self) -> float:
        wait = sum(w for w, _ in self.recent)
        total = wait + sum(e for _, e in self.recent)
        return wait / total if total > 0 else 0.0


def hrrs_priority(wait: float, est: float, needs_switch: bool, switch_cost: float) -> float:
    s_eff = max(est + (switch_cost if needs_switch else 0.0), 1e-9)
    return (wait + s_eff) / s_eff


def pick(heads: list[tuple[str, float, float]], now: float, resident: str | None, switch_cost: float,
         policy: str) -> int:
    """Index of the queue head to run next. ``heads``: (job, arrival, estimated execution seconds)."""
    if policy == "fcfs":
        return min(range(len(heads)), key=lambda i: heads[i][1])
    if policy != "hrrs":
        raise ValueError(f"scheduler policy must be 'hrrs' or 'fcfs', got {policy!r}")
    return max(range(len(heads)), key=lambda i: (
        hrrs_priority(now - heads[i][1], heads[i][2], heads[i][0] != resident, switch_cost), -heads[i][1]))


class Scheduler:
    def __init__(self, router: Any, policy: str = "hrrs", slo_max_wait_ratio: float = 0.8,
                 min_ops_for_slo: int = 8, default_est_s: float = 0.05, clock: Callable[[], float] = time.monotonic):
        if policy not in ("hrrs", "fcfs"):
            raise ValueError(f"scheduler policy must be 'hrrs' or 'fcfs', got {policy!r}")
        if not 0 < slo_max_wait_ratio <= 1:
            raise ValueError(f"slo_max_wait_ratio must be in (0, 1], got {slo_max_wait_ratio}")
        self.router = router
        self.policy = policy
        self.slo_max_wait_ratio = slo_max_wait_ratio
        self.min_ops_for_slo = min_ops_for_slo
        self.default_est_s = default_est_s
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self.resident: dict[str, str | None] = {}
        """deployment -> job whose state is live on it (group_executor_gpu_job in the paper)."""
        self.switch_cost: dict[str, float] = {}
        self.switches: dict[str, int] = collections.Counter()
        self.waits: list[float] = []
        self._wake: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task] = {}

    # ------------------------------------------------------------------ jobs
    def add_job(self, job: str, deployment: str) -> Job:
        if job in self.jobs and self.jobs[job].state in (JobState.QUEUED, JobState.RUNNING):
            raise ValueError(f"job {job!r} is already active on {self.jobs[job].deployment!r}")
        for other in self.active_jobs(deployment):
            if len(other.recent) >= self.min_ops_for_slo and other.wait_ratio() > self.slo_max_wait_ratio:
                raise SLOViolation(
                    f"deployment {deployment!r}: job {other.id!r} already waits {other.wait_ratio():.0%} of its time "
                    f"(bound slo_max_wait_ratio={self.slo_max_wait_ratio:.0%}); not co-locating {job!r} — "
                    "use another deployment or raise the bound")
        self._ensure_dispatcher(deployment)
        self.jobs[job] = Job(job, deployment)
        return self.jobs[job]

    def active_jobs(self, deployment: str) -> list[Job]:
        return [j for j in self.jobs.values()
                if j.deployment == deployment and j.state in (JobState.QUEUED, JobState.RUNNING)]

    def close_job(self, job: str, state: JobState = JobState.COMPLETED, reason: str = "") -> None:
        """Mark the job finished and fail its pending requests (idempotent)."""
        j = self.jobs.get(job)
        if j is None or j.state in (JobState.COMPLETED, JobState.FAILED):
            return
        j.state, j.reason = state, reason
        while j.queue:
            q = j.queue.popleft()
            if not q.future.done():
                q.future.set_exception(JobClosedError(f"job {job!r} is {state.value}{': ' + reason if reason else ''}"))

    # ------------------------------------------------------------------ requests
    def submit(self, job: str, request: Any) -> asyncio.Future:
        """Queue ``job``'s ``request``; the future of its answer."""
        op = op_name(request)  # a TypeError for what no deployment runs, before it is queued
        j = self.jobs.get(job)
        if j is None:
            raise KeyError(f"job {job!r} is not registered; call register_job first")
        if j.state in (JobState.COMPLETED, JobState.FAILED):
            raise JobClosedError(f"job {job!r} is {j.state.value}; it accepts no more requests")
        fut = asyncio.get_running_loop().create_future()
        j.queue.append(QueuedOperation(job, request, op, self.clock(), fut))
        self._wake[j.deployment].set()
        return fut

    # ------------------------------------------------------------------ dispatch
    def _ensure_dispatcher(self, deployment: str) -> None:
        if deployment not in self._tasks:
            self._wake[deployment] = asyncio.Event()
            self.resident.setdefault(deployment, None)
            self.switch_cost.setdefault(deployment, self.default_est_s)
            self._tasks[deployment] = asyncio.create_task(self._dispatch(deployment), name=f"dispatch-{deployment}")

    def _next(self, deployment: str) -> QueuedOperation | None:
        jobs = [j for j in self.active_jobs(deployment) if j.queue]
        for j in jobs:  # drop requests whose caller already gave up
            while j.queue and j.queue[0].future.done():
                j.queue.popleft()
        jobs = [j for j in jobs if j.queue]
        if not jobs:
            return None
        resident = self.resident[deployment]
        heads = [(j.id if not isinstance(j.queue[0].request, NO_SWITCH_OPS) else resident, j.queue[0].arrival,
                  j.est.get(j.queue[0].op, self.default_est_s)) for j in jobs]
        i = pick(heads, self.clock(), resident, self.switch_cost[deployment], self.policy)
        return jobs[i].queue.popleft()

    async def _dispatch(self, deployment: str) -> None:
        wake = self._wake[deployment]
        while True:
            # 1) take the best queue head, or sleep until a request arrives
            q = self._next(deployment)
            if q is None:
                wake.clear()
                await wake.wait()
                continue
            j = self.jobs[q.job]
            try:
                # 2) context switch if another job is resident
                if self.resident[deployment] != q.job and not isinstance(q.request, NO_SWITCH_OPS):
                    await self._switch(deployment, q.job, fresh=isinstance(q.request, AddJob))
                self._hint_prefetch(deployment)
                # 3) run it, lock-gated: the job becomes RUNNING only once it holds the deployment lock
                def admit() -> None:
                    q.admitted = self.clock()
                    if j.state == JobState.QUEUED:
                        j.state = JobState.RUNNING
                result = await self.router.execute(deployment, q.job, q.request, on_admit=admit)
                done = self.clock()
                if isinstance(q.request, RemoveJob) and self.resident[deployment] == q.job:
                    self.resident[deployment] = None
                j.est[q.op] = _ema(j.est.get(q.op), done - q.admitted)
                j.recent.append((q.admitted - q.arrival, done - q.admitted))
                self.waits.append(q.admitted - q.arrival)
                if not q.future.done():
                    q.future.set_result(result)
            except asyncio.CancelledError:
                if not q.future.done():
                    q.future.cancel()
                raise
            except Exception as e:  # noqa: BLE001 - one job's failure is that job's, never the dispatcher's
                if not q.future.done():
                    q.future.set_exception(e)
                if isinstance(q.request, AddJob) and self.resident[deployment] == q.job:
                    self.resident[deployment] = None  # its trainer was never built
                if _is_dead(e):
                    log.error("deployment %s: worker group died (%s); failing its jobs", deployment, e)
                    for other in self.active_jobs(deployment):
                        self.close_job(other.id, JobState.FAILED, f"worker group died: {e}")
                    self.resident[deployment] = None

    async def _switch(self, deployment: str, job: str, fresh: bool) -> None:
        t0 = self.clock()
        old = self.resident[deployment]
        if old is not None:
            await self.router.execute(deployment, old, Offload())
            self.resident[deployment] = None
        if not fresh:
            await self.router.execute(deployment, job, Load())
        self.resident[deployment] = job
        if old is not None:
            self.switches[deployment] += 1
            self.switch_cost[deployment] = _ema(self.switch_cost[deployment], self.clock() - t0)

    def _hint_prefetch(self, deployment: str) -> None:
        """Tell the workers which offloaded job is likely next, so its state can move up the tiers."""
        waiting = [j for j in self.active_jobs(deployment) if j.queue and j.id != self.resident[deployment]]
        if waiting:
            nxt = min(waiting, key=lambda j: j.queue[0].arrival)
            asyncio.ensure_future(self.router.notify(deployment, Prefetch(nxt.id)))

    async def close(self) -> None:
        for job in list(self.jobs):
            self.close_job(job)
        for t in self._tasks.values():
            t.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    def stats(self) -> dict[str, float]:
        w = sorted(self.waits)
        p = (lambda q: w[min(len(w) - 1, int(q * len(w)))] if w else 0.0)
        return {"switches": float(sum(self.switches.values())), "ops": float(len(w)),
                "wait_p50_s": p(0.5), "wait_p99_s": p(0.99), "wait_max_s": w[-1] if w else 0.0}


def _ema(old: float | None, new: float, a: float = 0.3) -> float:
    return new if old is None else (1 - a) * old + a * new


def _is_dead(e: BaseException) -> bool:
    from rollart.actors import ActorDeadError
    return isinstance(e, ActorDeadError)
