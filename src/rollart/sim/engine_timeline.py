"""SIMULATED: the timeline of one emulated inference engine (``tp`` GPUs of one class serving one model replica),
timed by ``rollart.hardware.SpeedModel``.

Two users drive it: the paper-scale rollout simulator (``rollart.sim.hwsim``, in simulated time) and the live
engine wrapper of a run on emulated hardware (``rollart.sim.engine_profiled``, in wall-clock time). What it
models, as vLLM schedules:

- continuous batching: each step decodes one token for every decoding request and spends the rest of a
  ``max_batched_tokens`` budget on chunked prefill (first come, first served); the step lasts
  ``SpeedModel.step_seconds`` of that work (roofline);
- prefix caching with a KV budget (the emulated model's KV beside its weights on the class's memory): an idle
  trajectory's context stays cached under its key until its next turn takes it; when KV runs out, idle caches
  are evicted (LRU) and a turn that cannot fit waits;
- decode-only stretches advance in macro-steps (several identical steps at once, timed at the mid-point
  context), bounded by a horizon the caller gives (the next known arrival; the present, live) and shortened
  with ``truncate`` when a request arrives while one runs.

A request's decode length may be unknown when it starts (``decode_total=None``: the live wrapper learns it
from the real engine's output); it decodes until ``set_decode_total`` says how long it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

from rollart.hardware import SpeedModel, StepWork


@dataclass
class EmulatedRequest:
    """One generation on the emulated engine (one turn of a trajectory)."""
    key: Hashable
    prefill_left: int
    """Prompt tokens still to compute (what the prefix cache did not hold)."""
    decode_total: int | None
    """Tokens it generates; None until known."""
    context: int = 0
    """Tokens in KV now (grows as prefill chunks and decoded tokens are computed)."""
    decoded: int = 0
    submitted: float = 0.0
    owner: Any = None
    """What the caller keeps with it (the simulator's trajectory)."""
    prefill: int = field(init=False)
    """Tokens it prefills in all (the part of its prompt not cached)."""

    def __post_init__(self) -> None:
        self.prefill = self.prefill_left

    @property
    def decode_left(self) -> int | None:
        return None if self.decode_total is None else self.decode_total - self.decoded

    @property
    def done(self) -> bool:
        return self.prefill_left == 0 and self.decode_total is not None and self.decoded >= self.decode_total

    def kv_need(self) -> int:
        return self.context + self.prefill_left + (self.decode_left or 0)


@dataclass
class _MacroStep:
    decoding: list[EmulatedRequest]
    steps: int
    dt: float


class EngineTimeline:
    """Args:
        speed: the roofline of the class and model it emulates.
        max_batched_tokens, max_num_seqs: the scheduler's budgets per step (vLLM's names).
    """

    def __init__(self, speed: SpeedModel, max_batched_tokens: int = 8192, max_num_seqs: int = 256) -> None:
        self.speed = speed
        self.kv_capacity = speed.kv_capacity_tokens
        self.max_batched_tokens = max_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.running: list[EmulatedRequest] = []
        self.waiting: list[EmulatedRequest] = []
        self.cached: dict[Hashable, int] = {}
        """Key -> cached tokens of an idle trajectory (insertion order = LRU order)."""
        self.busy_time = 0.0
        """Emulated seconds spent in steps."""
        self._macro: _MacroStep | None = None

    def used_kv(self) -> int:
        return sum(r.kv_need() for r in self.running) + sum(self.cached.values())

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    # ------------------------------------------------------------------ requests and the cache
    def take_cached(self, key: Hashable) -> int:
        """The tokens cached under ``key`` (its next turn reuses them), removed from the idle caches; 0 if evicted."""
        return self.cached.pop(key, 0)

    def cache(self, key: Hashable, tokens: int) -> None:
        """An idle trajectory's ``tokens`` of context stay cached until its next turn (or eviction)."""
        self.cached.pop(key, None)
        self.cached[key] = tokens

    def clear_cache(self) -> None:
        """New weights: nothing cached is valid any more."""
        self.cached.clear()

    def submit(self, request: EmulatedRequest) -> None:
        self.waiting.append(request)

    def drop(self, request: EmulatedRequest) -> None:
        """An aborted request leaves (its KV with it)."""
        for queue in (self.running, self.waiting):
            if request in queue:
                queue.remove(request)
        if self._macro is not None and request in self._macro.decoding:
            self._macro.decoding.remove(request)

    def set_decode_total(self, request: EmulatedRequest, total: int) -> None:
        """Its decode length is known now (at least what it already decoded)."""
        request.decode_total = max(total, request.decoded)

    def recompute(self) -> None:
        """New weights between two steps: every running request recomputes its context's K/V (RollArt §6.2's KV
        recompute) and nothing cached stays valid."""
        self.clear_cache()
        for r in self.running:
            r.prefill_left += r.context
            r.context = 0

    # ------------------------------------------------------------------ steps
    def start_step(self, horizon_s: float | None = None) -> float | None:
        """Admit what fits, start the next step and apply its work; its duration (emulated seconds), or None when
        there is nothing to run. A decode-only stretch runs as one macro-step of identical steps, until the first
        request finishes and no longer than ``horizon_s`` (at least one step)."""
        self._admit()
        self._macro = None
        if not self.running:
            return None
        decoding = [r for r in self.running if r.prefill_left == 0]
        prefilling = [r for r in self.running if r.prefill_left > 0]
        budget = self.max_batched_tokens - len(decoding)
        chunks, ctx_weighted = [], 0.0
        for r in prefilling:
            if budget <= 0:
                break
            n = min(r.prefill_left, budget)
            chunks.append((r, n))
            ctx_weighted += n * (r.context + n / 2)
            budget -= n
        steps = 1
        if not chunks and decoding and not self.waiting:
            known = [r.decode_left for r in decoding if r.decode_left is not None]
            steps = min(known) if known else 1
            if horizon_s is not None:
                one = self.speed.step_seconds(StepWork(decode_seqs=len(decoding),
                                                       decode_context_tokens=sum(r.context for r in decoding)))
                limit = int(horizon_s / one) if one > 0 else steps
                steps = max(1, min(steps, limit) if known else limit)
        prefill_tokens = sum(n for _, n in chunks)
        work = StepWork(prefill_tokens=prefill_tokens,
                        prefill_context=ctx_weighted / prefill_tokens if prefill_tokens else 0.0,
                        decode_seqs=len(decoding),
                        decode_context_tokens=sum(r.context for r in decoding) + len(decoding) * (steps - 1) // 2)
        dt = self.speed.step_seconds(work) * steps
        self.busy_time += dt
        for r, n in chunks:
            r.prefill_left -= n
            r.context += n
            if r.prefill_left == 0:  # the last prefill chunk also yields the first token
                r.decoded += 1
                r.context += 1
        for r in decoding:
            r.decoded += steps
            r.context += steps
        if steps > 1:
            self._macro = _MacroStep(decoding, steps, dt)
        return dt

    def truncate(self, elapsed_s: float) -> float | None:
        """Shorten the macro-step started ``elapsed_s`` ago to the steps begun by then (a request arrived and
        joins at the next step boundary); its duration now, or None when the step under way is a single step
        (it runs whole)."""
        macro = self._macro
        if macro is None:
            return None
        one = macro.dt / macro.steps
        begun = min(macro.steps, max(1, int(elapsed_s / one) + 1))
        undo = macro.steps - begun
        for r in macro.decoding:
            r.decoded -= undo
            r.context -= undo
        self.busy_time -= undo * one
        self._macro = None
        return begun * one

    def finish_step(self) -> list[EmulatedRequest]:
        """The step ended: the requests it finished, out of the running batch."""
        self._macro = None
        finished = [r for r in self.running if r.done]
        self.running = [r for r in self.running if not r.done]
        return finished

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            need = req.kv_need()
            while self.used_kv() + need > self.kv_capacity and self.cached:
                del self.cached[next(iter(self.cached))]  # LRU idle trajectory: its next turn re-prefills it all
            if self.used_kv() + need > self.kv_capacity and self.running:
                return  # wait for running requests to free KV
            self.waiting.pop(0)
            self.running.append(req)
