"""SIMULATED: discrete-event multi-turn agentic rollout on GPU pools, timed by rollart.hardware.SpeedModel.

Used by ``tools/bench/affinity.py`` to reproduce RollArt's hardware-affinity findings (Fig. 4,
Fig. 11a) at paper scale, which a CPU cannot run. Every number it produces is **simulated**.

The engines are ``rollart.sim.engine_timeline.EngineTimeline``s (continuous batching, chunked prefill, prefix
caching with a KV budget, macro-steps: its docstring says how); this module adds the trajectories:

- a finished turn goes to its environment (``env_latency_s``) and the next turn returns to the same engine
  (sticky routing), which keeps the trajectory's context cached meanwhile; new trajectories go to the
  least-loaded engine of the class their task is mapped to;
- decode-only macro-steps end where a trajectory's next turn comes back to the engine, so a 512-trajectory,
  72-engine batch simulates in about a second.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from rollart.emulation import TaskProfile
from rollart.hardware import SpeedModel, SpeedModelConfig
from rollart.sim.engine_timeline import EmulatedRequest, EngineTimeline


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
    timeline: EngineTimeline
    busy: bool = False
    arrivals: list = field(default_factory=list)
    """Heap of times at which trajectories' next turns come back to this engine."""
    assigned: int = 0


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
            self.engines[hw] = [_Engine(f"{hw}-{i}", EngineTimeline(speed, max_batched_tokens, max_num_seqs))
                                for i in range(n)]
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
        return {hw: sum(e.timeline.busy_time for e in es) / (len(es) * makespan) for hw, es in self.engines.items()}

    # ------------------------------------------------------------------ mechanics

    def _push(self, t: float, kind: str, obj) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, obj))

    def _submit(self, traj: _Traj, new_tokens: int) -> None:
        eng = traj.engine
        traj.history += new_tokens
        response = traj.rng.randint(*traj.task.response_tokens)
        response = max(1, min(response, traj.task.max_context - traj.history))
        cached = eng.timeline.take_cached(traj.tid)
        eng.timeline.submit(EmulatedRequest(traj.tid, prefill_left=traj.history - cached, decode_total=response,
                                            context=cached, submitted=self.now, owner=traj))
        if not eng.busy:
            self._start_step(eng)

    def _start_step(self, eng: _Engine) -> None:
        dt = eng.timeline.start_step(eng.arrivals[0] - self.now if eng.arrivals else None)
        eng.busy = dt is not None
        if eng.busy:
            self._push(self.now + dt, "step", eng)

    def _finish_step(self, eng: _Engine) -> None:
        for r in eng.timeline.finish_step():
            traj = r.owner
            if self.observer is not None:
                self.observer(traj.task.name, eng.timeline.speed.cfg.hw_class, r.prefill,
                              r.context - traj.history, self.now - r.submitted, f"{self.seed}:{traj.tid}")
            traj.history = r.context
            traj.turns_left -= 1
            if traj.turns_left > 0 and traj.history + traj.task.obs_tokens < traj.task.max_context:
                eng.timeline.cache(traj.tid, r.context)
                heapq.heappush(eng.arrivals, self.now + traj.task.env_latency_s)
                self._push(self.now + traj.task.env_latency_s, "turn", traj)
            else:
                traj.done_at = self.now
        self._start_step(eng)


def batch(tasks: list[TaskProfile], size: int) -> list[TaskProfile]:
    """``size`` trajectories, tasks in round-robin (uniform task sampling)."""
    return [tasks[i % len(tasks)] for i in range(size)]
