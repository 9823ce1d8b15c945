"""SIMULATED: discrete-event multi-turn agentic rollout on GPU pools, timed by rollart.hardware.SpeedModel.

Used by ``tools/bench/affinity.py`` to reproduce RollArt's hardware-affinity findings (Fig. 4,
Fig. 11a) at paper scale, which a CPU cannot run. Every number it produces is **simulated**.

What is modelled, per engine (``tp`` GPUs of one class serving one model replica):

- continuous batching: each step decodes one token for every decoding request and spends the rest
  of a ``max_batched_tokens`` budget on chunked prefill (FCFS); the step lasts
  ``SpeedModel.step_seconds`` of that work (roofline: FLOPs / TFLOPS vs bytes / HBM bandwidth);
- prefix caching with a KV budget: between turns a trajectory's context stays cached, so a turn
  prefills only its new tokens (observation); when KV runs out, idle trajectories' caches are evicted
  (LRU) and their next turn re-prefills the whole history; a turn that cannot fit waits;
- trajectory-level rollout: a finished turn goes to its environment (``env_latency_s``) and the next
  turn returns to the same engine (sticky routing); new trajectories go to the least-loaded engine of
  the class their task is mapped to.

Decode-only stretches are advanced in macro-steps (several identical steps at once, timed at the
mid-point context) so a 512-trajectory, 72-engine batch simulates in about a second.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from rollart.hardware import SpeedModel, SpeedModelConfig, StepWork


@dataclass(frozen=True)
class TaskProfile:
    """Token profile of one agentic task (ranges are sampled uniformly per trajectory / turn)."""
    name: str
    prompt_tokens: int
    turns: tuple[int, int]
    obs_tokens: int
    """Tokens the environment adds per turn (observation / tool output)."""
    response_tokens: tuple[int, int]
    env_latency_s: float = 0.1
    max_context: int = 32768

    @property
    def decode_per_prefill(self) -> float:
        """Tokens generated per prompt token computed in a trajectory of this profile (the ranges' means; with
        prefix caching each later turn prefills only what the environment added): high is decode-heavy."""
        turns = sum(self.turns) / 2
        return turns * sum(self.response_tokens) / 2 / (self.prompt_tokens + (turns - 1) * self.obs_tokens)


@dataclass
class _Request:
    traj: "_Traj"
    prefill_left: int
    decode_left: int
    context: int
    """Tokens in KV now (grows as prefill chunks and decode tokens are computed)."""
    submitted: float = 0.0
    prefill: int = 0
    """Tokens this request prefills (the part of the history not cached)."""


@dataclass
class _Traj:
    tid: int
    task: TaskProfile
    turns_left: int
    history: int
    rng: random.Random
    engine: "_Engine | None" = None
    done_at: float = 0.0


@dataclass
class _Engine:
    name: str
    speed: SpeedModel
    kv_capacity: int
    max_batched_tokens: int
    max_num_seqs: int
    running: list = field(default_factory=list)
    waiting: list = field(default_factory=list)
    cached: dict = field(default_factory=dict)
    """trajectory id -> cached tokens of an idle trajectory (insertion order = LRU order)."""
    busy: bool = False
    arrivals: list = field(default_factory=list)
    """Heap of times at which trajectories' next turns come back to this engine."""
    assigned: int = 0
    busy_time: float = 0.0

    def used_kv(self) -> int:
        return sum(r.context + r.prefill_left + r.decode_left for r in self.running) + sum(self.cached.values())


class RolloutSim:
    """One rollout batch: trajectories of several tasks on pools of engines, routed by task -> class."""

    def __init__(self, pools: dict[str, int], model: str, tp: int, routing: dict[str, str],
                 max_batched_tokens: int = 8192, max_num_seqs: int = 256, seed: int = 0,
                 observer=None, paired: bool = False) -> None:
        """``pools``: hardware class -> number of GPUs; ``routing``: task name -> hardware class (empty: no
        affinity, every task on the least-loaded engine of any class). ``observer(task, hw_class,
        prefill_tokens, decode_tokens, seconds, trajectory_id)`` is called for every finished request (one turn), as the
        proxy feeds ``rollart.rollout.profiler.HardwareProfiler``. ``paired``: each trajectory draws its turns
        and response lengths from its own generator (seeded by ``seed`` and its index), so runs with the same
        seed and different routings roll out exactly the same trajectories."""
        self.engines: dict[str, list[_Engine]] = {}
        for hw, gpus in pools.items():
            n = gpus // tp
            if n < 1:
                raise ValueError(f"pool {hw} has {gpus} GPUs, fewer than tp={tp}")
            speed = SpeedModel(SpeedModelConfig(hw_class=hw, model=model, tp=tp))
            self.engines[hw] = [_Engine(f"{hw}-{i}", speed, speed.kv_capacity_tokens, max_batched_tokens,
                                        max_num_seqs) for i in range(n)]
        self.routing = routing
        self.observer = observer
        self.seed = seed
        self.rng = random.Random(seed)
        self.paired = paired
        self.now = 0.0
        self._events: list = []
        self._seq = 0

    # ------------------------------------------------------------------ driver

    def run(self, tasks: list[TaskProfile]) -> float:
        """Simulate one batch (one trajectory per entry of ``tasks``); returns the rollout time in s."""
        trajs = []
        for i, task in enumerate(tasks):
            rng = random.Random(self.seed * 1_000_003 + i) if self.paired else self.rng
            turns = rng.randint(*task.turns)
            traj = _Traj(i, task, turns, history=0, rng=rng)
            if self.routing:
                hw = self.routing.get(task.name, self.routing.get("default"))
                if hw not in self.engines:
                    raise ValueError(f"task {task.name!r} routed to {hw!r}, which has no engines")
                group = self.engines[hw]
            else:
                group = [e for es in self.engines.values() for e in es]
            traj.engine = min(group, key=lambda e: e.assigned)
            traj.engine.assigned += 1
            trajs.append(traj)
            self._submit(traj, new_tokens=task.prompt_tokens)
        while self._events:
            self.now, _, kind, obj = heapq.heappop(self._events)
            if kind == "step":
                self._finish_step(obj)
            else:  # next turn of a trajectory returns from its environment
                heapq.heappop(obj.engine.arrivals)
                self._submit(obj, new_tokens=obj.task.obs_tokens)
        return max(t.done_at for t in trajs)

    def utilization(self, makespan: float) -> dict[str, float]:
        return {hw: sum(e.busy_time for e in es) / (len(es) * makespan) for hw, es in self.engines.items()}

    # ------------------------------------------------------------------ mechanics

    def _push(self, t: float, kind: str, obj) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, obj))

    def _submit(self, traj: _Traj, new_tokens: int) -> None:
        eng = traj.engine
        traj.history += new_tokens
        response = traj.rng.randint(*traj.task.response_tokens)
        response = max(1, min(response, traj.task.max_context - traj.history))
        cached = eng.cached.pop(traj.tid, 0)
        req = _Request(traj, prefill_left=traj.history - cached, decode_left=response, context=cached,
                       submitted=self.now, prefill=traj.history - cached)
        eng.waiting.append(req)
        if not eng.busy:
            self._start_step(eng)

    def _admit(self, eng: _Engine) -> None:
        while eng.waiting and len(eng.running) < eng.max_num_seqs:
            req = eng.waiting[0]
            need = req.context + req.prefill_left + req.decode_left
            while eng.used_kv() + need > eng.kv_capacity and eng.cached:
                victim = next(iter(eng.cached))  # LRU idle trajectory: its next turn re-prefills everything
                del eng.cached[victim]
            if eng.used_kv() + need > eng.kv_capacity and eng.running:
                return  # wait for running requests to free KV
            eng.waiting.pop(0)
            eng.running.append(req)

    def _start_step(self, eng: _Engine) -> None:
        self._admit(eng)
        if not eng.running:
            eng.busy = False
            return
        eng.busy = True
        decoding = [r for r in eng.running if r.prefill_left == 0]
        prefilling = [r for r in eng.running if r.prefill_left > 0]
        budget = eng.max_batched_tokens - len(decoding)
        chunks, ctx_weighted = [], 0.0
        for r in prefilling:
            if budget <= 0:
                break
            n = min(r.prefill_left, budget)
            chunks.append((r, n))
            ctx_weighted += n * (r.context + n / 2)
            budget -= n
        steps = 1
        if not chunks and decoding and not eng.waiting:
            # macro-step: identical decode steps until the first request finishes or a turn comes back
            steps = min(r.decode_left for r in decoding)
            if eng.arrivals:
                one = eng.speed.step_seconds(StepWork(decode_seqs=len(decoding),
                                                      decode_context_tokens=sum(r.context for r in decoding)))
                steps = max(1, min(steps, int((eng.arrivals[0] - self.now) / one) if one > 0 else steps))
        prefill_tokens = sum(n for _, n in chunks)
        work = StepWork(prefill_tokens=prefill_tokens,
                        prefill_context=ctx_weighted / prefill_tokens if prefill_tokens else 0.0,
                        decode_seqs=len(decoding),
                        decode_context_tokens=sum(r.context for r in decoding) + len(decoding) * (steps - 1) // 2)
        dt = eng.speed.step_seconds(work) * steps
        eng.busy_time += dt
        for r, n in chunks:
            r.prefill_left -= n
            r.context += n
            if r.prefill_left == 0:  # the last prefill chunk also yields the first token
                r.decode_left -= 1
                r.context += 1
        for r in decoding:
            r.decode_left -= steps
            r.context += steps
        self._push(self.now + dt, "step", eng)

    def _finish_step(self, eng: _Engine) -> None:
        still = []
        for r in eng.running:
            if r.prefill_left == 0 and r.decode_left <= 0:
                traj = r.traj
                if self.observer is not None:
                    self.observer(traj.task.name, eng.speed.cfg.hw_class, r.prefill,
                                  r.context - traj.history, self.now - r.submitted, f"{self.seed}:{traj.tid}")
                traj.history = r.context
                traj.turns_left -= 1
                if traj.turns_left > 0 and traj.history + traj.task.obs_tokens < traj.task.max_context:
                    eng.cached[traj.tid] = r.context
                    heapq.heappush(eng.arrivals, self.now + traj.task.env_latency_s)
                    self._push(self.now + traj.task.env_latency_s, "turn", traj)
                else:
                    traj.done_at = self.now
            else:
                still.append(r)
        eng.running = still
        self._start_step(eng)


def batch(tasks: list[TaskProfile], size: int) -> list[TaskProfile]:
    """``size`` trajectories, tasks in round-robin (uniform task sampling)."""
    return [tasks[i % len(tasks)] for i in range(size)]
