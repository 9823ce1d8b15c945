"""LLMProxy: the gateway between trajectories and inference workers (RollArt §6.1, §6.3, §8).

``await proxy.generate(trajectory_id, prompt_token_ids, sampling, task)`` picks a worker and returns
that request's ``GenerationResult``:

- **hardware affinity**: ``task`` (the task's name) maps to a hardware class through ``hw_affinity``
  (the dict given to ``@hw_mapping``; ``"default"`` catches other tasks), or with ``hw_affinity="auto"``
  through the mapping the online profiler (``rollart.rollout.profiler``) learns from every request's
  tokens and time per class; the profiler measures in any case, so ``proxy.profiler`` always proposes one.
  When that class has no live worker, the request falls back to a compatible class (``fallback``; by
  default any other class);
- **sticky routing**: a trajectory's next turn goes to the worker that served its last one, whose
  prefix cache holds the history;
- **balancing**: otherwise the live worker of the group with the fewest outstanding tokens
  (prompt + max new tokens of everything it is running for us);
- **suspend/resume** (weight-sync steps ② and ④ of §6.2): while suspended nothing new is admitted
  (calls wait, FIFO) and requests in flight keep running; ``update_weights`` (step ③) updates every
  live worker;
- **cancellation**: cancelling the awaiting coroutine aborts the request in its engine;
  ``abort(trajectory_id)`` ends a trajectory's requests with finish_reason ``'abort'``;
- **fault tolerance** (§8): if a worker dies mid-request (``ActorDeadError``) the request is
  re-issued with its full prompt - on the same worker once the actor runtime has restarted it in
  place (after re-sending it the latest weights), or, once the worker failed ``max_worker_failures``
  times or did not come back within ``restart_timeout_s``, on a healthy worker of a compatible class.
  A partial generation dies with its worker, so the caller sees exactly one result per request;
- **PD disaggregation** (§6.3, optional): prefill on ``pd_prefill_class``, decode on
  ``pd_decode_class`` - see ``rollart.inference.pd``.

Workers are anything with ``async call(method, message)``: an ``ActorHandle`` of an
``InferenceWorker`` actor, or ``rollart.actors.LocalHandle`` around an in-process one. The proxy is where a request
enters: its prompt and sampling are validated here, once, into a typed ``GenerateRequest``; below it
(worker, engine) only typed values travel. Generate / abort / update-weights go to a worker as one
typed message each (``GenerateRequest``, ``AbortRequest``, ``UpdateWeights`` from ``rollart.types``).

This module keeps the request path (admission, one request with its retries, abort, weight updates);
the pieces it composes live beside it: ``proxy_config`` (settings and errors), ``worker_slot`` (one
worker as the proxy sees it), ``routing`` (affinity, fallback, sticky, balancing), ``admission``
(suspend/resume gate) and ``worker_health`` (deaths, restarts, removal).
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from typing import Any

from rollart.actors import answering
from rollart.inference.pd import generate_disaggregated
from rollart.messages import ReclaimKV, ReleaseKV
from rollart.rollout.admission import AdmissionGate
from rollart.rollout.profiler import HardwareProfiler
from rollart.rollout.proxy_config import AUTO, NoWorkerError, ProxyConfig, UnknownTaskError
from rollart.rollout.routing import Router
from rollart.rollout.worker_health import WorkerHealth
from rollart.rollout.worker_slot import WorkerSlot, dead_error_types, local_error
from rollart.types import (AbortRequest, GenerateRequest, GenerationResult, SamplingParams, UpdateWeights,
                           WeightBucket, token_ids)

__all__ = ["LLMProxy", "ProxyConfig", "WorkerSlot", "NoWorkerError", "UnknownTaskError"]

log = logging.getLogger(__name__)


class LLMProxy:
    """Route per-trajectory generation requests across inference workers (see module docstring)."""

    def __init__(self, workers: list[WorkerSlot] | list[tuple[str, str, Any]],
                 config: ProxyConfig | None = None) -> None:
        self.cfg = config or ProxyConfig()
        self.workers: dict[str, WorkerSlot] = {}
        for w in workers:
            slot = w if isinstance(w, WorkerSlot) else WorkerSlot(*w)
            if slot.name in self.workers:
                raise ValueError(f"two inference workers are named {slot.name!r}")
            self.workers[slot.name] = slot
        if not self.workers:
            raise ValueError("LLMProxy needs at least one inference worker")
        self.profiler = HardwareProfiler(_class_counts(self.workers.values()))
        """Measures every request; with hw_affinity='auto' its mapping routes (else it only proposes one)."""
        self.counters = dict(requests=0, retries=0, rerouted=0, fallbacks=0, spills=0, aborted=0,
                             pd_reprefill_tokens=0, pd_kv_tokens=0, pd_kv_bytes=0)
        self._dead_errors = dead_error_types()
        self.router = Router(self.workers, self.cfg, self.counters,
                             self.profiler if self.cfg.hw_affinity == AUTO else None)
        self.gate = AdmissionGate()
        self.health = WorkerHealth(self.cfg, self.counters, self._dead_errors)
        self._inflight: dict[str, dict[str, WorkerSlot]] = {}
        """trajectory id -> {request id: worker running it}."""
        self._aborted: set[str] = set()
        self._active: dict[str, int] = {}
        """trajectory id -> generate() calls in progress (waiting, running or between retries)."""
        self._seq = itertools.count()

    @classmethod
    def from_cluster(cls, cluster: Any, config: ProxyConfig | None = None) -> "LLMProxy":
        """A proxy over a started ``rollart.distributed.Cluster`` of InferenceWorkers (how a run makes its
        proxy: ``rollart.pipeline.run_actors.start_actors``); each member keeps the hardware class the
        ResourceManager bound it to."""
        return cls([WorkerSlot(m.name, m.hw_class, m.handle) for m in cluster.members], config)

    def all_dead_cause(self) -> str:
        """'every inference worker is dead (name: reason; ...)' when none is left, else ''."""
        workers = self.workers.values()
        if not workers or not all(w.dead for w in workers):
            return ""
        causes = "; ".join(f"{w.name}: {w.handle.dead_reason or 'failed'}" for w in workers)
        return f"every inference worker is dead ({causes})"

    @property
    def version(self) -> int:
        """The weights version of the last update_weights()."""
        return self.health.version

    # ---------------------------------------------------------------- public API

    async def generate(self, trajectory_id: str, prompt_token_ids: list[int],
                       sampling: SamplingParams | dict | None = None, task: str = "default") -> GenerationResult:
        """One generation for one trajectory turn; see the module docstring for routing.

        Bad input (prompt not a non-empty list of token ids, bad sampling, unknown task) raises
        ``InvalidRequestError`` here, naming the problem; nothing is sent.
        """
        params = SamplingParams.of(sampling)
        prompt = token_ids(prompt_token_ids, f"trajectory {trajectory_id!r}")
        hw_class = self.resolve_task(task)
        self._aborted.discard(trajectory_id)  # a new request: the trajectory goes on
        if self.gate.suspended and not await self.gate.wait(trajectory_id):
            return _abort_result(len(prompt))
        self.counters["requests"] += 1
        seq = next(self._seq)
        self._active[trajectory_id] = self._active.get(trajectory_id, 0) + 1
        try:
            request = GenerateRequest(f"{trajectory_id}#{seq}", prompt, params, trajectory_id, task=task)
            if self.cfg.pd_prefill_class:
                classes = {"p": self.cfg.pd_prefill_class, "d": self.cfg.pd_decode_class}
                result, moved = await generate_disaggregated(
                    lambda phase, req: self.run_request(req, classes[phase], phase), request,
                    self.cfg.pd_kv_transport)
                self.counters["pd_reprefill_tokens"] += moved.reprefill_tokens
                self.counters["pd_kv_tokens"] += moved.kv_tokens
                self.counters["pd_kv_bytes"] += moved.kv_bytes
                return result
            t0 = time.perf_counter()
            result = await self.run_request(request, hw_class)
            slot = self.workers.get(result.worker)
            if slot is not None and result.finish_reason not in ("abort", "error"):
                self.profiler.record(task, slot.hw_class, result.num_prompt_tokens - result.num_cached_tokens,
                                     len(result.token_ids), time.perf_counter() - t0, trajectory_id)
            return result
        finally:
            self._active[trajectory_id] -= 1
            if not self._active[trajectory_id]:
                del self._active[trajectory_id]

    def resolve_task(self, task: str) -> str | None:
        """The hardware class a task maps to (None: any class). Unknown task -> UnknownTaskError."""
        return self.router.resolve_task(task)

    def group(self, hw_class: str | None) -> list[WorkerSlot]:
        """Live workers that may serve ``hw_class``: its own, else the first fallback class that has any."""
        return self.router.group(hw_class)

    async def suspend(self) -> None:
        """Admit nothing new until resume(); requests already in flight keep generating."""
        self.gate.suspend()

    async def resume(self) -> None:
        """Admit again; requests that waited are released in arrival order."""
        self.gate.resume()

    @property
    def suspended(self) -> bool:
        return self.gate.suspended

    async def abort(self, trajectory_id: str) -> int:
        """Abort every request of a trajectory (waiting or running): each returns finish_reason 'abort'."""
        n = self.gate.refuse(trajectory_id)
        for rid, slot in list(self._inflight.get(trajectory_id, {}).items()):
            n += 1
            if not answering(slot.handle):
                continue  # restarting: the request died with the worker; the retry path sees the abort mark below
            try:
                await slot.handle.send(AbortRequest(rid))
            except self._dead_errors:
                pass  # its worker died: the retry path sees the abort mark below
        if n or trajectory_id in self._active:
            self._aborted.add(trajectory_id)  # also stops a request that is between two attempts
        self.counters["aborted"] += n
        return n

    def release(self, trajectory_id: str) -> None:
        """Forget a finished trajectory's sticky worker."""
        self.router.forget(trajectory_id)
        self._aborted.discard(trajectory_id)

    async def update_weights(self, update: UpdateWeights | WeightBucket) -> list[str]:
        """Install a weight version on every live worker (concurrently); returns the names updated.

        ``UpdateWeights(version, source=store address)``: each worker installs the version it pulled over the
        weight plane (or pulls it from the store first); a worker that dies meanwhile pulls it itself when it
        comes back (``resync_weights``). A ``WeightBucket`` is installed as given (in-process use).
        """
        update = update if isinstance(update, UpdateWeights) else UpdateWeights.of(update)
        self.health.updated(update)
        updated = []
        for w, _ in await self._send_live(update):
            w.version = self.version
            updated.append(w.name)
        return updated

    async def release_kv(self) -> int:
        """Every live worker aborts what it runs and frees its KV cache (``ReleaseKV``); the bytes freed. A worker
        restarting meanwhile comes back with its cache allocated."""
        return sum(freed for _, freed in await self._send_live(ReleaseKV()))

    async def reclaim_kv(self) -> int:
        """Every live worker allocates its KV cache again (``ReclaimKV``); the bytes they hold."""
        return sum(held for _, held in await self._send_live(ReclaimKV()))

    async def _send_live(self, message: Any) -> list[tuple[WorkerSlot, Any]]:
        """Send ``message`` to every live worker at once; (worker, answer) of those that answered. A worker that is
        restarting (perhaps waiting for capacity) is never waited on: the probe takes it back, resynced, or out of
        routing; one that dies meanwhile is recorded so; any other failure raises, naming the worker."""
        live = []
        for w in self.workers.values():
            if w.dead:
                continue
            if not answering(w.handle):
                self.health.restarting(w)
                continue
            live.append(w)
        results = await asyncio.gather(*(w.handle.send(message) for w in live), return_exceptions=True)
        answered = []
        for w, r in zip(live, results):
            if isinstance(r, self._dead_errors):
                self.health.record_death(w, r)
            elif isinstance(r, BaseException):
                first = (str(r).strip() or type(r).__name__).splitlines()[0]  # a RemoteError adds its traceback
                raise RuntimeError(f"{type(message).__name__} failed on worker {w.name}: {first}") from r
            else:
                answered.append((w, r))
        return answered

    def stats(self) -> dict:
        return dict(self.counters, version=self.version, suspended=self.suspended,
                    workers={w.name: dict(hw_class=w.hw_class, outstanding=w.outstanding, routed=w.routed,
                                          failures=w.failures, healthy=w.healthy, dead=w.dead)
                             for w in self.workers.values()})

    # ---------------------------------------------------------------- one request, with retries

    async def run_request(self, request: GenerateRequest, hw_class: str | None, phase: str = "") -> GenerationResult:
        """Issue ``request`` on a worker of ``hw_class`` (or a fallback), re-issuing it after worker deaths; each
        attempt gets its own request id (the request's id, the phase and the attempt)."""
        trajectory_id, prompt = request.trajectory_id, request.prompt_token_ids
        cost = len(prompt) + request.sampling.max_tokens
        for attempt in range(self.cfg.max_attempts):
            if attempt and trajectory_id in self._aborted:
                return _abort_result(len(prompt))  # aborted while its worker was being recovered
            slot = await self._pick_answering(trajectory_id, hw_class, phase)
            if slot is None:
                return _abort_result(len(prompt))  # aborted while its pick was restarting
            rid = f"{request.request_id}{phase}.{attempt}"
            slot.outstanding += cost
            slot.routed += 1
            self._inflight.setdefault(trajectory_id, {})[rid] = slot
            try:
                result = await slot.handle.send(dataclasses.replace(request, request_id=rid))
            except self._dead_errors as e:
                self.health.record_death(slot, e)
                if trajectory_id in self._aborted:
                    return _abort_result(len(prompt))
                self.counters["retries"] += 1
                log.warning("worker %s died serving %s (attempt %d): %s", slot.name, rid, attempt + 1, e)
                await self.health.recover(slot)
                continue
            except asyncio.CancelledError:
                # The actor runtime cancels the call inside the worker (which aborts it there); an
                # explicit abort as well makes it certain even if the cancel message is lost.
                asyncio.get_running_loop().create_task(self._quiet_abort(slot, rid))
                raise
            except Exception as e:
                raise local_error(e) from None
            finally:
                slot.outstanding -= cost
                reqs = self._inflight.get(trajectory_id, {})
                reqs.pop(rid, None)
                if not reqs:
                    self._inflight.pop(trajectory_id, None)
            self.health.record_alive(slot)
            self.router.remember(trajectory_id, phase, slot)
            result.worker = slot.name  # the proxy's name for it (an actor's own default may differ)
            return result
        raise NoWorkerError(f"trajectory {trajectory_id!r}: request failed {self.cfg.max_attempts} times "
                            "because its inference workers kept dying; see the worker logs")

    async def _pick_answering(self, trajectory_id: str, hw_class: str | None, phase: str) -> WorkerSlot | None:
        """The router's pick once it answers (None if the trajectory was aborted meanwhile). A pick that is
        restarting is never sent the request (a send to it waits for its next incarnation, for as long as that
        takes: on Ray, until a node with capacity joins); its restart is waited for instead on the shared probe,
        bounded by ``restart_timeout_s``, and the router picks again: the worker back, or another one."""
        while True:
            slot = self.router.pick(trajectory_id, hw_class, phase)
            if answering(slot.handle):
                return slot
            self.health.restarting(slot)
            await self.health.recover(slot)
            if trajectory_id in self._aborted:
                return None

    async def _quiet_abort(self, slot: WorkerSlot, rid: str) -> None:
        if not answering(slot.handle):
            return  # restarting: the request is gone with the incarnation that ran it
        try:
            await slot.handle.send(AbortRequest(rid))
        except Exception:  # noqa: BLE001 - best effort: the cancel already reached the worker
            pass


def _class_counts(slots) -> dict[str, int]:
    counts: dict[str, int] = {}
    for w in slots:
        counts[w.hw_class] = counts.get(w.hw_class, 0) + 1
    return counts


def _abort_result(num_prompt_tokens: int) -> GenerationResult:
    return GenerationResult(token_ids=[], logprobs=[], versions=[], finish_reason="abort",
                            num_prompt_tokens=num_prompt_tokens)
