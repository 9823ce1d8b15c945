"""Task-level cost Ψgen / Ψinf / Ψtrain of one task on an ordered device list (HetRL B.3).

A task with parallel degrees (tp, pp, dp) is cut into tp·pp·dp tasklets l_{i,j,k} (replica i, stage j,
shard k). Level 5 (tasklet → GPU) is a deterministic locality-first mapping of the group's devices,
which the caller orders by region, zone and node: ``replica`` layout keeps each model replica on
consecutive GPUs (TP and PP local, DP spans), ``stage`` layout keeps each stage's DP peers together
(DP local, PP spans — better when gradients are bigger than activations). Load balancing (§4.2)
splits the batch across replicas by replica speed and the layers across stages by stage speed.

The SHA-EA search calls :func:`estimate_task` tens of thousands of times, so each piece is computed
once for what it depends on (in :attr:`PlanContext.cache`): where the tasklets sit and per-replica link
costs in :mod:`rollart.planner.geometry`; here, per task, config and layer split, its :class:`Staged` memory
and replica cost table. Replica costs are plain-float formulas (cheaper than numpy on a few stages) in a
fixed operation order, so no estimate depends, to the last bit, on what was cached before it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from . import costmodel as cm
from .memory import kv_bytes_per_seq, model_memory, working_memory
from .geometry import Batches, Geometry, batches, frozen, geometry, layout, memo, replicas
from .topology import Topology
from .workflow import TaskSpec, Workflow


@dataclass(frozen=True)
class ParallelConfig:
    tp: int
    pp: int
    dp: int
    layout: str = "replica"
    """'replica': position ((i·pp + j)·tp + k); 'stage': position ((j·dp + i)·tp + k)."""

    def position(self, i: int, j: int, k: int) -> int:
        if self.layout == "replica":
            return (i * self.pp + j) * self.tp + k
        return (j * self.dp + i) * self.tp + k

    @property
    def size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def key(self) -> tuple[int, int, int, str]:
        """The config as a plain tuple: in a cache key, one the garbage collector need not keep tracking."""
        return (self.tp, self.pp, self.dp, self.layout)


class PlanContext:
    """Topology + workflow + caches shared by every estimate of one planning run."""

    def __init__(self, topo: Topology, wf: Workflow, load_balance: bool | None = None):
        self.topo, self.wf = topo, wf
        self.load_balance = wf.cfg.load_balance if load_balance is None else load_balance
        frac = wf.cfg.usable_memory_fraction
        self.tflops = topo.tflops.tolist()
        self.hbm = topo.hbm.tolist()
        self.class_of = [int(c) for c in topo.class_of]
        self.usable = (topo.mem * frac).tolist()
        self.cache: dict = {}


@dataclass
class TaskEstimate:
    task: str
    cfg: ParallelConfig
    devices: tuple[int, ...]
    time: float
    feasible: bool
    reason: str = ""
    terms: dict[str, float] = field(default_factory=dict)
    layers: list[int] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    dbs: list[int] = field(default_factory=list)
    model_mem: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Resident bytes per GPU, aligned with ``devices``."""
    working_mem: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Transient bytes per GPU while the task runs (KV cache for generation)."""
    reshard: float = 0.0
    allgather_min: float = 0.0
    broadcast_max: float = 0.0


def split_layers(nl: int, speeds: Sequence[float], balance: bool) -> list[int]:
    """Layers per stage: even, or greedily minimising max(layers_j / speed_j) with >= 1 per stage."""
    return list(_layer_split(nl, tuple(speeds), balance))


def _layer_split(nl: int, speeds: tuple[float, ...], balance: bool) -> tuple[int, ...]:
    """:func:`split_layers`, cached."""
    key = (nl, speeds, balance)
    hit = _SPLIT_CACHE.get(key)
    if hit is None:
        hit = _SPLIT_CACHE[key] = tuple(_split_layers(nl, speeds, balance))
    return hit


_SPLIT_CACHE: dict = {}


def _split_layers(nl: int, speeds: Sequence[float], balance: bool) -> list[int]:
    pp = len(speeds)
    if not balance:
        return [nl // pp + (1 if j < nl % pp else 0) for j in range(pp)]
    out = [1] * pp
    for _ in range(nl - pp):
        j = min(range(pp), key=lambda s: ((out[s] + 1) / speeds[s], s))
        out[j] += 1
    return out


def split_samples(total: int, rates: Sequence[float]) -> list[int]:
    """Integer shares proportional to ``rates`` (largest remainder), at least 1 each when possible."""
    dp = len(rates)
    s = sum(rates)
    raw = [total * r / s for r in rates]
    out = [max(1 if total >= dp else 0, int(x)) for x in raw]
    rest = total - sum(out)
    if rest > 0:  # stable sort, so ties go to the lower replica index
        frac = [x - int(x) for x in raw]
        order = sorted(range(dp), key=frac.__getitem__, reverse=True)
        for i in range(rest):
            out[order[i % dp]] += 1
    while rest < 0:  # the max(1, ...) floor overshot: take from the largest shares
        j = max(range(dp), key=out.__getitem__)
        out[j] -= 1
        rest += 1
    return out


def estimate_task(task: TaskSpec, devices: Sequence[int], cfg: ParallelConfig, ctx: PlanContext,
                  resident: np.ndarray | None = None, sig: tuple[int, ...] | None = None) -> TaskEstimate:
    """Ψ for ``task`` on ``devices`` (ordered) with ``cfg``; ``resident`` = other models' bytes per position."""
    devices = tuple(devices)
    if cfg.size != len(devices):
        raise ValueError(f"{task.name}: tp*pp*dp={cfg.size} but {len(devices)} devices")
    wf = ctx.wf
    geo = geometry(devices, cfg, ctx, sig)
    speeds = geo.stage_hbm if task.kind == "gen" else geo.stage_tflops
    layers = _layer_split(task.model.layers, speeds, ctx.load_balance)
    st = memo(ctx, ("staged", task, cfg.key, layers), lambda: Staged(task, cfg, layers, ctx))
    even = memo(ctx, ("even", wf.samples, cfg.dp),
                 lambda: batches(split_samples(wf.samples, [1.0] * cfg.dp), ctx))
    est, times = _evaluate(st, geo, even, ctx, resident)
    if ctx.load_balance and cfg.dp > 1 and est.feasible and len(set(times)) > 1:
        balanced = _balanced(even, times, ctx)
        if balanced is not even:
            est2, _ = _evaluate(st, geo, balanced, ctx, resident)
            if est2.feasible and est2.time <= est.time:
                est = est2
    est.devices, est.cfg = devices, cfg  # the caller's objects (st may hold an equal config)
    return est


class Staged:
    """A task under one config and layer split, whatever its GPUs: its bytes per position and its
    replicas' cost table. Built once per (task, config, layer split) in a planning run."""

    def __init__(self, task: TaskSpec, cfg: ParallelConfig, layers: tuple[int, ...], ctx: PlanContext):
        c, m, pp = ctx.wf.cfg, task.model, cfg.pp
        self.task, self.cfg, self.layers = task, cfg, layers
        self._layout = layout(cfg)
        stage_of = self._layout.stage_of
        mm = [model_memory(task, layers[j], j == 0, j == pp - 1, cfg.tp, cfg.dp) for j in range(pp)]
        self.model_pos = frozen(np.array(mm)[stage_of])
        """Resident bytes per position (shared by the estimates: read-only)."""
        self.kv_pos = None
        """Generation: KV-cache bytes of one sequence per position."""
        if task.kind == "gen":
            kv = [kv_bytes_per_seq(task, layers[j], cfg.tp, c.seq_in + c.seq_out) for j in range(pp)]
            self.kv_pos = frozen(np.array(kv)[stage_of])
        self._work_pos: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        self.costs = memo(ctx, ("replica_costs", task.kind, m, cfg.tp, cfg.pp, layers),
                           lambda: _ReplicaCosts(task, cfg, layers, ctx))
        """Shared by the tasks that run the same model the same way (the costs ignore a task's role)."""
        self.dp_volumes = tuple(cm.cv_dp(layers[j], m.layer_params, cfg.dp, cfg.tp) for j in range(pp))
        self.allgather_volume = cm.cv_allgather(m.layers, m.layer_params, cfg.tp * cfg.pp)

    def work_pos(self, split: Batches, ctx: PlanContext) -> tuple[np.ndarray, np.ndarray]:
        """Inference/training: working bytes per position, and model + working bytes (read-only)."""
        in_flight = split.in_flight(self.cfg.pp)
        w = self._work_pos.get(in_flight)
        if w is None:
            c, task, layers = ctx.wf.cfg, self.task, self.layers
            tp, pp, dp = self.cfg.tp, self.cfg.pp, self.cfg.dp
            wm = np.array([[working_memory(task, layers[j], j == pp - 1, tp, c.micro_batch_size,
                                           c.seq_in + c.seq_out, max(1, min(in_flight[i], pp - j)), c.recompute)
                            for j in range(pp)] for i in range(dp)])
            work = frozen(wm[self._layout.replica_of, self._layout.stage_of])
            w = self._work_pos[in_flight] = (work, frozen(self.model_pos + work))
        return w


def _balanced(even: Batches, times: tuple[float, ...], ctx: PlanContext) -> Batches:
    """The samples split by replica speed, as measured on the even split (its replica ``times``)."""
    def make() -> Batches:
        rates = [n / t if t > 0 else 1.0 for n, t in zip(even.samples, times)]
        return batches(split_samples(ctx.wf.samples, rates), ctx)
    return memo(ctx, ("balanced", times), make)


def _evaluate(st: Staged, geo: Geometry, split: Batches, ctx: PlanContext,
              resident: np.ndarray | None) -> tuple[TaskEstimate, tuple[float, ...]]:
    """The estimate for one batch split, and each replica's time (empty when it does not fit).

    ``resident`` None: no other model's bytes, so nothing is added (x + 0.0 is x, bit for bit)."""
    task, cfg, c = st.task, st.cfg, ctx.wf.cfg
    gen, train = task.kind == "gen", task.kind == "train"
    samples = split.samples
    layers, samples_list = list(st.layers), list(samples)

    # 1) memory: resident model per stage, working set per cell; generation's decode batch from what is left
    model_pos, reason = st.model_pos, ""
    if gen:
        kv_pos = st.kv_pos
        free = (geo.usable if resident is None else geo.usable - resident) - model_pos
        cap_pos = np.floor(np.maximum(free, 0.0) / kv_pos)
        cap = np.minimum(geo.layout.replica_rows(cap_pos).min(axis=1), float(c.max_decode_batch))
        db = np.minimum(cap, split.array)  # whole numbers, as floats
        if split.empty:  # a replica without samples still reserves one sequence
            db = np.where(split.array > 0, db, 1.0)
        dbs = db.astype(int).tolist()
        work_pos = db[geo.layout.replica_of] * kv_pos
        if min(dbs) < 1:
            reason = f"{task.name}: no room for KV cache"
    else:
        dbs = []
        work_pos, need = st.work_pos(split, ctx)
        if resident is not None:
            need = need + resident
        if np.count_nonzero(need > geo.usable):  # need - usable > 0 somewhere (count_nonzero: faster than any)
            reason = f"{task.name} overflows a GPU by {(need - geo.usable).max() / 1e9:.1f} GB"
    if reason:
        return TaskEstimate(task.name, cfg, (), cm.INF, False, reason, {}, layers, samples_list, dbs, model_pos,
                            work_pos), ()

    # 2) per (replica, stage) cell: computation, TP ring, PP hop, HBM-bound decoding — looked up per
    #    replica as (per-stage cost, replica time, largest comp/tp/pp/hbm entry)
    table, known = st.costs, st.costs.rows
    keys = zip(geo.replica_ids, samples, split.micro_batches, dbs or split.zeros)
    costs = [known.get(k) or table.row(k) for k in keys]
    replica_times = tuple([rc[1] for rc in costs])
    bub_max = 0.0
    if train and cfg.pp > 1:
        # numpy's row sum: its summation order, not Python's, defines these bits
        sums = np.array([rc[0] for rc in costs])[:, 1:].sum(axis=1).tolist()
        bubble = [s / max(nm, 1) if nm > 0 else 0.0 for s, nm in zip(sums, split.micro_batches)]
        bub_max = max(bubble)
        replica_times = tuple([r + b for r, b in zip(replica_times, bubble)])

    # 3) training: gradient all-reduce over each (stage, shard)'s DP ring
    dp_cost = geo.dp_cost(st.dp_volumes) if train and cfg.dp > 1 else 0.0
    by_term = zip(*[rc[2] for rc in costs])
    # a replica without samples can hold NaN (see _ReplicaCosts): numpy's max propagates it
    comp_max, tp_max, pp_max, hbm_max = [float(np.max(t)) for t in by_term] if split.empty else map(max, by_term)
    terms = {"comp": comp_max, "tp": tp_max, "pp": pp_max, "hbm": hbm_max, "bubble": bub_max, "dp": dp_cost}

    # 4) weight movement: all-gather within each actor-training replica (resharding / sync), and the
    #    broadcast within each generation replica
    slowest = fastest = 0.0
    if ((train and task.role == "actor") or gen) and cfg.tp * cfg.pp > 1:
        slowest, fastest = geo.weight_rings(st.allgather_volume)
    est = TaskEstimate(task.name, cfg, (), max(replica_times) + dp_cost, True, "", terms, layers, samples_list,
                       dbs, model_pos, work_pos)
    if train and task.role == "actor":
        est.reshard, est.allgather_min = slowest, fastest
    elif gen:
        est.broadcast_max = slowest
    return est, replica_times


class _ReplicaCosts:
    """Replica costs of one task kind and model under (tp, pp) with one layer split, computed on first
    lookup: ``rows`` maps (replica number, samples, micro-batches, decode batch) to (per-stage cost,
    replica time, largest comp/tp/pp/hbm entry).

    Plain floats: for a few stages Python is faster than numpy. Keep each formula's operation order,
    which fixes its floating-point result (the search compares these times exactly). ``rows`` is a
    plain dict of plain tuples of numbers, which the garbage collector stops tracking: it would otherwise
    traverse these ~100k entries on every full collection."""

    def __init__(self, task: TaskSpec, cfg: ParallelConfig, layers: Sequence[int], ctx: PlanContext):
        self.rows: dict[tuple[int, int, int, int], tuple] = {}
        c, m = ctx.wf.cfg, task.model
        self.replicas = replicas(ctx, cfg.tp, cfg.pp).items
        self.gen, train = task.kind == "gen", task.kind == "train"
        self.tp, self.pp = cfg.tp, cfg.pp
        seq = c.seq_in if self.gen else c.seq_in + c.seq_out  # generation: prefill only (seq_out = 0), B.2
        self.lf = cm.layer_flops(seq, m.hidden, m.intermediate)
        self.comp_mult = 3 if train else 1
        self.tp_mult = (6 if c.recompute else 4) if train else 2
        self.pp_mult = 2 if train else 1
        self.tp_volume = cm.cv_tp(c.micro_batch_size, seq, m.hidden, cfg.tp)
        self.pp_volume = cm.cv_pp(c.micro_batch_size, seq, m.hidden)
        self.nl = [float(x) for x in layers]
        self.zeros = (0.0,) * cfg.pp
        self.seq_out, self.hidden, self.layer_params = c.seq_out, m.hidden, m.layer_params

    def row(self, key: tuple[int, int, int, int]) -> tuple:
        """Compute and store ``rows[key]``."""
        number, n, nm, db = key
        rep = self.replicas[number]
        tp, pp, nl, zeros = self.tp, self.pp, self.nl, self.zeros
        n, nm = float(n), float(nm)
        lf, cn = self.lf, self.comp_mult * n
        comp = [cn * x * lf / f for x, f in zip(nl, rep.tflops_tp)]
        tpc = ppc = hbm = zeros
        if tp > 1:
            tn = self.tp_mult * nm
            tpc = [tn * x * r for x, r in zip(nl, rep.tp_rings(self.tp_volume))]
        if pp > 1:
            pn = self.pp_mult * nm
            ppc = [pn * h for h in rep.pp_hops(self.pp_volume)]
        if self.gen:
            # A replica holds db sequences; with pp stages they decode as pp micro-batches of db/pp, so
            # each stage reads its weights once per db/pp tokens (dbs_d of B.2 is this per-stage batch).
            b, lp = db / pp, self.layer_params
            sn = self.seq_out * n * cm.B_BF16
            hbm = [sn * x * lp / (b * h * tp) for x, h in zip(nl, rep.hbm)]
            steps = self.seq_out * n / b  # decode micro-batch passes: each pays TP all-reduces and a PP hop
            # communication volume depends on the decode batch
            if tp > 1:
                s2, rings = steps * 2, rep.tp_rings(cm.cv_tp(b, 1, self.hidden, tp))
                tpc = [v + s2 * x * r for v, x, r in zip(tpc, nl, rings)]
            if pp > 1:
                ppc = [v + steps * h for v, h in zip(ppc, rep.pp_hops(cm.cv_pp(b, 1, self.hidden)))]
        if n > 0:
            stage = tuple([a + t + p + h for a, t, p, h in zip(comp, tpc, ppc, hbm)])
            top = (max(comp), max(tpc), max(ppc), max(hbm))
        else:  # 0 · an unreachable ring is NaN here, and numpy's max propagates it (Python's may not)
            stage, top = zeros, tuple(float(np.max(x)) for x in (comp, tpc, ppc, hbm))
        rc = self.rows[key] = (stage, max(stage), top)
        return rc
