"""One GPU group hosting one or more tasks: intra-model parallelisation (level 4) under constraint C3.

Every task of a group runs on all of the group's GPUs (tp·pp·dp = group size). Each task's parallel
configs are enumerated; the group takes the combination with the smallest summed task time whose
models all fit together (C3: resident models of every task plus the largest working set). The
combination search is best-first over the tasks' configs sorted by time, so it is deterministic: the
SHA-EA search and the ILP see exactly the same group costs.
"""
from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from . import costmodel as cm
from .geometry import signature
from .taskcost import ParallelConfig, PlanContext, TaskEstimate, estimate_task

MAX_PP = 8
TP_DEGREES = (1, 2, 4, 8)
MAX_COMBOS = 48
"""Joint-feasibility combinations tried per group before giving up."""


def parallel_configs(n: int, layers: int, both_layouts: bool = True) -> list[ParallelConfig]:
    """All (tp, pp, dp) with tp·pp·dp = n, tp in {1,2,4,8}, pp <= min(8, layers).

    The ``stage`` layout (DP peers adjacent) only changes a cost when there is DP traffic, i.e. for
    training; other tasks get the ``replica`` layout alone."""
    return list(_parallel_configs(n, layers, both_layouts))


@functools.cache
def _parallel_configs(n: int, layers: int, both_layouts: bool) -> tuple[ParallelConfig, ...]:
    """Built once: the same config objects every time, so cached estimates share them and cache keys
    holding them compare by identity."""
    out = []
    for tp in TP_DEGREES:
        if n % tp:
            continue
        rest = n // tp
        for pp in range(1, min(MAX_PP, layers, rest) + 1):
            if rest % pp:
                continue
            dp = rest // pp
            out.append(ParallelConfig(tp, pp, dp, "replica"))
            if both_layouts and pp > 1 and dp > 1:
                out.append(ParallelConfig(tp, pp, dp, "stage"))
    return tuple(out)


@dataclass
class GroupPlan:
    tasks: dict[str, TaskEstimate]
    devices: tuple[int, ...]
    feasible: bool
    reason: str = ""
    memory: dict[int, float] = field(default_factory=dict)
    """Per-GPU bytes under C3: resident models of all tasks + the largest working set."""
    topo: object = None
    p2p_volume: float = 0.0

    @property
    def time(self) -> float:
        return sum(t.time for t in self.tasks.values())

    def p2p_to(self, other: "GroupPlan") -> float:
        """C_p2p: fastest single GPU-to-GPU path from this group to ``other`` for one full model."""
        return cm.p2p_min(self.topo, self.devices, other.devices, self.p2p_volume)


def _cached_estimate(name: str, devices: tuple[int, ...], cfg: ParallelConfig, ctx: PlanContext,
                     resident: np.ndarray | None = None, sig: tuple[int, ...] | None = None) -> TaskEstimate:
    sig = sig or signature(devices, ctx)
    rkey = None if resident is None else np.round(resident / 1e6).astype(np.int64).tobytes()
    key = ("task", name, sig, cfg.key, rkey, ctx.load_balance)
    est = ctx.cache.get(key)
    if est is None:
        est = ctx.cache[key] = estimate_task(ctx.wf.by_name[name], devices, cfg, ctx, resident, sig)
    if est.devices != devices:
        est = replace(est, devices=devices)
    return est


def _task_options(name: str, devices: tuple[int, ...], ctx: PlanContext,
                  fixed: ParallelConfig | None, sig: tuple[int, ...]) -> list[TaskEstimate]:
    """Feasible configs of one task alone, fastest first, without options dominated in memory."""
    task = ctx.wf.by_name[name]
    cfgs = [fixed] if fixed else parallel_configs(len(devices), task.model.layers, task.kind == "train")
    out = [e for e in (_cached_estimate(name, devices, c, ctx, None, sig) for c in cfgs) if e.feasible]
    out.sort(key=lambda e: (e.time, e.cfg.tp, e.cfg.pp))
    kept: list[TaskEstimate] = []
    kept_peaks: list[float] = []
    for o in out:
        peak = float(o.model_mem.max())
        if all(k > peak for k in kept_peaks):
            kept.append(o)
            kept_peaks.append(peak)
    return kept


def _best_gen(devices: tuple[int, ...], resident: np.ndarray, ctx: PlanContext,
              fixed: ParallelConfig | None, sig: tuple[int, ...]) -> TaskEstimate | None:
    """Fastest generation config given the other tasks' resident memory (less room = smaller batches)."""
    cfgs = [fixed] if fixed else parallel_configs(len(devices), ctx.wf.by_name["actor_gen"].model.layers, False)
    # with nothing else resident a config is at its fastest: a lower bound to skip hopeless configs
    bounds = sorted(((_cached_estimate("actor_gen", devices, c, ctx, None, sig).time, i, c)
                     for i, c in enumerate(cfgs)))
    best = None
    for lb, _, cfg in bounds:
        if lb == cm.INF or (best is not None and lb >= best.time):
            break
        est = _cached_estimate("actor_gen", devices, cfg, ctx, resident, sig)
        if est.feasible and (best is None or est.time < best.time):
            best = est
    return best


def _gen_floor(devices: tuple[int, ...], ctx: PlanContext, sig: tuple[int, ...]) -> np.ndarray:
    """Least bytes generation needs on each GPU (weights + one sequence of KV) over its configs."""
    floor = np.full(len(devices), np.inf)
    for cfg in parallel_configs(len(devices), ctx.wf.by_name["actor_gen"].model.layers, False):
        est = _cached_estimate("actor_gen", devices, cfg, ctx, np.full(len(devices), -1e18), sig)
        per_seq = est.working_mem / max(est.dbs)  # KV of one sequence (heuristic guide only)
        floor = np.minimum(floor, est.model_mem + per_seq)
    return floor


def _needs(chosen: Sequence[TaskEstimate], n: int) -> tuple[np.ndarray, np.ndarray]:
    resident = np.zeros(n)
    work = np.zeros(n)
    for e in chosen:
        resident += e.model_mem
        work = np.maximum(work, e.working_mem)
    return resident, work


def _memory_descent(others: list[str], options: dict[str, list[TaskEstimate]], devices: tuple[int, ...],
                    ctx: PlanContext, gen_need: np.ndarray | float) -> tuple[int, ...] | None:
    """Greedy repair under memory pressure: switch the task whose next config frees most bytes per second."""
    usable = np.array([ctx.usable[d] for d in devices]) - gen_need
    idx = [0] * len(others)
    models = [np.array([o.model_mem for o in options[n]]) for n in others]  # per task: (options, GPUs)
    works = [np.array([o.working_mem for o in options[n]]) for n in others]
    times = [np.array([o.time for o in options[n]]) for n in others]
    for _ in range(64):
        resident = sum(models[p][i] for p, i in enumerate(idx))
        cur = float(np.maximum(resident + np.max([works[p][i] for p, i in enumerate(idx)], axis=0) - usable,
                               0.0).sum())
        if cur <= 0:
            return tuple(idx)
        best_move, best_score = None, 0.0
        for pos in range(len(others)):
            rest_work = (np.max([works[p][i] for p, i in enumerate(idx) if p != pos], axis=0)
                         if len(others) > 1 else 0.0)
            base = resident - models[pos][idx[pos]]  # (GPUs,)
            # every alternative config of this task at once: (options, GPUs)
            need = base[None, :] + models[pos] + np.maximum(works[pos], rest_work) - usable[None, :]
            gain = cur - np.maximum(need, 0.0).sum(axis=1)
            extra = np.maximum(times[pos] - times[pos][idx[pos]], 0.0)
            score = np.where(gain > 0, gain / (extra + 1e-3), 0.0)
            score[idx[pos]] = 0.0
            i = int(np.argmax(score))
            if score[i] > best_score:
                best_move, best_score = (pos, i), float(score[i])
        if best_move is None:
            return None
        idx[best_move[0]] = best_move[1]
    return None


def plan_group(names: Sequence[str], devices: Sequence[int], ctx: PlanContext,
               fixed: dict[str, ParallelConfig] | None = None) -> GroupPlan:
    """Best parallel configs for the tasks ``names`` sharing ``devices`` (ordered locality-first)."""
    devices = tuple(devices)
    fixed = fixed or {}
    # GPUs of one class are interchangeable: the plan depends only on the sequence of classes.
    key = ("group", tuple(names), signature(devices, ctx), tuple(sorted(fixed.items(), key=lambda x: x[0])),
           ctx.load_balance)
    hit = ctx.cache.get(key)
    if hit is None:
        hit = ctx.cache[key] = _plan_group(list(names), devices, ctx, fixed)
    return hit if hit.devices == devices else _remap(hit, devices)


def _remap(plan: GroupPlan, devices: tuple[int, ...]) -> GroupPlan:
    """The same plan on other GPUs of the same classes (estimates are positional)."""
    m = dict(zip(plan.devices, devices))
    tasks = {n: replace(e, devices=devices) for n, e in plan.tasks.items()}
    return GroupPlan(tasks, devices, plan.feasible, plan.reason, {m[d]: b for d, b in plan.memory.items()},
                     plan.topo, plan.p2p_volume)


def _plan_group(names: list[str], devices: tuple[int, ...], ctx: PlanContext,
                fixed: dict[str, ParallelConfig]) -> GroupPlan:
    topo = ctx.topo
    actor = ctx.wf.by_name["actor_gen"].model
    p2p_vol = cm.cv_p2p(actor.layers, actor.layer_params)
    others = [n for n in names if n != "actor_gen"]
    has_gen = "actor_gen" in names
    sig = signature(devices, ctx)
    options = {n: _task_options(n, devices, ctx, fixed.get(n), sig) for n in others}
    empty = [n for n in others if not options[n]]
    if empty:
        return GroupPlan({}, devices, False, f"{empty[0]} fits on no parallel config of these "
                         f"{len(devices)} GPUs", topo=topo, p2p_volume=p2p_vol)
    usable = np.array([ctx.usable[d] for d in devices])

    def try_combo(idx: tuple[int, ...]) -> GroupPlan | None:
        chosen = {n: options[n][i] for n, i in zip(others, idx)}
        resident, work = _needs(chosen.values(), len(devices))
        if (resident + work > usable).any():
            return None
        if has_gen:
            gen = _best_gen(devices, resident, ctx, fixed.get("actor_gen"), sig)
            if gen is None:
                return None
            chosen["actor_gen"] = gen
        return GroupPlan(chosen, devices, True, topo=topo, p2p_volume=p2p_vol)

    # 1) best-first over the fastest combinations
    start = tuple(0 for _ in others)
    heap = [(sum(options[n][0].time for n in others), start)]
    seen = {start}
    best: GroupPlan | None = None
    popped = found = 0
    while heap and popped < MAX_COMBOS and found < 4:
        _, idx = heapq.heappop(heap)
        popped += 1
        plan = try_combo(idx)
        if plan is not None:
            found += 1
            if best is None or plan.time < best.time:
                best = plan
        for pos in range(len(others)):  # successors: one task moves to its next option
            nxt = idx[:pos] + (idx[pos] + 1,) + idx[pos + 1:]
            if nxt[pos] < len(options[others[pos]]) and nxt not in seen:
                seen.add(nxt)
                heapq.heappush(heap, (sum(options[n][i].time for n, i in zip(others, nxt)), nxt))
    # 2) memory pressure: walk towards more sharded configs, cheapest time per freed byte first
    if best is None:
        idx = _memory_descent(others, options, devices, ctx, _gen_floor(devices, ctx, sig) if has_gen else 0.0)
        if idx is not None:
            best = try_combo(idx)
    if best is None:
        return GroupPlan({}, devices, False, "models of the group's tasks do not fit together in GPU "
                         "memory (C3)", topo=topo, p2p_volume=p2p_vol)
    resident, work = _needs(best.tasks.values(), len(devices))
    best.memory = {d: float(b) for d, b in zip(devices, resident + work)}
    best.tasks = {n: best.tasks[n] for n in names}
    return best
