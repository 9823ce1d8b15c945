"""EngineLoop: one engine behind a command inbox (RollArt §6.1, Figure 8).

Callers never touch the engine: ``generate`` / ``abort`` / ``install`` / ``suspend`` / ``resume`` only append a
command to the inbox and wake the loop; the loop alone owns the engine (any ``rollart.engine.protocol.Engine``)
and runs, forever::

    1) drain commands   (ADD, ABORT, UPDATE, SUSPEND, RESUME) - applied between engine steps
    2) step the engine  (one prefill/decode step for the whole running batch, in the engine thread)
    3) publish outputs  (the completion callback resolves each finished request's future at once)

and sleeps on an event only when there is nothing to step and no command waiting. Because a command
waits at most one engine step, adding or aborting a request never stalls the batch already running.
The step runs in a dedicated thread so the actor's event loop keeps answering calls (and heartbeats)
while the engine computes; the engine itself is only ever touched from that one thread.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from rollart.engine.protocol import Engine
from rollart.types import GenerateRequest, GenerationResult, InvalidRequestError, WeightBucket

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


class EngineLoop:
    """Args:
        engine: the engine it owns from now on.
        name: the worker's name, reported in every result's ``worker`` field.
    """

    def __init__(self, engine: Engine, name: str) -> None:
        self.engine = engine
        self.name = name
        self.suspended = False
        self.kv_released = False
        """The engine's KV cache is freed (``release_kv``): requests added meanwhile wait for ``reclaim_kv``."""
        self._inbox: deque[_Command] = deque()
        self._inflight: dict[str, _InFlight] = {}
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"engine-{name}")
        self.on_finish: list[Callable[[str, GenerationResult], None]] = []
        """``fn(request_id, result)`` for every finished request."""
        self.counters = dict(requests=0, finished=0, aborted=0, failed=0, steps=0, prompt_tokens=0,
                             cached_tokens=0, generated_tokens=0, engine_seconds=0.0)

    # ---------------------------------------------------------------- commands
    async def generate(self, request: GenerateRequest) -> GenerationResult:
        """Run one request; returns the moment it finishes (finish_reason 'abort' if aborted). What the engine
        refuses raises ``InvalidRequestError``; cancelling this coroutine aborts the request."""
        request_id = request.request_id
        if request_id in self._inflight:
            raise InvalidRequestError(f"request id {request_id!r} is already in flight on {self.name}")
        future = asyncio.get_running_loop().create_future()
        self._inflight[request_id] = _InFlight(future, len(request.prompt_token_ids), request.sampling.max_tokens)
        self.counters["requests"] += 1
        self._send(_Command("ADD", request_id, request))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The caller went away: abort in the engine (idempotent if it already finished).
            if self._inflight.get(request_id, None) is not None and self._inflight[request_id].future is future:
                self._inflight.pop(request_id)
                self.counters["aborted"] += 1
            self._send(_Command("ABORT", request_id))
            raise

    def abort(self, request_id: str) -> bool:
        """Abort a request; its ``generate`` returns finish_reason 'abort'. False if it was not in flight."""
        entry = self._inflight.pop(request_id, None)
        self._send(_Command("ABORT", request_id))
        if entry is None:
            return False
        self.counters["aborted"] += 1
        if not entry.future.done():
            entry.future.set_result(GenerationResult(token_ids=[], logprobs=[], versions=[], finish_reason="abort",
                                                     num_prompt_tokens=entry.num_prompt_tokens, worker=self.name))
        return True

    async def install(self, weights: WeightBucket, namespace: str | None = None, reuse_cached: bool = False) -> int:
        """Load a complete version between two steps (``Engine.update_weights``); the version now loaded."""
        return await self._command_and_wait("UPDATE", (weights, namespace, reuse_cached))

    async def suspend(self) -> None:
        """Pause stepping (requests and their KV stay; new ADDs queue up). Returns once paused."""
        await self._command_and_wait("SUSPEND")

    async def resume(self) -> None:
        await self._command_and_wait("RESUME")

    async def release_kv(self) -> int:
        """Abort every request in flight (each returns finish_reason 'abort'), then free the engine's KV cache;
        the bytes freed. Requests that arrive before ``reclaim_kv`` wait for it."""
        if not self.engine.capabilities.release_kv:
            raise NotImplementedError(f"{self.name}: engine {type(self.engine).__name__} cannot release its KV cache")
        return await self._command_and_wait("RELEASE")

    async def reclaim_kv(self) -> int:
        """Allocate the KV cache again (empty) and serve the requests that waited; the bytes it holds."""
        return await self._command_and_wait("RECLAIM")

    async def in_engine_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the engine thread (after the step running there, if any: never beside one)."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    @property
    def running(self) -> int:
        return len(self._inflight)

    def outstanding_tokens(self) -> int:
        """Upper bound of the work queued here: prompt + max new tokens of every request in flight."""
        return sum(e.num_prompt_tokens + e.max_tokens for e in self._inflight.values())

    def start(self) -> None:
        """Start the loop (idempotent; any command starts it too)."""
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self.name}-loop")

    async def close(self) -> None:
        """Stop the loop; requests still in flight return finish_reason 'abort'."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for rid in list(self._inflight):
            self.abort(rid)
        self._thread.shutdown(wait=True)

    # ---------------------------------------------------------------- the loop
    def _send(self, cmd: _Command) -> None:
        self._inbox.append(cmd)
        self.start()
        self._wakeup.set()

    async def _command_and_wait(self, kind: str, payload: Any = None) -> Any:
        done = asyncio.get_running_loop().create_future()
        self._send(_Command(kind, payload=payload, done=done))
        return await done

    async def _run(self) -> None:
        while True:
            # 1) drain commands
            while self._inbox:
                await self._apply(self._inbox.popleft())
            if self.suspended or self.kv_released or not self.engine.has_unfinished_requests():
                self._wakeup.clear()
                if not self._inbox:
                    await self._wakeup.wait()  # no work: sleep until a command arrives
                continue
            # 2) step the engine
            t0 = time.perf_counter()
            try:
                outputs = await self.in_engine_thread(self.engine.step)
            except Exception as e:  # noqa: BLE001 - one bad step must not kill the worker
                log.exception("%s: engine step failed", self.name)
                self._fail_all(EngineFailure(f"{self.name}: engine step failed: {e!r}"))
                continue
            self.counters["steps"] += 1
            self.counters["engine_seconds"] += time.perf_counter() - t0
            # 3) publish outputs
            for out in outputs:
                self._finish(out)
            if self.engine.capabilities.paced:
                await self._pause(self.engine.pause_s())

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` before the next step, or until a command arrives."""
        if seconds <= 0 or self._inbox:
            return
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _apply(self, cmd: _Command) -> None:
        try:
            if cmd.kind == "ADD":
                self._add(cmd.request_id, cmd.payload)
            elif cmd.kind == "ABORT":
                self.engine.abort_request(cmd.request_id)
            elif cmd.kind == "UPDATE":
                weights = cmd.payload[0]
                await self.in_engine_thread(_install, self.engine, *cmd.payload)
                _resolve(cmd.done, weights.version)
            elif cmd.kind == "RELEASE":
                for rid in list(self._inflight):
                    self.abort(rid)  # its caller gets 'abort' now; the engine aborts it with its cache
                freed = await self.in_engine_thread(self.engine.release_kv)
                self.kv_released = True
                _resolve(cmd.done, freed)
            elif cmd.kind == "RECLAIM":
                held = await self.in_engine_thread(self.engine.reclaim_kv) if self.kv_released else 0
                self.kv_released = False
                _resolve(cmd.done, held)
            elif cmd.kind in ("SUSPEND", "RESUME"):
                self.suspended = cmd.kind == "SUSPEND"
                _resolve(cmd.done, None)
            else:
                raise ValueError(f"unknown command {cmd.kind!r}")
        except Exception as e:  # noqa: BLE001 - report to whoever sent the command, keep serving
            log.exception("%s: command %s failed", self.name, cmd.kind)
            if cmd.done is not None and not cmd.done.done():
                cmd.done.set_exception(e)

    def _add(self, request_id: str, request: GenerateRequest) -> None:
        entry = self._inflight.get(request_id)
        if entry is None or entry.future.done():
            return  # aborted or cancelled before it reached the engine
        try:
            if (request.kv is not None or request.export_kv) and not self.engine.capabilities.kv_transfer:
                raise InvalidRequestError(f"{self.name}: engine {type(self.engine).__name__} cannot hand over K/V; "
                                          "PD disaggregation needs engine.backend=torch")
            self.engine.add_request(request)
        except InvalidRequestError as e:
            self._inflight.pop(request_id, None)
            self.counters["failed"] += 1
            entry.future.set_exception(e)

    def _finish(self, result: GenerationResult) -> None:
        entry = self._inflight.pop(result.request_id, None)
        if entry is None or entry.future.done():
            return  # aborted or cancelled meanwhile
        if result.error:
            self.counters["failed"] += 1
            entry.future.set_exception(InvalidRequestError(f"request {result.request_id!r}: {result.error}"))
            return
        result.worker = self.name
        result.text = result.text or self._decode(result.token_ids)
        c = self.counters
        c["finished"] += 1
        c["prompt_tokens"] += result.num_prompt_tokens
        c["cached_tokens"] += result.num_cached_tokens
        c["generated_tokens"] += len(result.token_ids)
        entry.future.set_result(result)
        for fn in self.on_finish:
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
                self.counters["failed"] += 1
                entry.future.set_exception(error)

    def _decode(self, token_ids: list[int]) -> str:
        tok = self.engine.tokenizer
        if tok is None:
            return ""
        try:
            return tok.decode(list(token_ids), skip_special_tokens=True)
        except Exception:  # noqa: BLE001 - text is a convenience; token ids are the truth
            return ""


def _install(engine: Engine, weights: WeightBucket, namespace: str | None, reuse_cached: bool) -> None:
    """Load a complete version; on a GPU wait for the copies so the staged buffers may be freed at once."""
    engine.update_weights(weights, namespace, reuse_cached)
    first = next(iter(weights.tensors.values()), None)
    if first is not None and getattr(first, "is_cuda", False):
        import torch
        torch.cuda.synchronize(first.device)


def _resolve(fut: asyncio.Future | None, value: Any) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)
