"""TrainingService: a training deployment shared by several RL jobs (PlexRL §4.1–4.2, §5.1).

    service = TrainingService(ServiceConfig(deployments=1))
    await service.start()
    await service.register_job("lake", trainer_config)       # builds the job's trainer on a deployment
    metrics = await service.send("lake", TrainStep(trajectories))
    await service.complete_job("lake"); await service.close()

Each deployment is a worker-process group (``DeploymentWorker`` ranks, one process each by default).
A job's request is a typed message. Operations go Router-ward only through the Scheduler: ``send`` queues
one, the deployment's dispatcher admits it (switching the resident job if needed) and the Router executes
it on the group, alone. The narrow API (``JOB_OPERATIONS``): Forward, ForwardBackward, OptimStep, TrainStep,
WeightBuckets (sync to rollout), SaveCheckpoint / LoadCheckpoint, Materialize; the queries GetVersion and
DeviceStats are answered at once by rank 0 of the job's deployment. A job's failing request fails only that
request; a job that goes away is completed and its queue dropped; the service and other jobs go on.

Which deployment a job goes on is the Placer's decision (PlexRL §4.3): every deployment is a node of a
cyclic horizon, a job brings a periodic demand trace (or gets ``default_duty`` of each period) and is
fitted, with the smallest micro-shift, onto the least-loaded deployment with free windows for it; its
windows stay reserved until ``complete_job``. ``demand="profile"`` is the cold start: the job gets an idle
deployment to itself; ``repack(job)`` then measures its duty from the Router's log and fits that trace in
place, opening the rest of the deployment to other jobs (the state stays where it is: no migration). A job
that fits nowhere is refused (``PlacementError``) rather than over-committing a deployment. Placement is
admission control: the order in which admitted operations run is still the Scheduler's (HRRS), the reserved
windows are not enforced at run time.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from typing import Any

from rollart.actors import ActorSystem
from rollart.config import ConfigError
from rollart.messages import GetStats
from rollart.multiplex.emulated import EmulatedJob
from rollart.multiplex.messages import AddJob, JOB_OPERATIONS, JOB_QUERIES, JobMessage, RemoveJob
from rollart.multiplex.placer import Placement, Placer, Trace
from rollart.multiplex.router import OpRecord, Router
from rollart.multiplex.hrrs import JobState, Scheduler, SLOViolation
from rollart.trainer.config import TrainerConfig


@dataclass
class ServiceConfig:
    deployments: int = 1
    """Number of logical training deployments (worker-process groups)."""
    ranks_per_deployment: int = 1
    """Worker processes per group (each rank holds a replica; state is de-duplicated on offload)."""
    mode: str = "process"
    """Actor mode of the workers: 'process' (own processes) or 'inprocess' (tests, debugging)."""
    policy: str = "hrrs"
    """Scheduling policy across jobs: 'hrrs' (Highest Response Ratio with Setup) or 'fcfs'."""
    slo_max_wait_ratio: float = 0.8
    """Refuse to co-locate another job on a deployment where a job already waits more than this share of its time."""
    max_jobs_per_deployment: int = 4
    """Hard cap on jobs sharing one deployment."""
    offload_tier: str = "host"
    """Where a switched-out job's state goes: 'host' (warm) or 'disk' (cold, prefetched before its turn)."""
    spill_dir: str = ""
    """Folder for the disk tier ('' = a temporary folder)."""
    placement_horizon: int = 120
    """Slots of the cyclic placement horizon (PlexRL §4.3); a job's demand trace period must divide it."""
    default_duty: float = 0.25
    """Share of each period reserved for a job registered without a demand trace (busy for the first
    ``default_duty`` of every ``default_period`` slots; four such jobs fill a deployment)."""
    default_period: int = 20
    """Period in slots of the trace given to a job registered without one."""

    def __post_init__(self):
        if self.deployments < 1 or self.ranks_per_deployment < 1:
            raise ConfigError("deployments and ranks_per_deployment must be >= 1")
        if self.mode not in ("process", "inprocess"):
            raise ConfigError(f"mode must be 'process' or 'inprocess', got {self.mode!r}")
        if self.offload_tier not in ("host", "disk"):
            raise ConfigError(f"offload_tier must be 'host' or 'disk', got {self.offload_tier!r}")
        if self.max_jobs_per_deployment < 1:
            raise ConfigError("max_jobs_per_deployment must be >= 1")
        if not 0 < self.default_duty <= 1:
            raise ConfigError(f"default_duty must be in (0, 1], got {self.default_duty}")
        if self.default_period < 1 or self.placement_horizon % self.default_period:
            raise ConfigError(f"default_period ({self.default_period}) must be >= 1 and divide placement_horizon "
                              f"({self.placement_horizon})")
        if round(self.default_duty * self.default_period) < 1:
            raise ConfigError(f"default_duty={self.default_duty} of default_period={self.default_period} slots is "
                              "less than one slot; raise either")


class PlacementError(RuntimeError):
    """No deployment has free windows for the job's demand trace (it would over-commit one)."""


class TrainingService:
    def __init__(self, cfg: ServiceConfig | None = None, system: ActorSystem | None = None):
        self.cfg = cfg or ServiceConfig()
        self._own_system = system is None
        self.system = system
        self.router = Router()
        self.scheduler: Scheduler | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.placement: dict[str, str] = {}
        """job -> deployment it was placed on."""
        self.placer: Placer | None = None
        self.names: list[str] = []
        """Deployment ids; deployment ``names[i]`` is node i of the Placer."""

    async def start(self) -> "TrainingService":
        cfg = self.cfg
        if self.system is None:
            self.system = ActorSystem(heartbeat_interval=1.0, heartbeat_timeout=30.0, spawn_timeout=120.0)
            await self.system.start()
        spill = cfg.spill_dir
        if not spill:
            self._tmp = tempfile.TemporaryDirectory(prefix="rollart-state-")
            spill = self._tmp.name
        self.scheduler = Scheduler(self.router, policy=cfg.policy, slo_max_wait_ratio=cfg.slo_max_wait_ratio)
        for d in range(cfg.deployments):
            name = f"train{d}"
            ranks = [await self.system.spawn("rollart.multiplex.deployment_worker:DeploymentWorker", f"{spill}/{name}-r{r}",
                                             rank=r, offload_tier=cfg.offload_tier, name=f"{name}-r{r}",
                                             mode=cfg.mode) for r in range(cfg.ranks_per_deployment)]
            self.router.add(name, ranks)
            self.names.append(name)
        self.placer = Placer(cfg.deployments, cfg.placement_horizon, prefer="spread")
        return self

    async def __aenter__(self) -> "TrainingService":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ jobs
    async def register_job(self, job: str, trainer_config: TrainerConfig, deployment: str | None = None,
                           demand: Trace | dict | str | None = None, emulated: EmulatedJob | None = None) -> str:
        """Place ``job`` (Placer: least-loaded deployment whose free windows fit its demand trace, smallest
        micro-shift) and build its trainer there. ``demand``: a ``Trace`` or dict(period=, segments=) in
        placement slots; None reserves ``default_duty``; "profile" takes an idle deployment whole until
        ``repack``. ``deployment`` pins the job to one deployment. ``emulated``: the job's operations last their
        time on emulated GPUs, holding the deployment (``rollart.multiplex.emulated``).
        Returns the deployment id. Raises PlacementError if it fits nowhere, SLOViolation if every
        deployment that fits has a job over the waiting bound."""
        if not isinstance(trainer_config, TrainerConfig):
            raise TypeError(f"register_job({job!r}): trainer_config must be a TrainerConfig, "
                            f"got {type(trainer_config).__name__}")
        sched = self._sched()
        trace = self._demand(job, demand)
        if deployment is not None:
            self.router.workers(deployment)  # UnknownDeploymentError names the known ones
        j = sched.jobs.get(job)
        if j is not None and j.state in (JobState.QUEUED, JobState.RUNNING):
            raise ValueError(f"job {job!r} is already active on {j.deployment!r}")
        self._reap()
        excluded: set[int] = set()
        last: Exception | None = None
        while True:
            allowed = [i for i, d in enumerate(self.names) if i not in excluded and deployment in (None, d)
                       and len(sched.active_jobs(d)) < self.cfg.max_jobs_per_deployment]
            if not allowed:
                raise last if last else RuntimeError(
                    f"every deployment{'' if deployment is None else ' ' + repr(deployment)} already hosts "
                    f"max_jobs_per_deployment={self.cfg.max_jobs_per_deployment} jobs; complete a job first")
            placed = (self.placer.cold_start(job, 1, nodes=allowed) if trace is None
                      else self.placer.warm_start(job, trace, nodes=allowed))
            if placed is None and trace is None:
                raise PlacementError(f"job {job!r} wants a deployment to itself while it is profiled, but none is "
                                     "idle; give it a demand trace or complete a job")
            if placed is None:
                free = ", ".join(f"{self.names[i]} {self.placer.free_share()[i]:.0%} free" for i in allowed)
                raise PlacementError(
                    f"job {job!r} (demand: {trace.duty():.0%} of every {trace.period} slots) fits on no deployment "
                    f"at any micro-shift ({free}); complete a job, lower its demand, or start more deployments")
            d = self.names[placed.nodes[0]]
            try:
                sched.add_job(job, d)
            except SLOViolation as e:
                self.placer.release(job)
                excluded.add(placed.nodes[0])
                last = e
                continue
            except BaseException:
                self.placer.release(job)
                raise
            self.placement[job] = d
            if emulated is not None:
                self.router.emulated[job] = emulated
            try:
                await sched.submit(job, AddJob(trainer_config))
            except BaseException:
                sched.close_job(job, JobState.FAILED, "trainer construction failed")
                self._release(job)
                raise
            return d

    def repack(self, job: str) -> Placement:
        """End the cold start of a job registered with demand="profile": measure its duty on its deployment
        (``profiled_trace`` over the Router's log) and keep only that share of every ``default_period``
        reserved, on the same deployment. Raises ValueError if the job is not being profiled or has run
        fewer than two operations."""
        p = self.placed(job)
        if not p.dedicated:
            raise ValueError(f"job {job!r} is not being profiled (it was placed with a demand trace)")
        d = self.names[p.nodes[0]]
        _, trace = profiled_trace(self.router.log[d], job, self.cfg.default_period)
        return self._placer().repack(job, trace, nodes=p.nodes)

    def placed(self, job: str) -> Placement:
        """The job's reservation on the placement horizon (deployment index, micro-shift, windows)."""
        try:
            return self._placer().placed[job]
        except KeyError:
            raise KeyError(f"job {job!r} holds no placement (not registered, or completed)") from None

    async def send(self, job: str, request: Any) -> Any:
        """``job``'s answer to ``request``: an operation of ``JOB_OPERATIONS``, queued and run in the Scheduler's
        order, or a query of ``JOB_QUERIES``, answered at once by rank 0 of the job's deployment. Another
        message raises TypeError."""
        if isinstance(request, JOB_QUERIES):
            return await self.router.workers(self._deployment(job))[0].send(JobMessage(job, request))
        if not isinstance(request, JOB_OPERATIONS):
            raise TypeError(f"the shared training service answers no {type(request).__qualname__} message; it "
                            f"answers {', '.join(t.__name__ for t in JOB_OPERATIONS + JOB_QUERIES)}")
        return await self._sched().submit(job, request)

    async def complete_job(self, job: str) -> None:
        """Finish ``job``: drop its state on the workers, mark it COMPLETED. Idempotent."""
        sched = self._sched()
        j = sched.jobs.get(job)
        if j is None or j.state in (JobState.COMPLETED, JobState.FAILED):
            self._release(job)
            return
        try:
            await sched.submit(job, RemoveJob())
        finally:
            sched.close_job(job)
            self._release(job)

    def job_state(self, job: str) -> JobState:
        return self._sched().jobs[job].state

    def ended(self, job: str) -> str:
        """'' while ``job`` is registered and active; else why it is not (completed, failed and why)."""
        j = self._sched().jobs.get(job)
        if j is None:
            return f"job {job!r} is not registered with the training service"
        if j.state in (JobState.QUEUED, JobState.RUNNING):
            return ""
        return f"job {job!r} is {j.state.value}" + (f": {j.reason}" if j.reason else "")

    async def worker_stats(self) -> dict[str, list[dict]]:
        return {d: [await w.send(GetStats()) for w in ws] for d, ws in self.router.groups.items()}

    async def close(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.close()
        if self.system is not None and self._own_system:
            await self.system.shutdown()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # ------------------------------------------------------------------ internals
    def _sched(self) -> Scheduler:
        if self.scheduler is None:
            raise RuntimeError("TrainingService is not started; await service.start() first")
        return self.scheduler

    def _placer(self) -> Placer:
        if self.placer is None:
            raise RuntimeError("TrainingService is not started; await service.start() first")
        return self.placer

    def _demand(self, job: str, demand: Trace | dict | str | None) -> Trace | None:
        if demand == "profile":
            return None
        if isinstance(demand, str):
            raise ValueError(f"job {job!r}: demand must be a Trace, a dict, None or 'profile', got {demand!r}")
        if demand is None:
            c = self.cfg
            return Trace(c.default_period, [(0, round(c.default_duty * c.default_period))])
        if isinstance(demand, dict):
            try:
                demand = Trace(int(demand["period"]), [tuple(seg) for seg in demand["segments"]])
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"job {job!r}: demand must be a Trace or dict(period=slots, segments=[(offset, "
                                 f"duration), ...]), got {demand!r} ({e})") from None
        if not isinstance(demand, Trace):
            raise TypeError(f"job {job!r}: demand must be a Trace, a dict or None, got {type(demand).__name__}")
        if self.cfg.placement_horizon % demand.period:
            raise ValueError(f"job {job!r}: demand period {demand.period} must divide placement_horizon="
                             f"{self.cfg.placement_horizon} slots")
        return demand

    def _release(self, job: str) -> None:
        self.router.emulated.pop(job, None)
        if job in self._placer().placed:
            self._placer().release(job)

    def _reap(self) -> None:
        """Give back the windows of jobs that failed (e.g. their worker group died) without complete_job."""
        for job in list(self._placer().placed):
            j = self._sched().jobs.get(job)
            if j is None or j.state in (JobState.COMPLETED, JobState.FAILED):
                self._placer().release(job)

    def _deployment(self, job: str) -> str:
        try:
            return self.placement[job]
        except KeyError:
            raise KeyError(f"job {job!r} is not registered with this service") from None


PROFILE_SKIP = frozenset({"add_job", "remove_job", "offload", "load"})


def profiled_trace(log: list[OpRecord], job: str, period: int) -> tuple[float, Trace]:
    """The job's measured duty on a deployment — the time its operations ran over the span from its first
    operation's start to its last one's end (trainer construction and switches excluded) — and the trace
    that reserves that share, rounded up to whole slots, at the start of every ``period`` slots."""
    recs = [r for r in log if r.job == job and r.op not in PROFILE_SKIP and r.end == r.end]  # end is NaN while running
    if len(recs) < 2:
        raise ValueError(f"job {job!r} has run {len(recs)} operation(s) on its deployment; profile at least two "
                         "before repacking")
    busy = sum(r.end - r.start for r in recs)
    span = max(r.end for r in recs) - min(r.start for r in recs)
    duty = min(1.0, busy / span) if span > 0 else 1.0
    slots = min(period, max(1, math.ceil(duty * period - 1e-9)))
    return duty, Trace(period, [(0, slots)])
