"""SIMULATED baselines in the same world as :mod:`rollart.sim.coding_actions` and :mod:`rollart.sim.mopd_actions`
(ARL-Tangram §6, RollArt §7.3).

- :func:`simulate_static`: per-trajectory static allocation, a pod per trajectory as §6.1 provisions
  it: requested at the trajectory's start (before its first LLM turn) with a 0.5-CPU request and a
  4-CPU limit, held until it ends; every action runs in its pod at once (no action queue) as the
  dataset's single-process command, the node's cores shared fairly (CFS) when more commands run than
  it has cores; trajectories whose pod fits on no node wait for one, and that wait counts in their ACT.
- Fixed DoP 4 / 16 is :func:`rollart.sim.coding_actions.simulate_coding` with ``dop=4`` / ``dop=16``.
- :func:`simulate_gpu_dedicated`: every service owns ``units_per_service`` GPUs (TP) forever and serves
  its own requests FCFS, one at a time per instance (no restore cost, no sharing).
- :func:`simulate_reward_offload`: rollart §7.3 R3 — a fixed GPU budget either split between rollout and
  dedicated reward GPUs, or all given to rollout with reward on an elastic serverless pool.
"""
from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import math
import random
from typing import Optional

from rollart.actions.action import amdahl
from rollart.sim.act_result import SimResult, record_action
from rollart.sim.coding_actions import Step
from rollart.sim.event_loop import EventLoop
from rollart.sim.mopd_actions import GpuRequest, ServiceSpec


class SharedCores:
    """One node's cores shared by the single-process commands running on it, as the Linux CFS shares
    them among pods of equal CPU request: each command progresses at ``min(cap, cores / running)``
    core-seconds per second (``cap``: one core for a single process, lower under a hard quota).
    Processor sharing with a virtual clock: every running command has received the same CPU time since
    the last change, so a command ends when the virtual clock reaches its start value plus its work."""

    def __init__(self, loop: EventLoop, cores: float, cap: float = 1.0):
        self.loop, self.cores, self.cap = loop, cores, cap
        self.virtual, self.since = 0.0, 0.0
        self.jobs: list = []  # heap of (virtual end, seq, on_done)
        self._seq = itertools.count()
        self._token = 0

    def rate(self) -> float:
        """CPU seconds per second each running command gets now."""
        return min(self.cap, self.cores / len(self.jobs)) if self.jobs else 0.0

    def run(self, work: float, on_done) -> None:
        """Start a command needing ``work`` CPU-seconds; ``on_done()`` runs when it ends."""
        self._advance()
        heapq.heappush(self.jobs, (self.virtual + work, next(self._seq), on_done))
        self._arm()

    def _advance(self) -> None:
        self.virtual += (self.loop.now - self.since) * self.rate()
        self.since = self.loop.now

    def _arm(self) -> None:
        self._token += 1  # earlier wake-ups are stale: the rate changed
        if self.jobs:
            token, wait = self._token, max(0.0, (self.jobs[0][0] - self.virtual) / self.rate())
            self.loop.at(self.loop.now + wait, lambda: self._wake(token))

    def _wake(self, token: int) -> None:
        if token != self._token:
            return
        self._advance()
        done = []
        while self.jobs and self.jobs[0][0] <= self.virtual + 1e-9:
            done.append(heapq.heappop(self.jobs)[2])
        self._arm()
        for on_done in done:
            on_done()


def simulate_static(trace: list[list[Step]], nodes: int = 5, cores_per_node: int = 256,
                    pod_request: float = 0.5, cpu_quota: Optional[float] = None) -> SimResult:
    """Pod per trajectory (ARL-Tangram §6.1: "Each trajectory requests the creation of a pod at the
    beginning of execution, allocating 0.5 CPU per pod to allow limited multiplexing, with an upper
    bound of four CPUs"): the pod's CPU *request* is ``pod_request`` (0.5), so the k8s scheduler places
    up to ``cores_per_node / pod_request`` pods on a node (the node with the most unrequested CPU);
    a trajectory whose pod fits nowhere waits (Pending, FCFS) for a pod to end, and that wait counts in
    its ACT. Its commands are single-process (§5.2: the datasets' test commands are; tools use one core
    as in ARL-Tangram), so the 4-CPU limit never binds; while more commands run on a node than it has
    cores, CFS shares the cores equally among them (equal requests). ``cpu_quota`` < 1 is a hard CFS
    quota per pod (the pessimistic reading "0.5 CPU = limit"; not the paper's setting)."""
    if not 0 < pod_request <= cores_per_node:
        raise ValueError(f"pod_request must be in (0, {cores_per_node}], got {pod_request}")
    if cpu_quota is not None and cpu_quota <= 0:
        raise ValueError(f"cpu_quota must be > 0 (or None for no hard quota), got {cpu_quota}")
    loop = EventLoop()
    cap = min(1.0, cpu_quota) if cpu_quota is not None else 1.0  # single-process: one core at most
    shared = [SharedCores(loop, cores_per_node, cap) for _ in range(nodes)]
    free_pods = [int(cores_per_node / pod_request + 1e-9)] * nodes
    waiting: collections.deque = collections.deque()
    res = SimResult([0.0] * len(trace), {})
    node_of: dict[int, int] = {}

    def run_action(ti: int, si: int) -> None:
        submitted = loop.now
        shared[node_of[ti]].run(trace[ti][si].seconds, lambda: finish(ti, si, submitted))

    def finish(ti: int, si: int, submitted: float) -> None:
        act = loop.now - submitted  # the command starts at once in its pod: ACT = its wall time
        res.traj_act[ti] += act
        record_action(res, trace[ti][si].kind, act, act, 1)
        advance(ti, si + 1)

    def advance(ti: int, si: int) -> None:
        if si >= len(trace[ti]):
            free_pods[node_of.pop(ti)] += 1
            res.makespan = max(res.makespan, loop.now)
            if waiting:
                wt, requested = waiting.popleft()
                take_pod(wt)
                res.traj_act[wt] += loop.now - requested  # Pending: queued for its pod
                advance(wt, 0)
            return
        loop.at(loop.now + trace[ti][si].gen, lambda: run_action(ti, si))

    def begin(ti: int) -> None:
        """A trajectory starts: it asks for its pod first and waits (FCFS) if none fits."""
        if any(free_pods):
            take_pod(ti)
            advance(ti, 0)
        else:
            waiting.append((ti, loop.now))

    def take_pod(ti: int) -> None:
        node = max(range(nodes), key=lambda n: free_pods[n])  # least-allocated node
        free_pods[node] -= 1
        node_of[ti] = node

    for ti in range(len(trace)):
        loop.at(0.0, lambda ti=ti: begin(ti))
    loop.run()
    return res


def simulate_gpu_dedicated(services: list[ServiceSpec], reqs: list[GpuRequest],
                           units_per_service: int = 4) -> SimResult:
    """Each service on its own ``units_per_service`` GPUs (TP); requests FCFS per service."""
    res = SimResult([], {})
    free_at = {s.name: 0.0 for s in services}
    for s in services:
        if s.min_units > units_per_service:
            raise ValueError(f"service {s.name} needs {s.min_units} GPUs > units_per_service")
    busy = 0.0
    for r in sorted(reqs, key=lambda r: r.arrival):
        e = amdahl(r.parallel_fraction)(units_per_service)
        seconds = r.t_ori / (e * units_per_service)
        start = max(r.arrival, free_at[r.service])
        free_at[r.service] = start + seconds
        act = free_at[r.service] - r.arrival
        res.traj_act.append(act)
        record_action(res, "logprob", act, seconds, units_per_service)
        busy += seconds * units_per_service
        res.makespan = max(res.makespan, free_at[r.service])
    res.units["busy_gpu_seconds"] = [int(busy)]
    return res


@dataclasses.dataclass
class OffloadConfig:
    """rollart §7.3 R3: 8 non-training GPUs, batch 84, a 7B reward LLM."""

    gpus: int = 8
    """GPUs for rollout (+ dedicated reward in the local setup)."""
    reward_gpus: int = 4
    """Dedicated reward GPUs in the local setup (paper: 4 of 8)."""
    batch: int = 84
    """Trajectories per step (paper: 84)."""
    turns: int = 6
    """Generation turns per math-agent trajectory (each followed by a reward-LLM call)."""
    gen_gpu_seconds: float = 6.0
    """Median GPU-seconds of one turn's generation (lognormal, sigma 0.5)."""
    reward_seconds: float = 0.25
    """Median seconds of one reward-LLM call on one GPU (lognormal, sigma 0.5)."""
    cold_start: float = 2.0
    """Serverless cold-start seconds when no warm instance is free."""
    keep_alive: float = 60.0
    """Seconds a serverless instance stays warm after its last call (not billed: FaaS bills
    execution and cold starts)."""
    network_io: float = 0.01
    """Mean seconds of serverless request I/O per call (paper: 0.01 s mean)."""
    seed: int = 0
    """Trace seed."""


def simulate_reward_offload(cfg: OffloadConfig, serverless: bool) -> dict[str, float]:
    """One rollout step; returns rollout seconds and reward-GPU utilisation (busy / provisioned)."""
    rng = random.Random(cfg.seed)
    work = [[rng.lognormvariate(math.log(cfg.gen_gpu_seconds), 0.5) for _ in range(cfg.turns)]
            for _ in range(cfg.batch)]
    rewards = [[rng.lognormvariate(math.log(cfg.reward_seconds), 0.5) for _ in range(cfg.turns)]
               for _ in range(cfg.batch)]
    rollout_gpus = cfg.gpus if serverless else cfg.gpus - cfg.reward_gpus
    # generation: trajectories share the rollout GPUs round-robin; each GPU serves its share in
    # turn order (processor sharing approximated by dividing a GPU among its active trajectories)
    loop = EventLoop()
    per_gpu: list[list[int]] = [[] for _ in range(rollout_gpus)]
    for i in range(cfg.batch):
        per_gpu[i % rollout_gpus].append(i)
    active = [len(g) for g in per_gpu]
    reward_free = [0.0] * cfg.reward_gpus  # dedicated reward GPUs: time each becomes free
    warm: list[float] = []  # serverless instances: time each becomes free
    instances: list[list[float]] = []  # [first start, last end] per serverless instance
    busy = 0.0
    done = 0.0

    def turn(i: int, t: int, gpu: int) -> None:
        seconds = work[i][t] * active[gpu]  # slowed by the others sharing this GPU
        loop.at(loop.now + seconds, lambda: reward(i, t, gpu))

    def reward(i: int, t: int, gpu: int) -> None:
        nonlocal busy, done
        r = rewards[i][t]
        busy += r
        if serverless:
            free = [k for k, f in enumerate(warm) if f <= loop.now and loop.now - f <= cfg.keep_alive]
            if free:
                k = free[0]
                start = loop.now + cfg.network_io
            else:
                warm.append(0.0)
                instances.append([loop.now, 0.0])
                k = len(warm) - 1
                start = loop.now + cfg.cold_start + cfg.network_io
            warm[k] = start + r
            instances[k][1] = warm[k]
            end = warm[k]
        else:
            k = min(range(cfg.reward_gpus), key=lambda j: reward_free[j])
            start = max(loop.now, reward_free[k])
            reward_free[k] = start + r
            end = reward_free[k]
        if t + 1 < cfg.turns:
            loop.at(end, lambda: turn(i, t + 1, gpu))
        else:
            active[gpu] -= 1
            done = max(done, end)

    for g, members in enumerate(per_gpu):
        for i in members:
            loop.at(0.0, lambda i=i, g=g: turn(i, 0, g))
    loop.run()
    if serverless:
        billed = busy + cfg.cold_start * len(instances)
    else:
        billed = cfg.reward_gpus * done
    return {"rollout_seconds": done, "reward_utilisation": busy / billed if billed else 0.0,
            "instances": float(len(instances))}
