"""The inference worker: a command-driven loop around one engine (RollArt §6.1, Figure 8).

Callers never touch the engine. ``generate(GenerateRequest)`` / ``abort(AbortRequest)`` /
``update_weights(UpdateWeights)`` / ``suspend`` / ``resume`` only append a command to the worker's
inbox and wake its loop; the loop alone owns the engine (any ``rollart.engine.protocol.Engine``) and
runs, forever::

    1) drain commands   (ADD, ABORT, UPDATE, SUSPEND, RESUME) - applied between engine steps
    2) step the engine  (one prefill/decode step for the whole running batch, in the engine thread)
    3) simulated delay  (optional hardware speed model, rollart.hardware.SpeedModel)
    4) publish outputs  (the completion callback resolves each finished request's future at once)

and sleeps on an event only when there is nothing to step and no command waiting. Because a command
waits at most one engine step, adding or aborting a request never stalls the batch already running.
The step runs in a dedicated thread so the actor's event loop keeps answering calls (and heartbeats)
while the engine computes; the engine itself is only ever touched from that one thread.

Weights arrive on the weight plane (``rollart.weightplane``), never through the coordinator:
``pull_weights(PullWeights)`` starts pulling a version from a relay parent in the background (each bucket
is served on to this worker's own children as it arrives, and staged where the engine's weights live);
``update_weights(UpdateWeights)`` waits for the rest of that pull, then installs the complete version
between two engine steps. A worker that holds no pull of the version (restarted in place) pulls it itself
from the store address the message names.

``InferenceWorker`` is a plain class: tests drive it in-process; the actor runtime serves it in its own
process (``ActorSystem.spawn(InferenceWorker, ...)``), where cancelling a ``generate`` call cancels the
coroutine here, which aborts the request in the engine. Requests arrive typed and validated (the
LLMProxy validates them where they enter); the worker does not check them again.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from rollart.actors import handles
from rollart.engine.protocol import Engine
from rollart.hardware import SpeedModel, SpeedModelConfig, StepWork
from rollart.types import (AbortRequest, GenerateRequest, GenerationResult, InvalidRequestError, PullWeights,
                           UpdateWeights, WeightBucket)

log = logging.getLogger(__name__)


class EngineFailure(RuntimeError):
    """The engine raised inside a step; every request in flight on this worker failed with it."""


@dataclass
class _Command:
    kind: str
    """ADD | ABORT | UPDATE | SUSPEND | RESUME"""
    request_id: str = ""
    payload: Any = None
    done: asyncio.Future | None = None
    """Resolved once the command has been applied (UPDATE, SUSPEND, RESUME)."""


@dataclass
class _InFlight:
    future: asyncio.Future
    num_prompt_tokens: int
    max_tokens: int
    trajectory_id: str = ""
    added_at: float = field(default_factory=time.monotonic)
    steps: int = 0
    """Engine steps taken since it was added (estimates its context length for the speed model)."""


class InferenceWorker:
    """One engine behind a command inbox. All public methods are coroutines safe to call concurrently.

    Args:
        engine: the engine config (``EngineConfig`` or a dict of its fields; a dict crosses processes).
        backend: engine backend in ``rollart.engine.registry.ENGINES`` ("torch" or "vllm"); None takes
            the engine config's own ``backend`` field.
        name: this worker's name (reported in every result's ``worker`` field).
        hw_class: the hardware class it runs on ("H800", "H20", "cpu"...), for routing.
        speed: optional ``SpeedModelConfig`` (or dict) simulating that hardware's step time.
        engine_obj: an already-built engine (tests); overrides ``engine`` / ``backend``.
        weight_store: the weight store's weight-plane address; at every start (a restart included) the worker
            asks it for its newest version and, when newer than its own, pulls and installs it before serving.
    """

    def __init__(self, engine: Any = None, *, backend: str | None = None, name: str = "worker",
                 hw_class: str = "cpu", speed: SpeedModelConfig | dict | None = None,
                 engine_obj: Engine | None = None, weight_store: str = "") -> None:
        if engine_obj is None:
            if engine is None:
                raise ValueError("InferenceWorker needs an engine config (engine=...) or engine_obj")
            from rollart.engine.registry import create_engine
            if backend is None:
                backend = (engine.get("backend") if isinstance(engine, dict) else getattr(engine, "backend", None))
            engine_obj = create_engine(backend or "torch", engine)
        self.engine: Engine = engine_obj
        self.name = name
        self.hw_class = hw_class
        if isinstance(speed, dict):
            speed = SpeedModelConfig(**speed)
        self.speed = SpeedModel(speed) if speed is not None else None
        self._inbox: deque[_Command] = deque()
        self._inflight: dict[str, _InFlight] = {}
        self._suspended = False
        self._wakeup: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"engine-{name}")
        self._on_finish: list[Callable[[str, GenerationResult], None]] = []
        self.weight_store = weight_store
        self._relay: Any = None  # rollart.weightplane.WeightRelay, started on first use
        self._last_pull: dict = {}
        self._counters = dict(requests=0, finished=0, aborted=0, failed=0, steps=0,
                              prompt_tokens=0, cached_tokens=0, generated_tokens=0,
                              simulated_seconds=0.0, simulated_scaled_seconds=0.0, engine_seconds=0.0)

    role = "generate"
    """For rollart.distributed.Cluster: places it with the generation role's default hardware."""

    # ---------------------------------------------------------------- public API (commands)

    def rollart_bind(self, info: dict) -> dict:
        """Called by a rollart.distributed Cluster once started: adopt the name and hardware it bound us to."""
        self.name = info.get("name", self.name)
        self.hw_class = info.get("hw_class", self.hw_class)
        return {"name": self.name, "hw_class": self.hw_class}

    async def on_start(self) -> None:
        """Actor hook: start the loop as soon as the actor is up, holding the store's newest weights."""
        self._ensure_loop()
        if self.weight_store:
            await self.catch_up()

    async def catch_up(self, timeout_s: float = 5.0) -> int:
        """Pull and install the weight store's newest version when it is newer than this engine's (a worker
        restarted in place does this itself); returns the version held. A store that does not answer within
        ``timeout_s`` (not up yet at the run's start) is skipped: the coordinator's next update reaches us.
        The newest published version may be one ahead of what the other workers run until the next swap:
        this worker's tokens are then one version fresher, never staler."""
        from rollart.weightplane.client import latest_version
        try:
            latest = await latest_version(self.weight_store, timeout_s)
        except TimeoutError:
            log.info("%s: the weight store at %s did not answer; starting from the configured weights",
                     self.name, self.weight_store)
            return self.engine.version
        if latest > self.engine.version:
            version = await self.update_weights(UpdateWeights(latest, source=self.weight_store))
            log.warning("%s: pulled weight version %d from the store itself", self.name, version)
        return self.engine.version

    @handles(GenerateRequest)
    async def generate(self, request: GenerateRequest) -> GenerationResult:
        """Generate for one request; returns the moment it finishes (finish_reason 'abort' if aborted).

        What the engine refuses raises ``InvalidRequestError`` here; cancelling this coroutine aborts the request.
        """
        request_id = request.request_id
        if request_id in self._inflight:
            raise InvalidRequestError(f"request id {request_id!r} is already in flight on {self.name}")
        future = asyncio.get_running_loop().create_future()
        self._inflight[request_id] = _InFlight(future, len(request.prompt_token_ids), request.sampling.max_tokens,
                                               request.trajectory_id)
        self._counters["requests"] += 1
        self._send(_Command("ADD", request_id, request))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The caller went away: abort in the engine (idempotent if it already finished).
            if self._inflight.get(request_id, None) is not None and self._inflight[request_id].future is future:
                self._inflight.pop(request_id)
                self._counters["aborted"] += 1
            self._send(_Command("ABORT", request_id))
            raise

    @handles(AbortRequest)
    async def abort(self, request: AbortRequest) -> bool:
        """Abort a request; its ``generate`` returns finish_reason 'abort'. False if it was not in flight."""
        return self._abort(request.request_id)

    def _abort(self, request_id: str) -> bool:
        entry = self._inflight.pop(request_id, None)
        self._send(_Command("ABORT", request_id))
        if entry is None:
            return False
        self._counters["aborted"] += 1
        if not entry.future.done():
            entry.future.set_result(self._aborted_result(entry))
        return True

    @handles(PullWeights)
    async def pull_weights(self, pull: PullWeights) -> str:
        """Start pulling ``pull.version`` in the background (rollout goes on); returns this worker's own
        weight-plane address, which its relay children pull from."""
        relay = await self._weight_relay()
        relay.pull(pull.version, [pull.source, pull.fallback], ipc_source=pull.ipc_source,
                   link_bytes_per_s=pull.link_bytes_per_s, timeout_s=pull.timeout_s, retries=pull.retries)
        return relay.address

    async def wait_weights(self, version: int) -> dict:
        """Wait until the started pull of ``version`` is complete here; its stats (seconds, bytes, retries)."""
        stats = await (await self._weight_relay()).wait(version)
        return self._pull_stats(stats)

    async def forget_weights(self, first: int) -> list[int]:
        """Drop the weight versions >= ``first`` this worker holds or pulls (the trainer went back to an older
        checkpoint: those numbers come again with other weights). The engine's installed weights stay."""
        return (await self._weight_relay()).forget(first)

    async def weight_address(self) -> dict:
        """Where this worker serves weights, its node and whether its weights live on a GPU (for CUDA IPC)."""
        from rollart.weightplane.cuda import node_id
        relay = await self._weight_relay()
        return {"address": relay.address, "node": node_id(), "cuda": relay.device.type == "cuda"}

    async def weights_digest(self) -> dict[str, int]:
        """Name -> CRC-32 of every weight the engine holds now (to check a sync without moving weights)."""
        from rollart.weightplane.buckets import digest
        model = getattr(self.engine, "model", None)
        if not hasattr(model, "named_parameters"):
            raise NotImplementedError(f"engine {type(self.engine).__name__} exposes no model to digest")
        return await asyncio.get_running_loop().run_in_executor(self._thread, digest, list(model.named_parameters()))

    @handles(UpdateWeights)
    async def update_weights(self, update: UpdateWeights) -> int:
        """Load new weights between two steps; requests in flight continue (their KV is recomputed).
        Returns the version now loaded. A version that cannot be pulled intact raises and nothing of it is
        installed."""
        weights = update.weights
        if weights is None:
            if update.version == self.engine.version:
                return update.version
            relay = await self._weight_relay()
            weights, stats = await relay.take(update.version, [update.source] if update.source else [])
            self._pull_stats(stats)
        return await self._command_and_wait("UPDATE", weights)

    async def install_weights(self, weights: WeightBucket, namespace: str, reuse_cached: bool = False) -> int:
        """Install a whole version as the weights of ``namespace`` (one job of a shared worker), between two
        steps: the engine keeps the other namespaces' cached prefixes and, with ``reuse_cached``, this one's
        (``LLMEngine.update_weights``); an engine without namespaces drops its prefix cache as on any update."""
        return await self._command_and_wait("UPDATE", (weights, namespace, reuse_cached))

    async def _weight_relay(self) -> Any:
        if self._relay is None:
            from rollart.weightplane import WeightRelay
            self._relay = WeightRelay(device=self._weights_device())
        await self._relay.start()
        return self._relay

    def _weights_device(self) -> Any:
        """Where the engine's weights live (its ``device``, else its model's parameters; the CPU otherwise)."""
        device = getattr(self.engine, "device", None)
        if device is None:
            model = getattr(self.engine, "model", None)
            param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
            device = param.device if param is not None else "cpu"
        return device

    def _pull_stats(self, stats: Any) -> dict:
        self._last_pull = {"version": stats.version, "seconds": stats.seconds, "bytes": stats.bytes,
                           "num_buckets": stats.num_buckets, "retries": stats.retries,
                           "sources": list(stats.by_source)}
        return self._last_pull

    async def suspend(self) -> None:
        """Pause stepping (requests and their KV stay; new ADDs queue up). Returns once paused."""
        await self._command_and_wait("SUSPEND")

    async def resume(self) -> None:
        await self._command_and_wait("RESUME")

    async def get_version(self) -> int:
        return self.engine.version

    async def get_stats(self) -> dict:
        return self.stats()

    async def engine_stats(self) -> dict:
        """The engine's own counters (``EngineStats``, its ``extra`` gauges merged in)."""
        stats = self.engine.stats()
        return {**{k: v for k, v in vars(stats).items() if k != "extra"}, **stats.extra}

    async def ping(self) -> str:
        return self.name

    async def shutdown(self) -> None:
        """Stop the loop, fail nothing silently: requests still in flight return finish_reason 'abort'."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
            self._loop_task = None
        for rid in list(self._inflight):
            self._abort(rid)
        self._thread.shutdown(wait=True)
        if self._relay is not None:
            await self._relay.close()
            self._relay = None

    async def on_stop(self) -> None:
        await self.shutdown()

    def add_finish_callback(self, fn: Callable[[str, GenerationResult], None]) -> None:
        """Register ``fn(request_id, result)``, called by the loop for every finished request."""
        self._on_finish.append(fn)

    def stats(self) -> dict:
        c = self._counters
        return dict(c, name=self.name, hw_class=self.hw_class, version=self.engine.version,
                    running=len(self._inflight), outstanding_tokens=self.outstanding_tokens(),
                    suspended=self._suspended, last_weight_pull=dict(self._last_pull),
                    prefix_hit_rate=c["cached_tokens"] / c["prompt_tokens"] if c["prompt_tokens"] else 0.0)

    def outstanding_tokens(self) -> int:
        """Upper bound of the work queued here: prompt + max new tokens of every request in flight."""
        return sum(e.num_prompt_tokens + e.max_tokens for e in self._inflight.values())

    # ---------------------------------------------------------------- the loop

    def _send(self, cmd: _Command) -> None:
        self._inbox.append(cmd)
        self._ensure_loop()
        self._wakeup.set()

    async def _command_and_wait(self, kind: str, payload: Any = None) -> Any:
        done = asyncio.get_running_loop().create_future()
        self._send(_Command(kind, payload=payload, done=done))
        return await done

    def _ensure_loop(self) -> None:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run(), name=f"{self.name}-loop")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # 1) drain commands
            while self._inbox:
                await self._apply(self._inbox.popleft(), loop)
            if self._suspended or not self.engine.has_unfinished_requests():
                self._wakeup.clear()
                if not self._inbox:
                    await self._wakeup.wait()  # no work: sleep until a command arrives
                continue
            # 2) step the engine
            stats = self.engine.stats()
            prefilled, decoded = stats.computed_prompt_tokens, stats.generated_tokens  # stats() may be live
            t0 = time.perf_counter()
            try:
                outputs = await loop.run_in_executor(self._thread, self.engine.step)
            except Exception as e:  # noqa: BLE001 - one bad step must not kill the worker
                log.exception("%s: engine step failed", self.name)
                self._fail_all(EngineFailure(f"{self.name}: engine step failed: {e!r}"))
                continue
            real = time.perf_counter() - t0
            self._counters["steps"] += 1
            self._counters["engine_seconds"] += real
            # 3) simulated hardware delay
            if self.speed is not None:
                stats = self.engine.stats()
                work = self._step_work(stats.computed_prompt_tokens - prefilled, stats.generated_tokens - decoded)
                simulated = self.speed.step_seconds(work)
                self._counters["simulated_seconds"] += simulated  # paper-scale hardware time
                self._counters["simulated_scaled_seconds"] += simulated * self.speed.cfg.time_scale  # what steps last
                delay = self.speed.delay_seconds(work, real)
                if delay > 0:
                    await asyncio.sleep(delay)
            # 4) publish outputs
            for out in outputs:
                self._finish(out)

    async def _apply(self, cmd: _Command, loop: asyncio.AbstractEventLoop) -> None:
        try:
            if cmd.kind == "ADD":
                entry = self._inflight.get(cmd.request_id)
                if entry is None or entry.future.done():
                    return  # aborted or cancelled before it reached the engine
                request: GenerateRequest = cmd.payload
                try:
                    if request.kv is not None or request.export_kv:  # PD disaggregation: K/V handed over
                        if not getattr(self.engine, "supports_kv_transfer", False):
                            raise InvalidRequestError(f"{self.name}: engine {type(self.engine).__name__} cannot hand "
                                                      "over K/V; PD disaggregation needs engine.backend=torch")
                        self.engine.add_request(request.request_id, request.prompt_token_ids, request.sampling,
                                                kv=request.kv, export_kv=request.export_kv)
                    else:
                        self.engine.add_request(request.request_id, request.prompt_token_ids, request.sampling)
                except InvalidRequestError as e:
                    self._inflight.pop(cmd.request_id, None)
                    self._counters["failed"] += 1
                    entry.future.set_exception(e)
            elif cmd.kind == "ABORT":
                self.engine.abort_request(cmd.request_id)
            elif cmd.kind == "UPDATE":
                weights, *namespace = cmd.payload if isinstance(cmd.payload, tuple) else (cmd.payload,)
                await loop.run_in_executor(self._thread, _install, self.engine, weights, *namespace)
                _resolve(cmd.done, weights.version)
            elif cmd.kind in ("SUSPEND", "RESUME"):
                self._suspended = cmd.kind == "SUSPEND"
                _resolve(cmd.done, None)
            else:
                raise ValueError(f"unknown command {cmd.kind!r}")
        except Exception as e:  # noqa: BLE001 - report to whoever sent the command, keep serving
            log.exception("%s: command %s failed", self.name, cmd.kind)
            if cmd.done is not None and not cmd.done.done():
                cmd.done.set_exception(e)

    def _finish(self, result: GenerationResult) -> None:
        entry = self._inflight.pop(result.request_id, None)
        if entry is None or entry.future.done():
            return  # aborted or cancelled meanwhile
        if result.error:
            self._counters["failed"] += 1
            entry.future.set_exception(InvalidRequestError(f"request {result.request_id!r}: {result.error}"))
            return
        result.worker = self.name
        result.text = result.text or self._decode(result.token_ids)
        c = self._counters
        c["finished"] += 1
        c["prompt_tokens"] += result.num_prompt_tokens
        c["cached_tokens"] += result.num_cached_tokens
        c["generated_tokens"] += len(result.token_ids)
        entry.future.set_result(result)
        for fn in self._on_finish:
            try:
                fn(result.request_id, result)
            except Exception:  # noqa: BLE001
                log.exception("%s: finish callback failed", self.name)

    def _fail_all(self, error: Exception) -> None:
        for rid, entry in list(self._inflight.items()):
            self._inflight.pop(rid)
            try:
                self.engine.abort_request(rid)
            except Exception:  # noqa: BLE001
                pass
            if not entry.future.done():
                self._counters["failed"] += 1
                entry.future.set_exception(error)

    def _step_work(self, prefill: int, decode: int) -> StepWork:
        """This step's work (prompt tokens computed, tokens generated); contexts estimated from what is in flight."""
        contexts = []
        for e in self._inflight.values():
            e.steps += 1
            contexts.append(e.num_prompt_tokens + min(e.steps, e.max_tokens))
        mean_ctx = sum(contexts) / len(contexts) if contexts else 0.0
        return StepWork(prefill_tokens=prefill, prefill_context=mean_ctx / 2 if prefill else 0.0,
                        decode_seqs=decode, decode_context_tokens=int(mean_ctx * decode))

    def _aborted_result(self, entry: _InFlight) -> GenerationResult:
        return GenerationResult(token_ids=[], logprobs=[], versions=[], finish_reason="abort",
                                num_prompt_tokens=entry.num_prompt_tokens, worker=self.name)

    def _decode(self, token_ids: list[int]) -> str:
        tok = self.engine.tokenizer
        if tok is None:
            return ""
        try:
            return tok.decode(list(token_ids), skip_special_tokens=True)
        except Exception:  # noqa: BLE001 - text is a convenience; token ids are the truth
            return ""


def _install(engine: Engine, weights: WeightBucket, namespace: str | None = None, reuse_cached: bool = False) -> None:
    """Load a complete version; on a GPU wait for the copies so the staged buffers may be freed at once."""
    if namespace is not None and getattr(engine, "supports_prefix_namespaces", False):
        engine.update_weights(weights, namespace, reuse_cached)
    else:
        engine.update_weights(weights)
    first = next(iter(weights.tensors.values()), None)
    if first is not None and getattr(first, "is_cuda", False):
        import torch
        torch.cuda.synchronize(first.device)


def _resolve(fut: asyncio.Future | None, value: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)
