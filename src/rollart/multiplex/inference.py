"""SharedInferenceWorker: one inference engine time-shared by several RL jobs' rollouts (PlexRL, inference plane).

    worker = await system.spawn("rollart.multiplex.inference:SharedInferenceWorker", engine_cfg, spill_dir=...)
    await worker.send(RegisterJob("lake", lake_model_dir))
    proxy = LLMProxy([(name, hw, JobWorker(worker, "lake"))])    # what the job's Coordinator sees

Every message of a job is tagged with it (``rollart.multiplex.client.JobWorker`` sends each as
``JobMessage(job, message)``).
The engine holds one job's weights at a time, the *active* job; every other job's weights sit in the
StateManager (host tier, or disk). A request of the active job goes straight to the engine (continuous
batching with the job's other requests); a request of another job queues. The swap order is HRRS
(``scheduler.pick``, the same rule the training service uses): at every arrival and completion the best
queue head is chosen; if it belongs to another job, the active job admits nothing more, its requests in
flight finish (drain), then the swap runs:

    1) device -> host/disk   the engine's live parameters are copied out into the StateManager
    2) disk -> host -> device  the chosen job's weights come back (prefetched from disk while draining)
                             and are installed between two engine steps
    3) admit                 the chosen job's queued requests are released to the engine

Each job keeps its own prefix cache across swaps (``job_prefix_cache``, on by default): the engine's cache is
split into one namespace per job within its one KV budget (``LLMEngine.update_weights(namespace=...)``), so
the K/V of job A's prompts stays cached while B runs (evicted LRU with the rest only under pressure) and
matches again when A comes back with the same weights. A job whose weights changed while it was out, or
while active, drops its own cached prefixes, never the other job's. Off, every swap empties the cache and
each job re-prefills its prompts after it.

A request is admitted only while its job is active and no swap is pending, and a swap starts only when the
active job has nothing in flight, so no request is ever answered with another job's weights. Each job keeps
its own weight versions: ``PullWeights`` / ``UpdateWeights`` of a job go to that job's own weight relay;
installing a version of the active job goes to the engine, of an inactive job to its offloaded state.
``stats`` accounts the worker's busy time (engine steps + swaps) for device-time comparisons.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rollart.actors import handles
from rollart.inference.worker import InferenceWorker
from rollart.messages import (AbortRequest, ForgetWeights, GenerateRequest, GetStats, GetVersion, PullWeights,
                              UpdateWeights, WaitWeights, WeightAddress, WeightEndpoint)
from rollart.multiplex.messages import JobMessage, RegisterJob
from rollart.multiplex.hrrs import pick
from rollart.multiplex.state import StateManager
from rollart.types import GenerationResult, WeightBucket

log = logging.getLogger("rollart.multiplex")


@dataclass
class _Job:
    id: str
    version: int = 0
    waiting: collections.deque = field(default_factory=collections.deque)
    """(arrival, future resolved at admission) of requests queued until the job is active."""
    running: int = 0
    """Requests admitted to the engine and not yet answered."""
    est_s: float = 0.05
    """EMA of this job's request latency (HRRS's execution estimate)."""
    requests: int = 0
    queued_s: float = 0.0
    relay: Any = None
    cache_valid: bool = False
    """The job's cached prefixes in the engine were computed with its current weights (kept at a swap back)."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens of its answered requests, and those of them served from the prefix cache."""


class SharedInferenceWorker:
    """Actor: one engine, several jobs; see the module docstring.

    Args:
        engine: the engine config (``EngineConfig`` or a dict); its model fixes the architecture every job
            must share (each job's own weights come with ``add_job``).
        spill_dir: folder of the StateManager's disk tier.
        offload_tier: where an inactive job's weights go: 'host' or 'disk'.
        policy: swap order, 'hrrs' or 'fcfs'.
        job_prefix_cache: keep each job's cached prefixes across swaps (False: every swap empties the cache).
        engine_obj: an already-built engine (tests).
    """

    def __init__(self, engine: Any = None, *, spill_dir: str, backend: str | None = None, name: str = "shared-gen",
                 hw_class: str = "cpu", offload_tier: str = "host", policy: str = "hrrs",
                 job_prefix_cache: bool = True, engine_obj: Any = None) -> None:
        if offload_tier not in ("host", "disk"):
            raise ValueError(f"offload_tier must be 'host' or 'disk', got {offload_tier!r}")
        if policy not in ("hrrs", "fcfs"):
            raise ValueError(f"policy must be 'hrrs' or 'fcfs', got {policy!r}")
        self.worker = InferenceWorker(engine, backend=backend, name=name, hw_class=hw_class, engine_obj=engine_obj)
        self.name = name
        self.state = StateManager(spill_dir)
        self.offload_tier = offload_tier
        self.policy = policy
        self.job_prefix_cache = bool(job_prefix_cache)
        if self.job_prefix_cache and not self.worker.engine.capabilities.prefix_namespaces:
            log.warning("%s: engine %s keeps no per-job prefix caches; every weight swap empties its prefix cache "
                        "(engine.backend=torch keeps them)", name, type(self.worker.engine).__name__)
        self.jobs: dict[str, _Job] = {}
        self.active: str | None = None
        self.target: str | None = None
        """The job being switched to (the active one drains meanwhile)."""
        self.switch_cost_s = 0.05
        self.switches = 0
        self.swap_s = 0.0
        self.drain_s = 0.0
        """Seconds from choosing the next job to starting its swap (the active job's last requests finish)."""
        self._drain_t0 = 0.0
        self.answered: list[tuple[str, int]] = []
        """(job, engine version) of the last answered requests: which weights served which job."""
        self._swap: asyncio.Task | None = None
        self._queued: dict[str, asyncio.Future] = {}
        """request id -> admission future of a request waiting for its job's swap."""
        self._lock: asyncio.Lock | None = None
        self._started = time.monotonic()

    # ------------------------------------------------------------------ jobs
    @handles(RegisterJob)
    async def add_job(self, msg: RegisterJob) -> int:
        """Register ``job`` with the weights of its model folder (version 0), offloaded until its first request."""
        job, model_dir = msg.job, msg.model_dir
        if job in self.jobs:
            raise ValueError(f"job {job!r} is already registered on {self.name}")
        from rollart.models.checkpoint import load_state_dict
        tensors = load_state_dict(Path(model_dir))
        expected = dict(self.worker.engine.model.named_parameters())
        wrong = [n for n, t in tensors.items() if n in expected and tuple(t.shape) != tuple(expected[n].shape)]
        if wrong or not set(expected) <= set(tensors):
            raise ValueError(f"add_job {job!r}: the model in {model_dir} does not match the shared engine's "
                             f"architecture ({'shape of ' + wrong[0] if wrong else 'missing weights'}); jobs sharing "
                             "inference workers must use one model architecture")
        self.state.offload(job, {n: t for n, t in tensors.items() if n in expected}, self.offload_tier)
        from rollart.weightplane import WeightRelay
        self.jobs[job] = _Job(job, relay=WeightRelay())
        await self.jobs[job].relay.start()
        return 0

    @handles(JobMessage)
    async def job_message(self, msg: JobMessage) -> Any:
        """A job's message: GenerateRequest, AbortRequest, PullWeights, UpdateWeights (to its own weight relay),
        WaitWeights, ForgetWeights, WeightAddress, GetVersion, GetStats; answered as the worker of that job."""
        handler = self._JOB_MESSAGES.get(type(msg.message))
        if handler is None:
            raise TypeError(f"a shared inference worker answers no {type(msg.message).__qualname__} message of a "
                            f"job; it answers {', '.join(t.__name__ for t in self._JOB_MESSAGES)}")
        return await handler(self, self._job(msg.job), msg.message)

    async def _abort(self, j: _Job, message: AbortRequest) -> bool:
        queued = self._queued.pop(message.request_id, None)
        if queued is not None and not queued.done():
            j.waiting = collections.deque(e for e in j.waiting if e[1] is not queued)
            queued.set_result(False)  # never reached the engine: its generate answers 'abort'
            return True
        return await self.worker.abort(message)

    async def _pull(self, j: _Job, message: PullWeights) -> str:
        j.relay.pull(message.version, [message.source, message.fallback], ipc_source="", timeout_s=message.timeout_s,
                     retries=message.retries)
        return j.relay.address

    async def _wait(self, j: _Job, message: WaitWeights) -> dict:
        s = await j.relay.wait(message.version)
        return {"version": s.version, "seconds": s.seconds, "bytes": s.bytes}

    async def _forget(self, j: _Job, message: ForgetWeights) -> list[int]:
        return j.relay.forget(message.first)

    async def _address(self, j: _Job, message: WeightAddress) -> WeightEndpoint:
        return WeightEndpoint(j.relay.address)

    async def _version(self, j: _Job, message: GetVersion) -> int:
        return j.version

    async def _job_stats(self, j: _Job, message: GetStats) -> dict:
        return {**self.worker.stats(), "version": j.version, "job_requests": j.requests, "job_queued_s": j.queued_s,
                **self.stats()}

    # ------------------------------------------------------------------ requests
    async def _generate(self, j: _Job, request: GenerateRequest) -> GenerationResult:
        loop = asyncio.get_running_loop()
        admitted = loop.create_future()
        entry = (time.monotonic(), admitted)
        j.waiting.append(entry)
        j.requests += 1
        self._queued[request.request_id] = admitted
        self._schedule()
        try:
            go = await admitted  # True: admitted by _schedule, with j.running already counted; False: aborted
        except asyncio.CancelledError:
            if entry in j.waiting:
                j.waiting.remove(entry)
            elif admitted.done() and not admitted.cancelled() and admitted.result():
                j.running -= 1
                self._schedule()
            raise
        finally:
            self._queued.pop(request.request_id, None)
        if not go:
            if entry in j.waiting:
                j.waiting.remove(entry)
            return GenerationResult(token_ids=[], logprobs=[], versions=[], finish_reason="abort",
                                    num_prompt_tokens=len(request.prompt_token_ids), worker=self.name)
        j.queued_s += time.monotonic() - entry[0]
        t0 = time.monotonic()
        try:
            if self.active != j.id:  # cannot happen: admission and swaps exclude each other
                raise RuntimeError(f"{self.name}: request of {j.id!r} admitted while {self.active!r} is active")
            result = await self.worker.generate(request)
            j.prompt_tokens += result.num_prompt_tokens
            j.cached_tokens += result.num_cached_tokens
            self.answered.append((j.id, result.versions[0] if result.versions else j.version))
            del self.answered[:-256]
            j.est_s = 0.7 * j.est_s + 0.3 * (time.monotonic() - t0)
            return result
        finally:
            j.running -= 1
            self._schedule()

    def _schedule(self) -> None:
        """Admit what may run now, or start draining toward a swap (HRRS picks among the queue heads)."""
        if self._swap is not None and not self._swap.done():
            return
        if self.target is None:
            ready = [j for j in self.jobs.values() if j.waiting]
            if not ready:
                return
            heads = [(j.id, j.waiting[0][0], j.est_s) for j in ready]
            chosen = ready[pick(heads, time.monotonic(), self.active, self.switch_cost_s, self.policy)]
            if chosen.id == self.active:
                while chosen.waiting:
                    _, fut = chosen.waiting.popleft()
                    if not fut.done():
                        chosen.running += 1
                        fut.set_result(True)
                return
            self.target = chosen.id
            self._drain_t0 = time.monotonic()
            if self.state.tier(chosen.id) == "disk":
                self.state.prefetch(chosen.id)  # disk -> host while the active job drains
        if self.active is None or self.jobs[self.active].running == 0:
            self._swap = asyncio.get_running_loop().create_task(self._switch(self.target), name="swap-weights")

    async def _switch(self, target: str) -> None:
        t0 = time.monotonic()
        self.drain_s += t0 - self._drain_t0
        async with self._guard():
            old = self.active
            if old is not None:  # 1) device -> host/disk
                live = {n: p.detach() for n, p in self.worker.engine.model.named_parameters()}
                self.state.offload(old, live, self.offload_tier)
                self.active = None
            weights = self.state.restore(target)  # 2) disk -> host -> device
            await self._install(self.jobs[target], WeightBucket(self.jobs[target].version, weights), swap=True)
            self.active = target
        dt = time.monotonic() - t0
        self.swap_s += dt
        self.switches += old is not None
        self.switch_cost_s = 0.7 * self.switch_cost_s + 0.3 * dt
        self.target = None
        self._swap = None
        self._schedule()  # 3) admit

    async def _update(self, j: _Job, update: UpdateWeights) -> int:
        weights = update.weights
        if weights is None:
            if update.version == j.version:
                return j.version
            weights, _ = await j.relay.take(update.version, [update.source] if update.source else [])
        async with self._guard():
            if self.active == j.id:
                await self._install(j, weights, swap=False)
            else:
                self.state.offload(j.id, dict(weights.tensors), self.offload_tier)
                j.cache_valid = False  # its cached prefixes were computed with the weights it had
            j.version = weights.version
        return j.version

    async def _install(self, j: _Job, weights: WeightBucket, swap: bool) -> None:
        """Put ``j``'s weights into the engine under its prefix-cache namespace; a swap back of unchanged
        weights keeps its cached prefixes, new weights drop them (the other jobs' stay in either case)."""
        if self.job_prefix_cache:
            await self.worker.install_weights(weights, j.id, reuse_cached=swap and j.cache_valid)
            j.cache_valid = True
        else:
            await self.worker.update_weights(UpdateWeights.of(weights))

    _JOB_MESSAGES: dict[type, Callable] = {
        GenerateRequest: _generate, AbortRequest: _abort, PullWeights: _pull, UpdateWeights: _update,
        WaitWeights: _wait, ForgetWeights: _forget, WeightAddress: _address, GetVersion: _version,
        GetStats: _job_stats}
    """A job's message type -> the method answering it, ``fn(self, job, message)``."""

    # ------------------------------------------------------------------ accounting, lifecycle
    @handles(GetStats)
    def get_stats(self, msg: GetStats) -> dict:
        """The worker's own counters, all jobs together (``stats``)."""
        return self.stats()

    def stats(self) -> dict:
        """Busy seconds of the device (engine steps + weight swaps) against the seconds it was held, and where
        they went: engine steps, swaps, draining toward a swap (part of the engine steps), idle (held, not busy);
        prompt tokens computed (prefill, recomputation included) and served from the prefix cache."""
        w = self.worker.stats()
        engine_s = w["engine_seconds"]
        held = time.monotonic() - self._started
        e = self.worker.engine.stats()
        return {"active_job": self.active, "switches": self.switches, "swap_seconds": self.swap_s,
                "prefix_hit_rate": w["prefix_hit_rate"], "prompt_tokens": w["prompt_tokens"],
                "cached_tokens": w["cached_tokens"], "computed_prompt_tokens": e.computed_prompt_tokens,
                "engine_seconds": engine_s, "drain_seconds": self.drain_s,
                "idle_seconds": max(held - engine_s - self.swap_s, 0.0), "job_prefix_cache": self.job_prefix_cache,
                "prefix_hit_rate_by_job": {j.id: j.cached_tokens / j.prompt_tokens if j.prompt_tokens else 0.0
                                           for j in self.jobs.values()},
                "busy_seconds": engine_s + self.swap_s, "held_seconds": held,
                "requests_by_job": {j.id: j.requests for j in self.jobs.values()},
                "queued_seconds_by_job": {j.id: j.queued_s for j in self.jobs.values()}}

    def served(self) -> list:
        """(job, engine version) of recently answered requests."""
        return [list(e) for e in self.answered]

    async def on_stop(self) -> None:
        for j in self.jobs.values():
            await j.relay.close()
        await self.worker.shutdown()
        self.state.close()

    def _job(self, job: str) -> _Job:
        j = self.jobs.get(job)
        if j is None:
            raise KeyError(f"job {job!r} is not registered on {self.name}; registered: {sorted(self.jobs)}")
        return j

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock
