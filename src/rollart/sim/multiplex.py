"""Trace replay of RLVR jobs on a cluster of training node groups (PlexRL §6.2–6.3). SIMULATED.

Job shapes are the paper's measured phases (§6.3 table): per step, rollout on the job's own rollout GPUs
takes the cycle time; training is three serial operations — compute_log_prob, update_actor,
sync_weight — on a training node group. Rollout runs one step ahead (one step of staleness): rollout
k+1 starts once rollout k is done and training k-1 has finished; training k needs rollout k and
training k-1. A group executes one operation at a time; running another job's operation costs a context
switch (SETUP_S). Policies:

    isolated          one job per group for its lifetime; jobs wait in FCFS order for a free group
    pack              share groups: admit the queue head to the *fullest* group whose summed training duty
                      stays <= 1 (best fit); FCFS, the head blocks the queue
    spread            phase-aware: fit the job's trace into the *emptiest* group's free windows with the
                      smallest micro-shift (Placer), start it at that shift; FCFS, the head blocks
    spread+backfill   spread, and a later job that fits may start while the head cannot (backfill)

Runtime order on a shared group is HRRS (or FCFS, for the comparison). Step counts and arrivals are not
given by the paper; ``make_trace`` draws them (documented in BENCHMARKS.md).
"""
from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from rollart.multiplex.placer import Placer, Trace
from rollart.multiplex.hrrs import hrrs_priority

# PlexRL §6.3: cycle time and the three training operations per step, seconds
SHAPES = {
    "7B": dict(cycle=289.03, ops=(9.66, 38.08, 9.76)),
    "30B": dict(cycle=284.80, ops=(19.62, 56.35, 7.57)),
    "235B": dict(cycle=589.71, ops=(20.11, 82.39, 8.89)),
}
SETUP_S = {"7B": 19.0 * 7 / 30, "30B": 19.0, "235B": 19.0}
"""Context-switch cost: §6.2 measures 19.0 s to load the 30B optimizer state; 7B scaled by size; 235B runs
with ZeRO-offload (optimizer already on host), taken as the same 19.0 s."""
TABLE1 = {
    "7B": dict(dp=2, cp=4, ep=None, pp=1, dp_r=1, tp_r=2),
    "30B": dict(dp=8, cp=8, ep=8, pp=1, dp_r=4, tp_r=2),
    "235B": dict(dp=1, cp=8, ep=8, pp=12, dp_r=4, tp_r=8),
}
"""PlexRL §6.1 Tab. 1, the per-job GPU allocation of the §6.2 runs (the same for Split-Async and
PlexRL; PlexRL's shared training pool is one such deployment time-sliced by two jobs). Our copy lost the
header row; the six value columns are read as DP, CP, EP, PP (training) and DP_r, TP_r (rollout):
§6.1 names the symbols in the order "DP, CP, EP, PP, TP" and says "subscript denotes rollout
configuration"; §6.2 says Tab. 1 lists the *GPU allocations*, which needs a rollout DP and TP; column 3
is NA exactly for the dense 7B (expert parallelism) and column 4 is > 1 only for 235B (pipeline stages).
EP is carved out of DP x CP, so it adds no GPUs. The reading is ours — see ``table1_pools``."""


def table1_pools(model: str) -> tuple[int, int]:
    """(rollout GPUs, training GPUs) per job from Tab. 1: rollout DP_r x TP_r, training DP x CP x PP
    (TP 1). 7B 2 / 8, 30B 8 / 64, 235B 32 / 96. Consistent with §6.1's ZeRO-offload for 235B: 96 GPUs
    hold ~40 GB of model state each without it (the alternative reading, TP in column 5, would give 384
    GPUs and ~10 GB, with no need to offload)."""
    t = TABLE1[model]
    return t["dp_r"] * t["tp_r"], t["dp"] * t["cp"] * t["pp"]


PAPER_SAVED_PCT = {"7B": 31.36, "30B": 30.10, "235B": 37.58}
"""PlexRL §6.2: measured GPU-hour reduction of two-job packing vs Split-Async, 100-step budgets."""
SLOT_S = 5.0
"""Placement grid: 5 s slots; planning periods rounded to 300 s / 600 s (divisors of the horizon)."""
HORIZON_SLOTS = 240


@dataclass
class SimJob:
    id: str
    model: str
    steps: int
    arrival: float
    jitter: float = 0.05
    # filled by the simulation
    group: int = -1
    start: float = math.nan
    end: float = math.nan
    trained: int = 0
    rolled: int = 0
    rollout_busy: bool = False
    train_busy: bool = False
    op_index: int = 0
    phase_arrival: float = 0.0

    @property
    def cycle(self) -> float:
        return SHAPES[self.model]["cycle"]

    @property
    def ops(self) -> tuple[float, ...]:
        return SHAPES[self.model]["ops"]

    def duty(self) -> float:
        return sum(self.ops) / self.cycle

    def isolated_duration(self) -> float:
        return self.steps * self.cycle + sum(self.ops)

    def plan_trace(self) -> Trace:
        period = 60 if self.cycle < 400 else 120
        return Trace(period, [(0, math.ceil(sum(self.ops) / SLOT_S))])


@dataclass
class SimResult:
    policy: str
    drain_s: float
    norm_delay: list[float]
    switches: int
    op_waits: list[float] = field(default_factory=list)
    jobs: list[SimJob] = field(default_factory=list)


def make_trace(n_jobs: int, seed: int = 0, mean_interarrival_s: float = 120.0,
               steps: tuple[int, int] = (30, 150)) -> list[SimJob]:
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for i in range(n_jobs):
        t += rng.expovariate(1.0 / mean_interarrival_s)
        jobs.append(SimJob(f"j{i}", rng.choice(list(SHAPES)), rng.randint(*steps), t))
    return jobs


class ClusterSim:
    def __init__(self, jobs: list[SimJob], groups: int, policy: str, runtime: str = "hrrs", seed: int = 0):
        if policy not in ("isolated", "pack", "spread", "spread+backfill"):
            raise ValueError(f"unknown policy {policy!r}")
        self.jobs = [SimJob(j.id, j.model, j.steps, j.arrival, j.jitter) for j in jobs]
        self.groups, self.policy, self.runtime = groups, policy, runtime
        # one jitter stream per job: a job sees the same rollout durations alone and when sharing
        self.rng = {j.id: random.Random(f"{seed}:{j.id}") for j in self.jobs}
        self.now = 0.0
        self.events: list = []
        self.seq = 0
        self.queue: list[SimJob] = []
        self.hosted: list[list[SimJob]] = [[] for _ in range(groups)]
        self.pending: list[list[tuple[float, SimJob]]] = [[] for _ in range(groups)]  # (arrival, job) op requests
        self.busy = [False] * groups
        self.resident: list[SimJob | None] = [None] * groups
        self.switches = 0
        self.op_waits: list[float] = []
        self.placer = Placer(groups, HORIZON_SLOTS, prefer="spread")

    # ------------------------------------------------------------------ event loop
    def at(self, t: float, fn, *args) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def run(self) -> SimResult:
        for j in self.jobs:
            self.at(j.arrival, self._arrive, j)
        while self.events:
            self.now, _, fn, args = heapq.heappop(self.events)
            fn(*args)
        drain = max(j.end for j in self.jobs) - min(j.arrival for j in self.jobs)
        delay = [((j.end - j.arrival) - j.isolated_duration()) / j.isolated_duration() for j in self.jobs]
        return SimResult(self.policy, drain, delay, self.switches, self.op_waits, self.jobs)

    # ------------------------------------------------------------------ admission
    def _arrive(self, job: SimJob) -> None:
        self.queue.append(job)
        self._admit()

    def _admit(self) -> None:
        i = 0
        while i < len(self.queue):
            job = self.queue[i]
            placed = self._place(job)
            if placed is None:
                if self.policy != "spread+backfill":
                    return  # FCFS: the head blocks everyone behind it
                i += 1
                continue
            group, delay = placed
            self.queue.pop(i)
            job.group = group
            self.hosted[group].append(job)
            self.at(self.now + delay, self._start, job)

    def _place(self, job: SimJob) -> tuple[int, float] | None:
        if self.policy == "isolated":
            free = [g for g in range(self.groups) if not self.hosted[g]]
            return (free[0], 0.0) if free else None
        if self.policy == "pack":
            fits = [g for g in range(self.groups)
                    if sum(o.duty() for o in self.hosted[g]) + job.duty() <= 1.0]
            if not fits:
                return None
            g = max(fits, key=lambda g: (sum(o.duty() for o in self.hosted[g]), -g))
            return g, 0.0
        # spread: phase-aware trace fitting on the emptiest group that fits (Placer prefers least load)
        placed = self.placer.warm_start(job.id, job.plan_trace())
        if placed is None:
            return None
        # align the job's first training phase with its reserved window (micro-shift relative to the ring)
        ring_now = int(self.now / SLOT_S) % HORIZON_SLOTS
        first = (placed.windows[0][0] - ring_now) % job.plan_trace().period
        rollout_lead = job.cycle
        delay = ((first * SLOT_S - rollout_lead) % (job.plan_trace().period * SLOT_S))
        return placed.nodes[0], delay

    # ------------------------------------------------------------------ job lifecycle
    def _start(self, job: SimJob) -> None:
        job.start = self.now
        self._maybe_rollout(job)

    def _maybe_rollout(self, job: SimJob) -> None:
        # rollout k+1 may start once rollout k is done and training k-1 finished (one step of staleness)
        if job.rollout_busy or job.rolled >= job.steps or job.rolled > job.trained + 1:
            return
        job.rollout_busy = True
        dur = job.cycle * (1 + self.rng[job.id].uniform(-job.jitter, job.jitter))
        self.at(self.now + dur, self._rollout_done, job)

    def _rollout_done(self, job: SimJob) -> None:
        job.rollout_busy = False
        job.rolled += 1
        self._maybe_train(job)
        self._maybe_rollout(job)

    def _maybe_train(self, job: SimJob) -> None:
        if job.train_busy or job.trained >= job.rolled:
            return
        job.train_busy = True
        job.op_index = 0
        self._request(job)

    def _request(self, job: SimJob) -> None:
        if job.op_index == 0:
            job.phase_arrival = self.now
        self.pending[job.group].append((self.now, job))
        self._dispatch(job.group)

    def _dispatch(self, g: int) -> None:
        if self.busy[g] or not self.pending[g]:
            return
        res = self.resident[g]
        if self.runtime == "fcfs":
            k = 0
        else:
            # response ratio of the job's training *phase*: its wait counts from the phase's first request
            k = max(range(len(self.pending[g])), key=lambda i: (hrrs_priority(
                self.now - self.pending[g][i][1].phase_arrival, self.pending[g][i][1].ops[self.pending[g][i][1].op_index],
                self.pending[g][i][1] is not res, SETUP_S[self.pending[g][i][1].model]), -i))
        arrival, job = self.pending[g].pop(k)
        self.op_waits.append(self.now - arrival)
        dur = job.ops[job.op_index]
        if res is not job:
            if res is not None:
                self.switches += 1
            dur += SETUP_S[job.model] if res is not None else 0.0
            self.resident[g] = job
        self.busy[g] = True
        self.at(self.now + dur, self._op_done, job)

    def _op_done(self, job: SimJob) -> None:
        g = job.group
        self.busy[g] = False
        job.op_index += 1
        if job.op_index < len(job.ops):
            self._request(job)  # the next operation of this step (strictly serial per job)
        else:
            job.train_busy = False
            job.trained += 1
            if job.trained >= job.steps:
                self._finish(job)
            else:
                self._maybe_train(job)
                self._maybe_rollout(job)
        self._dispatch(g)

    def _finish(self, job: SimJob) -> None:
        job.end = self.now
        self.hosted[job.group].remove(job)
        if self.resident[job.group] is job:
            self.resident[job.group] = None
        if job.id in self.placer.placed:
            self.placer.release(job.id)
        self._admit()


def replay(jobs: list[SimJob], groups: int, policy: str, runtime: str = "hrrs", seed: int = 0) -> SimResult:
    return ClusterSim(jobs, groups, policy, runtime, seed).run()


def gpu_hours_two_jobs(model: str, steps: int = 100, rollout_gpus: int | None = None,
                       train_gpus: int | None = None, seed: int = 0) -> dict[str, float]:
    """§6.2: GPU-hours per effective training step — total GPU time (training + rollout) / completed
    training steps — for two identical jobs with ``steps`` steps each (§6.2: 100-step budgets).
    Split-async: each job holds its own rollout and training pools for its whole run. Packed: each job
    keeps its rollout pool, the two share one training pool (reserved until both finish), time-sliced
    with context switches. Pools default to Tab. 1 (``table1_pools``). Packing can save at most the
    second training pool: T / (2 (R + T)), reached when the packed jobs are not slowed down."""
    if rollout_gpus is None or train_gpus is None:
        r, t = table1_pools(model)
        rollout_gpus = r if rollout_gpus is None else rollout_gpus
        train_gpus = t if train_gpus is None else train_gpus
    if rollout_gpus < 1 or train_gpus < 1:
        raise ValueError(f"rollout_gpus and train_gpus must be >= 1, got {rollout_gpus}, {train_gpus}")
    alone = [replay([SimJob(j, model, steps, 0.0)], 1, "isolated", seed=seed).drain_s for j in ("a", "b")]
    split = (rollout_gpus + train_gpus) * sum(alone) / 3600
    both = replay([SimJob("a", model, steps, 0.0), SimJob("b", model, steps, 0.0)], 1, "pack", seed=seed)
    ends = [j.end for j in both.jobs]
    packed = (rollout_gpus * sum(ends) + train_gpus * max(ends)) / 3600
    return {"split_gpu_h_per_step": split / (2 * steps), "packed_gpu_h_per_step": packed / (2 * steps),
            "saved_pct": 100 * (1 - packed / split), "slowdown": max(e / a for e, a in zip(ends, alone)),
            "switches": both.switches, "bound_pct": 100 * train_gpus / (2 * (rollout_gpus + train_gpus)),
            "rollout_gpus": rollout_gpus, "train_gpus": train_gpus}
