"""TrainingService: a training deployment shared by several RL jobs (plexrl.txt §4.1–4.2, §5.1).

    service = TrainingService(ServiceConfig(deployments=1))
    await service.start()
    await service.register_job("lake", trainer_config)       # builds the job's trainer on a deployment
    metrics = await service.call("lake", "train_step", trajectories)
    await service.complete_job("lake"); await service.close()

Each deployment is a worker-process group (``DeploymentWorker`` ranks, one process each by default).
Requests go Router-ward only through the Scheduler: ``call`` queues the operation, the deployment's
dispatcher admits it (switching the resident job if needed) and the Router executes it on the group,
alone. The narrow API: forward, forward_backward, optim_step, train_step, weight_buckets (sync to
rollout), save_checkpoint / load_checkpoint, materialize. A job's failing request fails only that
request; a job that goes away is completed and its queue dropped; the service and other jobs go on.
"""
from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from typing import Any

from rollart.actors import ActorSystem
from rollart.multiplex.router import Router
from rollart.multiplex.scheduler import JobState, Scheduler

API = ("forward", "forward_backward", "optim_step", "train_step", "weight_buckets", "save_checkpoint",
       "load_checkpoint", "materialize")


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

    def __post_init__(self):
        if self.deployments < 1 or self.ranks_per_deployment < 1:
            raise ValueError("deployments and ranks_per_deployment must be >= 1")
        if self.mode not in ("process", "inprocess"):
            raise ValueError(f"mode must be 'process' or 'inprocess', got {self.mode!r}")
        if self.offload_tier not in ("host", "disk"):
            raise ValueError(f"offload_tier must be 'host' or 'disk', got {self.offload_tier!r}")
        if self.max_jobs_per_deployment < 1:
            raise ValueError("max_jobs_per_deployment must be >= 1")


class TrainingService:
    def __init__(self, cfg: ServiceConfig | None = None, system: ActorSystem | None = None):
        self.cfg = cfg or ServiceConfig()
        self._own_system = system is None
        self.system = system
        self.router = Router()
        self.scheduler: Scheduler | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.placement: dict[str, str] = {}

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
            ranks = [await self.system.spawn("rollart.multiplex.worker:DeploymentWorker", f"{spill}/{name}-r{r}",
                                             rank=r, offload_tier=cfg.offload_tier, name=f"{name}-r{r}",
                                             mode=cfg.mode) for r in range(cfg.ranks_per_deployment)]
            self.router.add(name, ranks)
        return self

    async def __aenter__(self) -> "TrainingService":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ jobs
    async def register_job(self, job: str, trainer_config: Any, deployment: str | None = None) -> str:
        """Place ``job`` on a deployment (the least loaded one that admits it) and build its trainer there.
        Returns the deployment id. Raises SLOViolation when no deployment may take it."""
        sched = self._sched()
        if dataclasses.is_dataclass(trainer_config):
            trainer_config = dataclasses.asdict(trainer_config)
        candidates = [deployment] if deployment else sorted(
            self.router.groups, key=lambda d: len(sched.active_jobs(d)))
        last: Exception | None = None
        for d in candidates:
            self.router.workers(d)
            if len(sched.active_jobs(d)) >= self.cfg.max_jobs_per_deployment:
                last = RuntimeError(f"deployment {d!r} already hosts max_jobs_per_deployment="
                                    f"{self.cfg.max_jobs_per_deployment} jobs")
                continue
            try:
                sched.add_job(job, d)
            except Exception as e:  # noqa: BLE001 - try the next deployment
                last = e
                continue
            self.placement[job] = d
            try:
                await sched.submit(job, "add_job", trainer_config)
            except BaseException:
                sched.close_job(job, JobState.FAILED, "trainer construction failed")
                raise
            return d
        raise last if last else RuntimeError("no deployment available")

    async def call(self, job: str, op: str, *args: Any) -> Any:
        if op not in API:
            raise ValueError(f"unknown operation {op!r}; the service offers {', '.join(API)}")
        return await self._sched().submit(job, op, *args)

    async def version(self, job: str) -> int:
        d = self._deployment(job)
        return await self.router.workers(d)[0].call("version", job)

    async def complete_job(self, job: str) -> None:
        """Finish ``job``: drop its state on the workers, mark it COMPLETED. Idempotent."""
        sched = self._sched()
        j = sched.jobs.get(job)
        if j is None or j.state in (JobState.COMPLETED, JobState.FAILED):
            return
        try:
            await sched.submit(job, "remove_job")
        finally:
            sched.close_job(job)

    def job_state(self, job: str) -> JobState:
        return self._sched().jobs[job].state

    async def worker_stats(self) -> dict[str, list[dict]]:
        return {d: [await w.call("stats") for w in ws] for d, ws in self.router.groups.items()}

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

    def _deployment(self, job: str) -> str:
        try:
            return self.placement[job]
        except KeyError:
            raise KeyError(f"job {job!r} is not registered with this service") from None
