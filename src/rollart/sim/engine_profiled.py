"""SIMULATED: an Engine whose requests last what turns of the paper's agentic tasks take on an emulated engine
(``simulate_hardware=true`` with ``emulation.task_profiles``; every figure from it is labelled simulated).

    engine = ProfiledSpeedEngine(LLMEngine(cfg), SpeedModelConfig(hw_class="H20", time_scale=0.03,
                                 task_profiles={"MathTool": "math"}))

The real engine serves every request as it is: its tokens, log-probs and versions are the result. Beside it runs
an ``EngineTimeline`` of the emulated class (``rollart.sim.engine_timeline``), in wall-clock seconds x
``time_scale``, on which the request is a turn of its task's profile (``GenerateRequest.task`` ->
``rollart.emulation.PAPER_TASKS``): a trajectory's first turn prefills the profile's prompt, a later one its
observation on top of the context the emulated engine still caches, and each generates a length drawn from the
profile's range (seeded by trajectory and turn, so every mode draws the same). A task whose trajectories take
another number of turns than its paper task (``task_turns``) has each request stand for that share of the paper
trajectory's turns: observation and answer lengths are scaled by the paper's mean turns / its turns, so a whole
trajectory carries a paper trajectory's work (FrozenLake's 8 stand-in turns as 30 paper turns, GEM-game's one
turn spread over 5). A result is returned once both
are done: the real engine's output (held until then) and the emulated turn. Where the real output comes later,
the request is *late* and its time this CPU's; ``seconds()`` counts late requests and their seconds.

The emulated turns are what set the rollout's pace, so a CPU-scaled task (a few real tokens a turn) stands for
the paper's task (thousands of tokens of reasoning, or long observations) in every engine it is sent to: a
decode-heavy task is decode-heavy on every class, a mixed batch decodes each request at its own length.

A request of a task without a profile is emulated with its real tokens x ``token_scale`` (its decode length
known when the real output is). New weights make the emulated engine recompute its running requests' K/V and
drop its prefix cache, as the real engine does. The loop steps this engine only when there is something to do:
``pause_s()`` says how long it may wait (``EngineCapabilities.paced``).
"""
from __future__ import annotations

import dataclasses
import random
import time
from collections import OrderedDict
from typing import Any

from rollart.emulation import PAPER_TASKS
from rollart.engine.protocol import Engine, EngineCapabilities
from rollart.hardware import SpeedModel, SpeedModelConfig
from rollart.sim.engine_timeline import EmulatedRequest, EngineTimeline
from rollart.sim.engine_wrapper import EngineWrapper
from rollart.types import GenerateRequest, GenerationResult, WeightBucket

TICK_S = 0.002
"""Wall seconds a decode-only stretch of the emulated engine is committed ahead of the present; a request that
arrives meanwhile shortens it to the step under way (``EngineTimeline.truncate``)."""
TRAJECTORIES_KEPT = 8192
"""Emulated trajectories whose context length is remembered (oldest forgotten first)."""


@dataclasses.dataclass
class _Trajectory:
    history: int = 0
    """Tokens of context after its last turn on the emulated engine."""
    turns: int = 0


class ProfiledSpeedEngine(EngineWrapper):
    """Args:
        engine: the real engine, stepped as it is.
        speed: the class, model, time scale and ``task_profiles`` it emulates (a dict crosses processes).
    """

    def __init__(self, engine: Engine, speed: SpeedModelConfig | dict) -> None:
        cfg = SpeedModelConfig(**speed) if isinstance(speed, dict) else speed
        super().__init__(engine)
        self.speed = SpeedModel(dataclasses.replace(cfg, token_scale=1.0))  # the profiles' tokens are emulated ones
        self.token_scale = cfg.token_scale
        self.timeline = EngineTimeline(self.speed)
        self.profiles = {task: PAPER_TASKS[name] for task, name in cfg.task_profiles.items()}
        self.turn_weights = {task: self.profiles[task].mean_turns / turns for task, turns in cfg.task_turns.items()}
        """Paper turns a request of the task stands for (1 where not given)."""
        self.scale = cfg.time_scale
        self._requests: dict[str, EmulatedRequest] = {}
        """Requests in flight on the emulated engine, by id."""
        self._held: dict[str, GenerationResult] = {}
        """Real outputs waiting for their emulated turn."""
        self._late: dict[str, float] = {}
        """Emulated turns done whose real output is not: id -> wall time the turn ended."""
        self._ready: list[GenerationResult] = []
        self._trajectories: OrderedDict[str, _Trajectory] = OrderedDict()
        self._clock = time.perf_counter()
        """Wall time the emulated engine has run to (the start of the step under way, if one is)."""
        self._step_end: float | None = None
        self._pause = 0.0
        self.counters = dict(engine_seconds=0.0, late_requests=0, late_seconds=0.0,
                             emulated_requests=0, emulated_prefill_tokens=0, emulated_decode_tokens=0)

    # ---- the Engine protocol: what the emulated engine times -----------------------------------
    @property
    def capabilities(self) -> EngineCapabilities:
        return dataclasses.replace(self.inner.capabilities, paced=True)

    def reset_prefix_cache(self) -> Any:
        self.timeline.clear_cache()
        return self.inner.reset_prefix_cache()

    def update_weights(self, weights: WeightBucket, namespace: str | None = None, reuse_cached: bool = False) -> None:
        self.inner.update_weights(weights, namespace, reuse_cached)
        self._interrupt(time.perf_counter())
        self.timeline.recompute()

    # ---- requests ------------------------------------------------------------------------------
    def add_request(self, request: GenerateRequest) -> None:
        self.inner.add_request(request)
        now = time.perf_counter()
        self._interrupt(now)
        emulated = self._emulated(request, now)
        self._requests[request.request_id] = emulated
        self.timeline.submit(emulated)

    def abort_request(self, request_id: str) -> bool:
        emulated = self._requests.pop(request_id, None)
        if emulated is not None:
            self.timeline.drop(emulated)
        self._held.pop(request_id, None)
        self._late.pop(request_id, None)
        return self.inner.abort_request(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests or self._late or self._ready) or self.inner.has_unfinished_requests()

    def step(self) -> list[GenerationResult]:
        if self.inner.has_unfinished_requests():
            t0 = time.perf_counter()
            outputs = self.inner.step()
            self.counters["engine_seconds"] += time.perf_counter() - t0
            for out in outputs:
                self._real_done(out)
        now = time.perf_counter()
        self._advance(now)
        ready, self._ready = self._ready, []
        waiting_for_real = self.inner.has_unfinished_requests()
        self._pause = 0.0 if ready or waiting_for_real or self._step_end is None else max(0.0, self._step_end - now)
        return ready

    def pause_s(self) -> float:
        """How long the loop may wait before the next step (until the emulated step under way ends)."""
        return self._pause

    def seconds(self) -> dict[str, float]:
        """Real engine seconds, emulated busy seconds (and x time_scale), late requests and their seconds, and the
        emulated tokens."""
        c = self.counters
        return dict(c, simulated_seconds=self.timeline.busy_time,
                    simulated_scaled_seconds=self.timeline.busy_time * self.scale)

    # ---- the emulated engine -------------------------------------------------------------------
    def _emulated(self, request: GenerateRequest, now: float) -> EmulatedRequest:
        """The request as a turn on the emulated engine: its task's profile, else its real tokens x token_scale."""
        rid, key = request.request_id, request.trajectory_id or request.request_id
        traj = self._trajectories.pop(key, None) or _Trajectory()
        self._trajectories[key] = traj
        if len(self._trajectories) > TRAJECTORIES_KEPT:
            self._trajectories.popitem(last=False)
        profile = self.profiles.get(request.task)
        if profile is not None:
            w = self.turn_weights.get(request.task, 1.0)
            traj.history += (profile.prompt_tokens + round(max(0.0, w - 1) * profile.obs_tokens) if traj.turns == 0
                             else round(w * profile.obs_tokens))
            rng = random.Random(f"{key}:{traj.turns}")
            decode: int | None = max(1, min(round(w * rng.randint(*profile.response_tokens)),
                                            profile.max_context - traj.history))
        else:
            traj.history = max(traj.history, round(len(request.prompt_token_ids) * self.token_scale))
            decode = None
        traj.turns += 1
        cached = min(self.timeline.take_cached(key), traj.history)
        self.counters["emulated_requests"] += 1
        self.counters["emulated_prefill_tokens"] += traj.history - cached
        return EmulatedRequest(rid, prefill_left=traj.history - cached, decode_total=decode, context=cached,
                               submitted=now, owner=key)

    def _real_done(self, out: GenerationResult) -> None:
        rid = out.request_id
        emulated = self._requests.get(rid)
        if emulated is not None and emulated.decode_total is None:  # its length is known from now on
            self._interrupt(time.perf_counter())
            self.timeline.set_decode_total(emulated, round(len(out.token_ids) * self.token_scale))
        if rid in self._late:
            self.counters["late_requests"] += 1
            self.counters["late_seconds"] += time.perf_counter() - self._late.pop(rid)
            self._ready.append(out)
        elif emulated is not None:
            self._held[rid] = out
        else:  # aborted meanwhile, or its emulated turn forgotten: nothing holds it
            self._ready.append(out)

    def _interrupt(self, now: float) -> None:
        """Run the emulated engine up to ``now`` and end the step under way at its next step boundary: what changes
        now (a request arriving, new weights) takes effect from there."""
        self._advance(now)
        if self._step_end is not None and (kept := self.timeline.truncate((now - self._clock) / self.scale)):
            self._step_end = self._clock + kept * self.scale

    def _advance(self, now: float) -> None:
        """Run the emulated engine up to ``now``: commit its steps in order, each starting where the last ended."""
        while True:
            if self._step_end is None:
                dt = self.timeline.start_step((now + TICK_S - self._clock) / self.scale)
                if dt is None:
                    self._clock = now  # nothing to run: the idle engine's time passes
                    return
                self._step_end = self._clock + dt * self.scale
            if self._step_end > now:
                return
            self._clock, self._step_end = self._step_end, None
            for r in self.timeline.finish_step():
                self._turn_done(r, self._clock)

    def _turn_done(self, r: EmulatedRequest, at: float) -> None:
        self._requests.pop(r.key, None)
        traj = self._trajectories.get(r.owner)
        if traj is not None:
            traj.history = r.context
        self.timeline.cache(r.owner, r.context)
        self.counters["emulated_decode_tokens"] += r.decoded
        out = self._held.pop(r.key, None)
        if out is not None:
            self._ready.append(out)
        else:
            self._late[r.key] = at
