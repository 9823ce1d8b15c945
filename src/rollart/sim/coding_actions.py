"""SIMULATED: the AI-coding workload of ARL-Tangram under action-level scheduling at cluster scale (simulated time,
real scheduler).

The scheduler under test is the real :class:`ElasticScheduler` with real CPU pools; only time and the actions'
execution are simulated. Each decision's *real* wall-clock latency is summed into the overhead figure and, with
``charge_latency=True``, added to the simulated start of the actions it started.

The trace keeps the paper's shape (ARL-Tangram §6, Fig. 3c): a GRPO batch of multi-turn trajectories; each turn
is LLM generation then one short, single-core tool action with a long-tailed duration (not profiled); the
trajectory ends with a long-tailed, CPU-scalable reward test run (profiled: t_ori and an Amdahl elasticity, DoP
1..32, calibrated to Fig. 8a's batch-128 gain). Actions take ~47% of a trajectory's time at one core. The GPU
half of the benchmark is :mod:`rollart.sim.mopd_actions`, the baselines :mod:`rollart.sim.actions_baselines`.
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import Optional

from rollart.actions.action import Action, amdahl, table
from rollart.actions.basic import CountPool
from rollart.actions.elastic import ElasticScheduler
from rollart.config import ConfigError
from rollart.sim.act_result import SimResult, record_action
from rollart.sim.event_loop import EventLoop


# -- trace ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Step:
    """LLM generation for ``gen`` seconds, then one action."""

    gen: float
    kind: str  # "tool" or "reward_test"
    seconds: float  # true single-core duration
    parallel_fraction: float = 0.0
    speedup: Optional[tuple[float, ...]] = None
    """Profiled speed-ups on 1, 2, ... cores of a real suite (its length is the suite's core cap); when
    set it replaces the Amdahl curve of ``parallel_fraction``."""

    def speed(self, m: int) -> float:
        """Speed-up over one core with ``m`` cores."""
        if self.speedup is not None:
            return self.speedup[m - 1]
        return amdahl(self.parallel_fraction)(m) * m


@dataclasses.dataclass
class CodingTraceConfig:
    """AI-coding-like trace (SWE-style agent, tests as reward)."""

    batch: int = 1280
    """Trajectories in the rollout batch (paper: 1280)."""
    turns_mean: float = 20.0
    """Mean tool turns per trajectory (3 + exponential, capped at 60). Not given by the paper for AI
    coding (our choice: a multi-turn SWE agent); ``gen_median`` and ``tool_median`` are set for this
    count so that the per-trajectory time shares match the paper's."""
    gen_median: float = 4.0
    """Median LLM generation seconds per turn (lognormal, sigma 0.6). Set so that actions take ~47% of
    a trajectory's time at one core (ARL-Tangram §1/§2.3, Fig. 3c)."""
    tool_median: float = 0.17
    """Median tool-action seconds at one core (lognormal, sigma 1.5, capped at 300 s; mean 0.5 s). Set
    so that a trajectory's tool time is ~1/8.8 of its test time: §6.2 (Fig. 7) gives env 9.0x, reward
    2.8x, 4.3x in total, so the baseline spends about as long in env interactions as in reward; Table 1
    puts Tangram's queueing + overhead at 4% of execution at batch 1280, so Tangram's env time is ~pure
    tool execution = baseline env / 9, while the baseline's single-process test runs (§5.2) are ~pure
    one-core test time. (Before: 1.0 s, an unsourced guess, 6x more tool time.)"""
    test_median: float = 60.0
    """Median reward test-run seconds at one core (lognormal, sigma 1.0, capped at 1800 s). Only the
    ratios to tool and generation time matter for ACT ratios; the paper gives no absolute figure."""
    parallel_range: tuple[float, float] = (0.72, 0.86)
    """Amdahl parallel fraction of a test run, uniform in this range (mean 0.79). The paper gives no
    elasticity curve. Its one figure that isolates it is Fig. 8(a) left at batch 128 on 1280 cores: 3.1x
    total ACT per trajectory vs the k8s baseline, with 10 cores per trajectory, so neither side contends
    (the baseline congests only as the batch grows, §6.3) and the gain is the test runs' speed-up at up
    to 32 cores diluted by the tool calls. With this trace the batch-128 gain is 3.12x (mean over trace
    seeds 0-7; the earlier unsourced range (0.85, 0.99) gave 4.56x). Because 1/speed-up is linear in the
    fraction, only its mean (0.79) is pinned; the width 0.14 is kept from the earlier range (unsourced).
    Out-of-sample check: the reward-computation gain at batch 1280 is then 2.4x (paper Fig. 7: 2.8x;
    the earlier range gave 4.1x)."""
    seed: int = 0
    """Trace seed."""

    def __post_init__(self) -> None:
        if self.batch < 1 or self.turns_mean < 1:
            raise ConfigError("batch and turns_mean must be >= 1")
        lo, hi = self.parallel_range
        if not 0.0 <= lo <= hi <= 1.0:
            raise ConfigError(f"parallel_range={self.parallel_range}: need 0 <= low <= high <= 1")


def coding_trace(cfg: CodingTraceConfig) -> list[list[Step]]:
    rng = random.Random(cfg.seed)
    trace = []
    for _ in range(cfg.batch):
        turns = min(60, max(3, int(rng.expovariate(1.0 / cfg.turns_mean)) + 3))
        steps = [Step(rng.lognormvariate(math.log(cfg.gen_median), 0.6), "tool",
                      min(300.0, rng.lognormvariate(math.log(cfg.tool_median), 1.5)))
                 for _ in range(turns)]
        steps.append(Step(rng.lognormvariate(math.log(cfg.gen_median), 0.6), "reward_test",
                          min(1800.0, rng.lognormvariate(math.log(cfg.test_median), 1.0)),
                          rng.uniform(*cfg.parallel_range)))
        trace.append(steps)
    return trace


def action_time_ratio(trace: list[list[Step]], tool_factor: float = 1.0) -> float:
    """Mean over trajectories of action time / trajectory time at one core and no queueing; with
    ``tool_factor`` k, each tool call counts k times its execution (e.g. 9: the paper's k8s baseline,
    whose env interactions take 9x ARL-Tangram's, §6.2)."""
    ratios = []
    for steps in trace:
        act = sum(s.seconds * (tool_factor if s.kind == "tool" else 1.0) for s in steps)
        ratios.append(act / (act + sum(s.gen for s in steps)))
    return sum(ratios) / len(ratios)


# -- action-level (Tangram) CPU simulation ------------------------------------------------------
def simulate_coding(trace: list[list[Step]], nodes: int = 5, cores_per_node: int = 256,
                    dop: Optional[int] = None, depth: int = 2, lookahead: int = 128,
                    explore: str = "smallest", charge_latency: bool = True, max_dop: int = 32,
                    replay: bool = False) -> SimResult:
    """Action-level scheduling; ``dop=None`` is elastic (1..``max_dop``; the paper's range is 1..32,
    §6.4), an int is the fixed-DoP baseline. ``charge_latency=False`` keeps measuring decisions but
    does not delay actions by them (exact, machine-independent timings for tests).
    Closed loop by default: a trajectory's next LLM turn starts when its action completes. With
    ``replay=True`` (open loop) every action arrives at its time in the trace's one-core, no-queue
    timeline whatever happened to the trajectory's earlier actions — another reading of §6.4's
    "benchmark based on a real RL trace", which does not say how the trace is replayed."""
    if max_dop < 1:
        raise ValueError(f"max_dop must be >= 1, got {max_dop}")
    loop = EventLoop()
    scheds = [ElasticScheduler({"cpu": CountPool(f"cpu@{n}", cores_per_node, loop)}, depth=depth,
                               lookahead=lookahead, clock=loop, explore=explore) for n in range(nodes)]
    res = SimResult([0.0] * len(trace), {})
    truth: dict[int, tuple[int, int, Step]] = {}  # action id -> (trajectory, step index, step)

    def make_action(ti: int, si: int, step: Step) -> Action:
        if step.kind == "tool":
            return Action({}, key="cpu", units=(1,), kind="tool", trajectory=ti)
        cap = max_dop if step.speedup is None else min(max_dop, len(step.speedup))  # per-suite core cap
        units = tuple(range(1, cap + 1)) if dop is None else (min(dop, cap),)
        curve = (amdahl(step.parallel_fraction) if step.speedup is None
                 else table({m: step.speedup[m - 1] for m in range(1, cap + 1)}))
        return Action({}, key="cpu", units=units, elasticity=curve,
                      t_ori=step.seconds, kind="reward_test", trajectory=ti)

    def pump(node: int) -> None:
        sched = scheds[node]
        runs = sched.step()
        res.decision_seconds += sched.decision_latency[-1]
        res.decisions += 1
        latency = sched.decision_latency[-1] if charge_latency else 0.0
        for run in runs:
            ti, si, step = truth[run.action.id]
            m = max(1, run.units)
            seconds = step.seconds / step.speed(m) if step.kind != "tool" else step.seconds
            loop.at(loop.now + latency + seconds, lambda r=run, s=seconds, n=node: done(n, r, s))

    def done(node: int, run, seconds: float) -> None:
        scheds[node].finish(run.action)
        ti, si, step = truth.pop(run.action.id)
        act = loop.now - run.action.submit_time
        res.traj_act[ti] += act
        record_action(res, step.kind, act, seconds, run.units)
        pump(node)
        res.makespan = max(res.makespan, loop.now)
        if not replay:
            advance(ti, si + 1)

    def submit(ti: int, si: int) -> None:
        step = trace[ti][si]
        a = make_action(ti, si, step)
        truth[a.id] = (ti, si, step)
        node = ti % nodes  # memory-balanced placement of equal-size trajectories = round robin
        scheds[node].submit(a)
        pump(node)

    def advance(ti: int, si: int) -> None:
        if si < len(trace[ti]):
            loop.at(loop.now + trace[ti][si].gen, lambda: submit(ti, si))

    for ti, steps in enumerate(trace):
        if not replay:
            loop.at(0.0, lambda ti=ti: advance(ti, 0))
            continue
        t = 0.0
        for si, step in enumerate(steps):  # the one-core, no-queue timeline of the trajectory
            t += step.gen
            loop.at(t, lambda ti=ti, si=si: submit(ti, si))
            t += step.seconds
    loop.run()
    return res
