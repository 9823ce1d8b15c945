"""LLMProxy: the gateway between trajectories and inference workers (rollart.txt §6.1, §6.3, §8).

``await proxy.generate(trajectory_id, prompt_token_ids, sampling, tag)`` picks a worker and returns
that request's ``GenerationResult``:

- **hardware affinity**: ``tag`` (the task name) maps to a hardware class through ``hw_affinity``
  (the dict given to ``@hw_mapping``; ``"default"`` catches other tags). When that class has no live
  worker, the request falls back to a compatible class (``fallback``; by default any other class);
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

Workers are anything with ``async call(method, *args, **kwargs)``: an ``ActorHandle`` of an
``InferenceWorker`` actor, or ``LocalWorker`` around an in-process one.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

from rollart.engine.sampling import InvalidRequestError, SamplingParams
from rollart.rollout.types import GenerationResult

log = logging.getLogger(__name__)


class UnknownTagError(InvalidRequestError):
    """A generate() tag that hw_affinity does not map (and there is no 'default' entry)."""


class NoWorkerError(RuntimeError):
    """No live inference worker can serve a request (all dead, or none of a compatible class)."""


@dataclass
class ProxyConfig:
    """LLMProxy settings."""
    hw_affinity: dict = field(default_factory=dict)
    """tag -> hardware class (as in @hw_mapping). 'default' serves other tags. Empty: every tag, any worker."""
    fallback: dict = field(default_factory=dict)
    """class -> ordered list of compatible classes used when it has no live worker. A class missing here
    uses rollart.distributed.hardware.fallbacks (GPU classes of the same strength first; unknown classes:
    any other class); map it to [] to forbid fallback."""
    sticky: bool = True
    """Send a trajectory's next turn to the worker that served its previous one (prefix-cache reuse)."""
    max_sticky: int = 100_000
    """Trajectories whose sticky worker is remembered (least recently served forgotten first; release()
    forgets a finished one at once)."""
    max_worker_failures: int = 3
    """Deaths of one worker after which the proxy stops using it and reroutes its requests."""
    restart_timeout_s: float = 30.0
    """How long to wait for a dead worker to come back (restarted in place) before rerouting."""
    max_attempts: int = 8
    """Times one request is issued (first try + retries after worker deaths) before it fails."""
    resync_weights: bool = True
    """Keep the latest update_weights() tensors and send them to a restarted worker before reusing it."""
    pd_prefill_class: str = ""
    """PD disaggregation: hardware class that runs prefill (with pd_decode_class; both empty = off)."""
    pd_decode_class: str = ""
    """PD disaggregation: hardware class that runs decode."""

    def __post_init__(self) -> None:
        if self.max_worker_failures < 1 or self.max_attempts < 1 or self.restart_timeout_s <= 0 or self.max_sticky < 1:
            raise ValueError("max_worker_failures, max_attempts and max_sticky must be >= 1, restart_timeout_s > 0")
        if bool(self.pd_prefill_class) != bool(self.pd_decode_class):
            raise ValueError("PD disaggregation needs both pd_prefill_class and pd_decode_class "
                             f"(got {self.pd_prefill_class!r} / {self.pd_decode_class!r})")
        for cls, alts in self.fallback.items():
            if not isinstance(alts, (list, tuple)):
                raise ValueError(f"fallback[{cls!r}] must be a list of hardware classes, got {alts!r}")


class LocalWorker:
    """An in-process InferenceWorker behind the same ``call`` interface as an actor handle."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.worker, method)(*args, **kwargs)


@dataclass(eq=False)
class WorkerSlot:
    """The proxy's view of one inference worker."""
    name: str
    hw_class: str
    handle: Any
    outstanding: int = 0
    """Prompt + max new tokens of the requests this proxy has running on it."""
    failures: int = 0
    """Deaths observed (one per crash, however many requests it took down)."""
    healthy: bool = True
    """False from a death until the worker answers again."""
    dead: bool = False
    """Removed: no longer routed to."""
    version: int = 0
    routed: int = 0
    recovering: asyncio.Future | None = None


def _dead_error_types() -> tuple[type[BaseException], ...]:
    try:
        from rollart.actors.errors import ActorDeadError
    except ImportError:  # pragma: no cover - runtime not installed: only in-process workers
        return (ConnectionError,)
    return (ActorDeadError, ConnectionError)


def _local_error(e: BaseException) -> BaseException:
    """A worker's per-request error as the caller's InvalidRequestError (it crossed the wire by name)."""
    matches = getattr(e, "matches", None)
    if matches is not None and matches(InvalidRequestError):
        return InvalidRequestError(getattr(e, "message", str(e)))
    return e


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
        classes = {w.hw_class for w in self.workers.values()}
        for tag, cls in self.cfg.hw_affinity.items():
            if cls not in classes:
                log.warning("hw_affinity[%r] = %r but no worker has that class (have %s): will fall back",
                            tag, cls, sorted(classes))
        self.version = 0
        self._latest_weights: tuple[Any, int] | None = None
        self._suspended = False
        self._waiters: list[tuple[str, asyncio.Future]] = []
        self._sticky: dict[tuple[str, str], str] = {}
        self._inflight: dict[str, dict[str, WorkerSlot]] = {}
        self._aborted: set[str] = set()
        self._active: dict[str, int] = {}
        """trajectory id -> generate() calls in progress (waiting, running or between retries)."""
        self._seq = itertools.count()
        self._dead_errors = _dead_error_types()
        self.counters = dict(requests=0, retries=0, rerouted=0, fallbacks=0, aborted=0, pd_reprefill_tokens=0)

    @classmethod
    def from_cluster(cls, cluster: Any, config: ProxyConfig | None = None, method: str = "generate") -> "LLMProxy":
        """A proxy over a started ``rollart.distributed.Cluster`` of InferenceWorkers.

        Each member keeps the hardware class the ResourceManager bound it to; without an explicit
        ``config.hw_affinity`` the worker class's ``@hw_mapping`` declaration on ``method`` is used.
        """
        cfg = config or ProxyConfig()
        d = getattr(cluster, "dispatch", {}).get(method)
        if not cfg.hw_affinity and d is not None and d.kind == "hw_mapping":
            cfg = dataclasses.replace(cfg, hw_affinity=dict(d.hw_affinity))
        return cls([WorkerSlot(m.name, m.hardware, m.handle) for m in cluster.members], cfg)

    # ---------------------------------------------------------------- public API

    async def generate(self, trajectory_id: str, prompt_token_ids: list[int],
                       sampling: SamplingParams | dict | None = None, tag: str = "default") -> GenerationResult:
        """One generation for one trajectory turn; see the module docstring for routing."""
        params = sampling if isinstance(sampling, SamplingParams) else SamplingParams.from_dict(sampling or {})
        prompt = [int(t) for t in prompt_token_ids]
        if not prompt:
            raise InvalidRequestError(f"trajectory {trajectory_id!r}: empty prompt; send at least one token")
        hw_class = self.resolve_tag(tag)
        self._aborted.discard(trajectory_id)  # a new request: the trajectory goes on
        if self._suspended and not await self._wait_admitted(trajectory_id):
            return _abort_result(len(prompt))
        self.counters["requests"] += 1
        seq = next(self._seq)
        self._active[trajectory_id] = self._active.get(trajectory_id, 0) + 1
        try:
            if self.cfg.pd_prefill_class:
                from rollart.inference.pd import generate_disaggregated
                return await generate_disaggregated(self, trajectory_id, seq, prompt, params)
            return await self.run_request(trajectory_id, f"{trajectory_id}#{seq}", prompt, params, hw_class)
        finally:
            self._active[trajectory_id] -= 1
            if not self._active[trajectory_id]:
                del self._active[trajectory_id]

    def resolve_tag(self, tag: str) -> str | None:
        """The hardware class a tag maps to (None: any class). Unknown tag -> UnknownTagError."""
        aff = self.cfg.hw_affinity
        if not aff:
            return None
        if tag in aff:
            return aff[tag]
        if "default" in aff:
            return aff["default"]
        raise UnknownTagError(f"unknown tag {tag!r}: hw_affinity maps {sorted(aff)}; add it there "
                              "or a 'default' entry")

    async def suspend(self) -> None:
        """Admit nothing new until resume(); requests already in flight keep generating."""
        self._suspended = True

    async def resume(self) -> None:
        """Admit again; requests that waited are released in arrival order."""
        self._suspended = False
        waiters, self._waiters = self._waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(True)

    @property
    def suspended(self) -> bool:
        return self._suspended

    async def abort(self, trajectory_id: str) -> int:
        """Abort every request of a trajectory (waiting or running): each returns finish_reason 'abort'."""
        n = 0
        for tid, fut in list(self._waiters):
            if tid == trajectory_id and not fut.done():
                fut.set_result(False)
                n += 1
        self._waiters = [(t, f) for t, f in self._waiters if not f.done()]
        for rid, slot in list(self._inflight.get(trajectory_id, {}).items()):
            try:
                await slot.handle.call("abort", rid)
            except self._dead_errors:
                pass  # its worker died: the retry path sees the abort mark below
            n += 1
        if n or trajectory_id in self._active:
            self._aborted.add(trajectory_id)  # also stops a request that is between two attempts
        self.counters["aborted"] += n
        return n

    def release(self, trajectory_id: str) -> None:
        """Forget a finished trajectory's sticky worker."""
        for key in [k for k in self._sticky if k[0] == trajectory_id]:
            del self._sticky[key]
        self._aborted.discard(trajectory_id)

    async def update_weights(self, named_tensors: Any, version: int) -> list[str]:
        """Load new weights on every live worker (concurrently); returns the names updated.

        A worker that dies meanwhile is brought up to date when it comes back (``resync_weights``).
        """
        self.version = int(version)
        if self.cfg.resync_weights:
            self._latest_weights = (named_tensors, self.version)
        live = [w for w in self.workers.values() if not w.dead]
        results = await asyncio.gather(*(w.handle.call("update_weights", named_tensors, self.version)
                                         for w in live), return_exceptions=True)
        updated = []
        for w, r in zip(live, results):
            if isinstance(r, self._dead_errors):
                self._record_death(w, r)
            elif isinstance(r, BaseException):
                raise RuntimeError(f"update_weights failed on worker {w.name}: {r}") from r
            else:
                w.version = self.version
                updated.append(w.name)
        return updated

    def stats(self) -> dict:
        return dict(self.counters, version=self.version, suspended=self._suspended,
                    workers={w.name: dict(hw_class=w.hw_class, outstanding=w.outstanding, routed=w.routed,
                                          failures=w.failures, healthy=w.healthy, dead=w.dead)
                             for w in self.workers.values()})

    # ---------------------------------------------------------------- one request, with retries

    async def run_request(self, trajectory_id: str, request_key: str, prompt: list[int],
                          params: SamplingParams, hw_class: str | None, phase: str = "") -> GenerationResult:
        """Issue one request on a worker of ``hw_class`` (or a fallback), re-issuing it after worker deaths."""
        cost = len(prompt) + params.max_tokens
        for attempt in range(self.cfg.max_attempts):
            if attempt and trajectory_id in self._aborted:
                return _abort_result(len(prompt))  # aborted while its worker was being recovered
            slot = self._pick(trajectory_id, hw_class, phase)
            rid = f"{request_key}{phase}.{attempt}"
            slot.outstanding += cost
            slot.routed += 1
            self._inflight.setdefault(trajectory_id, {})[rid] = slot
            try:
                result = await slot.handle.call("generate", rid, prompt, params, trajectory_id)
            except self._dead_errors as e:
                self._record_death(slot, e)
                if trajectory_id in self._aborted:
                    return _abort_result(len(prompt))
                self.counters["retries"] += 1
                log.warning("worker %s died serving %s (attempt %d): %s", slot.name, rid, attempt + 1, e)
                await self._recover(slot)
                continue
            except asyncio.CancelledError:
                # The actor runtime cancels the call inside the worker (which aborts it there); an
                # explicit abort as well makes it certain even if the cancel message is lost.
                asyncio.get_running_loop().create_task(self._quiet_abort(slot, rid))
                raise
            except Exception as e:
                raise _local_error(e) from None
            finally:
                slot.outstanding -= cost
                reqs = self._inflight.get(trajectory_id, {})
                reqs.pop(rid, None)
                if not reqs:
                    self._inflight.pop(trajectory_id, None)
            self._record_alive(slot)
            if self.cfg.sticky:
                self._sticky.pop((trajectory_id, phase), None)
                self._sticky[(trajectory_id, phase)] = slot.name  # most recent last
                while len(self._sticky) > self.cfg.max_sticky:
                    del self._sticky[next(iter(self._sticky))]  # forget the least recently served
            if isinstance(result, dict):
                result = GenerationResult(**result)
            result.worker = slot.name  # the proxy's name for it (an actor's own default may differ)
            return result
        raise NoWorkerError(f"trajectory {trajectory_id!r}: request failed {self.cfg.max_attempts} times "
                            "because its inference workers kept dying; see the worker logs")

    async def _quiet_abort(self, slot: WorkerSlot, rid: str) -> None:
        try:
            await slot.handle.call("abort", rid)
        except Exception:  # noqa: BLE001 - best effort: the cancel already reached the worker
            pass

    # ---------------------------------------------------------------- routing

    def group(self, hw_class: str | None) -> list[WorkerSlot]:
        """Live workers that may serve ``hw_class``: its own, else the first fallback class that has any."""
        live = [w for w in self.workers.values() if not w.dead]
        if hw_class is None:
            return live
        own = [w for w in live if w.hw_class == hw_class]
        if own:
            return own
        present = sorted({w.hw_class for w in live} - {hw_class})
        if hw_class in self.cfg.fallback:
            order = list(self.cfg.fallback[hw_class])
        else:
            order = _compatible(hw_class, present)
        for alt in order:
            alts = [w for w in live if w.hw_class == alt]
            if alts:
                self.counters["fallbacks"] += 1
                return alts
        return []

    def _pick(self, trajectory_id: str, hw_class: str | None, phase: str = "") -> WorkerSlot:
        candidates = self.group(hw_class)
        if not candidates:
            raise NoWorkerError(f"no live inference worker for hardware class {hw_class!r} or its fallbacks "
                                f"{self.cfg.fallback.get(hw_class, 'any')}; workers: "
                                f"{ {w.name: ('dead' if w.dead else w.hw_class) for w in self.workers.values()} }")
        if self.cfg.sticky:
            name = self._sticky.get((trajectory_id, phase))
            slot = self.workers.get(name) if name else None
            if slot is not None and slot in candidates:
                return slot
        healthy = [w for w in candidates if w.healthy] or candidates
        return min(healthy, key=lambda w: (w.outstanding, w.routed))

    # ---------------------------------------------------------------- health

    def _record_death(self, slot: WorkerSlot, error: BaseException) -> None:
        if slot.healthy:  # one crash fails every request it was running: count it once
            slot.failures += 1
            slot.healthy = False
        gone = getattr(slot.handle, "alive", True) is False  # the actor runtime gave up restarting it
        if (gone or slot.failures >= self.cfg.max_worker_failures) and not slot.dead:
            slot.dead = True
            log.error("inference worker %s removed after %d failures (last: %s)", slot.name, slot.failures, error)

    def _record_alive(self, slot: WorkerSlot) -> None:
        slot.healthy = True

    async def _recover(self, slot: WorkerSlot) -> None:
        """Wait (once per crash, shared by its requests) for a dead worker to come back, or remove it."""
        if slot.dead:
            self.counters["rerouted"] += 1
            return
        if slot.recovering is None or slot.recovering.done():
            slot.recovering = asyncio.ensure_future(self._probe(slot))
        await asyncio.shield(slot.recovering)
        if slot.dead:
            self.counters["rerouted"] += 1

    async def _probe(self, slot: WorkerSlot) -> None:
        deadline = asyncio.get_running_loop().time() + self.cfg.restart_timeout_s
        delay = 0.05
        while True:
            try:
                async with asyncio.timeout(max(0.1, deadline - asyncio.get_running_loop().time())):
                    version = await slot.handle.call("get_version")
                    if self._latest_weights is not None and version < self._latest_weights[1]:
                        await slot.handle.call("update_weights", *self._latest_weights)
                slot.version = self.version
                slot.healthy = True
                log.warning("inference worker %s is back (restarted in place)", slot.name)
                return
            except (TimeoutError, *self._dead_errors):
                if getattr(slot.handle, "alive", True) is False:
                    slot.dead = True
                    log.error("inference worker %s is dead for good: removed", slot.name)
                    return
                if asyncio.get_running_loop().time() >= deadline:
                    slot.dead = True
                    log.error("inference worker %s did not come back in %.0f s: removed",
                              slot.name, self.cfg.restart_timeout_s)
                    return
            await asyncio.sleep(delay)  # exponential backoff between restart probes, not a work poll
            delay = min(delay * 2, 1.0)

    # ---------------------------------------------------------------- admission

    async def _wait_admitted(self, trajectory_id: str) -> bool:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((trajectory_id, fut))
        try:
            return await fut
        finally:
            self._waiters = [(t, f) for t, f in self._waiters if f is not fut]


def _compatible(hw_class: str, present: list[str]) -> list[str]:
    """Stand-ins for a class: the ResourceManager's compatibility order for known hardware classes
    (GPUs of the same strength first), otherwise any other class present."""
    try:
        from rollart.distributed.hardware import fallbacks
        return fallbacks(hw_class, present)
    except (ImportError, KeyError):
        return present


def _abort_result(num_prompt_tokens: int) -> GenerationResult:
    return GenerationResult(token_ids=[], logprobs=[], versions=[], finish_reason="abort",
                            num_prompt_tokens=num_prompt_tokens)
