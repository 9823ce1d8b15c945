"""Task-level cost Ψgen / Ψinf / Ψtrain of one task on an ordered device list (HetRL B.3).

A task with parallel degrees (tp, pp, dp) is cut into tp·pp·dp tasklets l_{i,j,k} (replica i, stage j,
shard k). Level 5 (tasklet → GPU) is a deterministic locality-first mapping of the group's devices,
which the caller orders by region, zone and node: ``replica`` layout keeps each model replica on
consecutive GPUs (TP and PP local, DP spans), ``stage`` layout keeps each stage's DP peers together
(DP local, PP spans — better when gradients are bigger than activations). Load balancing (§4.2)
splits the batch across replicas by replica speed and the layers across stages by stage speed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from . import costmodel as cm
from .memory import kv_bytes_per_seq, model_memory, working_memory
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
    pp = len(speeds)
    key = (nl, tuple(speeds), balance)
    hit = _SPLIT_CACHE.get(key)
    if hit is not None:
        return list(hit)
    out = _split_layers(nl, speeds, balance)
    _SPLIT_CACHE[key] = tuple(out)
    return out


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
    order = sorted(range(dp), key=lambda i: raw[i] - int(raw[i]), reverse=True)
    i = 0
    while rest > 0:
        out[order[i % dp]] += 1
        rest -= 1
        i += 1
    while rest < 0:  # the max(1, ...) floor overshot: take from the largest shares
        j = max(range(dp), key=lambda x: out[x])
        out[j] -= 1
        rest += 1
    return out


class Geometry:
    """Where each tasklet of a (tp, pp, dp, layout) config sits in an ordered device list.

    Shared by every task evaluated on the same GPUs and config: per (replica, stage) cell its
    slowest GPU and the device classes its TP ring and PP hop use.
    """

    def __init__(self, devices: Sequence[int], cfg: ParallelConfig, ctx: PlanContext):
        topo = ctx.topo
        cls = topo.class_of
        tp, pp, dp = cfg.tp, cfg.pp, cfg.dp
        self.cells = [[[cfg.position(i, j, k) for k in range(tp)] for j in range(pp)] for i in range(dp)]
        self.stage_of = np.zeros(len(devices), dtype=int)
        self.replica_of = np.zeros(len(devices), dtype=int)
        for i in range(dp):
            for j in range(pp):
                for p in self.cells[i][j]:
                    self.stage_of[p], self.replica_of[p] = j, i
        dev = list(devices)
        self.tflops = [[min(ctx.tflops[dev[p]] for p in self.cells[i][j]) for j in range(pp)] for i in range(dp)]
        self.hbm = [[min(ctx.hbm[dev[p]] for p in self.cells[i][j]) for j in range(pp)] for i in range(dp)]
        self.cell_classes = [[tuple(sorted(int(cls[dev[p]]) for p in self.cells[i][j])) for j in range(pp)]
                             for i in range(dp)]
        self.dp_classes = [[tuple(sorted(int(cls[dev[self.cells[i][j][k]]]) for i in range(dp)))
                            for k in range(tp)] for j in range(pp)]
        self.replica_classes = [tuple(sorted(c for row in self.cell_classes[i] for c in row)) for i in range(dp)]
        self.replica_key = [tuple(self.cell_classes[i]) for i in range(dp)]
        self.usable = np.array([ctx.usable[d] for d in dev])
        self.stage_tflops = [min(self.tflops[i][j] for i in range(dp)) for j in range(pp)]
        self.stage_hbm = [min(self.hbm[i][j] for i in range(dp)) for j in range(pp)]
        self.tflops_arr = np.array(self.tflops)  # (dp, pp)
        self.hbm_arr = np.array(self.hbm)  # (dp, pp)
        self.topo = topo
        self._rings: dict[float, np.ndarray] = {}
        self._hops: dict[float, np.ndarray] = {}

    def tp_rings(self, volume: float) -> np.ndarray:
        """(dp, pp): each cell's TP ring cost for ``volume`` bytes per neighbour."""
        r = self._rings.get(volume)
        if r is None:
            r = self._rings[volume] = np.array([[ring_of(self.topo, c, volume) for c in row]
                                                for row in self.cell_classes])
        return r

    def pp_hops(self, volume: float) -> np.ndarray:
        """(dp, pp): hop cost from each stage to the next (0 for the last stage)."""
        h = self._hops.get(volume)
        if h is None:
            h = self._hops[volume] = np.array(
                [[hop_of(self.topo, row[j], row[j + 1], volume) if j + 1 < len(row) else 0.0
                  for j in range(len(row))] for row in self.cell_classes])
        return h


def signature(devices: Sequence[int], ctx: PlanContext) -> tuple[int, ...]:
    """The devices' classes in order: estimates depend on nothing else."""
    cls = ctx.class_of
    return tuple(cls[d] for d in devices)


def geometry(devices: tuple[int, ...], cfg: ParallelConfig, ctx: PlanContext,
             sig: tuple[int, ...] | None = None) -> Geometry:
    key = ("geom", sig or signature(devices, ctx), cfg)
    g = ctx.cache.get(key)
    if g is None:
        g = ctx.cache[key] = Geometry(devices, cfg, ctx)
    return g


def estimate_task(task: TaskSpec, devices: Sequence[int], cfg: ParallelConfig, ctx: PlanContext,
                  resident: np.ndarray | None = None, sig: tuple[int, ...] | None = None) -> TaskEstimate:
    """Ψ for ``task`` on ``devices`` (ordered) with ``cfg``; ``resident`` = other models' bytes per position."""
    devices = tuple(devices)
    if cfg.size != len(devices):
        raise ValueError(f"{task.name}: tp*pp*dp={cfg.size} but {len(devices)} devices")
    wf = ctx.wf
    geo = geometry(devices, cfg, ctx, sig)
    res = np.zeros(len(devices)) if resident is None else resident
    speeds = geo.stage_hbm if task.kind == "gen" else geo.stage_tflops
    layers = split_layers(task.model.layers, speeds, ctx.load_balance)
    even = split_samples(wf.samples, [1.0] * cfg.dp)
    est = _evaluate(task, geo, cfg, layers, even, ctx, res)
    times = est.terms.pop("_replica_times", None)
    if ctx.load_balance and cfg.dp > 1 and est.feasible and len(set(times)) > 1:
        rates = [n / t if t > 0 else 1.0 for n, t in zip(even, times)]
        balanced = split_samples(wf.samples, rates)
        if balanced != even:
            est2 = _evaluate(task, geo, cfg, layers, balanced, ctx, res)
            est2.terms.pop("_replica_times", None)
            if est2.feasible and est2.time <= est.time:
                est = est2
    est.devices = devices
    return est


def _evaluate(task: TaskSpec, geo: Geometry, cfg: ParallelConfig, layers: list[int], samples: list[int],
              ctx: PlanContext, resident: np.ndarray) -> TaskEstimate:
    topo, c = ctx.topo, ctx.wf.cfg
    m = task.model
    gen, train = task.kind == "gen", task.kind == "train"
    tp, pp, dp = cfg.tp, cfg.pp, cfg.dp
    mbs = c.micro_batch_size
    seq = c.seq_in if gen else c.seq_in + c.seq_out  # generation: prefill only (seq_out = 0), B.2
    full_seq = c.seq_in + c.seq_out
    lf = cm.layer_flops(seq, m.hidden, m.intermediate)
    comp_mult = 3 if train else 1
    tp_mult = (6 if c.recompute else 4) if train else 2
    pp_mult = 2 if train else 1
    est = TaskEstimate(task.name, cfg, (), 0.0, True, layers=layers, samples=samples)
    nms = [max(1, math.ceil(n / mbs)) if n > 0 else 0 for n in samples]

    # 1) memory: resident model per stage, working set per cell; generation's decode batch from what is left
    mm = np.array([model_memory(task, layers[j], j == 0, j == pp - 1, tp, dp) for j in range(pp)])
    model_pos = mm[geo.stage_of]
    if gen:
        kv = np.array([kv_bytes_per_seq(task, layers[j], tp, full_seq) for j in range(pp)])
        kv_pos = kv[geo.stage_of]
        free = geo.usable - resident - model_pos
        cap_pos = np.floor(np.maximum(free, 0.0) / kv_pos)
        cap = np.full(dp, float(c.max_decode_batch))
        np.minimum.at(cap, geo.replica_of, cap_pos)
        dbs = [int(min(cap[i], samples[i])) if samples[i] > 0 else 1 for i in range(dp)]
        est.dbs = dbs
        work_pos = np.array(dbs, dtype=float)[geo.replica_of] * kv_pos
        if min(dbs) < 1:
            est.feasible, est.reason = False, f"{task.name}: no room for KV cache"
    else:
        wm = np.array([[working_memory(task, layers[j], j == pp - 1, tp, mbs, full_seq,
                                       max(1, min(nms[i], pp - j)), c.recompute) for j in range(pp)]
                       for i in range(dp)])
        work_pos = wm[geo.replica_of, geo.stage_of]
        over = model_pos + work_pos + resident - geo.usable
        if (over > 0).any():
            est.feasible = False
            est.reason = f"{task.name} overflows a GPU by {over.max() / 1e9:.1f} GB"
    est.model_mem, est.working_mem = model_pos, work_pos
    if not est.feasible:
        est.time = cm.INF
        return est

    # 2) per (replica, stage) cell, as (dp, pp) arrays: computation, TP ring, PP hop, HBM-bound decoding
    n = np.array(samples, dtype=float)[:, None]  # (dp, 1)
    nm = np.array(nms, dtype=float)[:, None]  # (dp, 1)
    nl = np.array(layers, dtype=float)[None, :]  # (1, pp)
    comp = comp_mult * n * nl * lf / (geo.tflops_arr * tp)
    tpc = tp_mult * nm * nl * geo.tp_rings(cm.cv_tp(mbs, seq, m.hidden, tp)) if tp > 1 else 0.0 * comp
    ppc = pp_mult * nm * geo.pp_hops(cm.cv_pp(mbs, seq, m.hidden)) if pp > 1 else 0.0 * comp
    hbm = 0.0 * comp
    if gen:
        # A replica holds dbs sequences; with pp stages they decode as pp micro-batches of dbs/pp, so
        # each stage reads its weights once per dbs/pp tokens (dbs_d of B.2 is this per-stage batch).
        b = np.array(dbs, dtype=float)[:, None] / pp  # (dp, 1)
        hbm = c.seq_out * n * cm.B_BF16 * nl * m.layer_params / (b * geo.hbm_arr * tp)
        steps = c.seq_out * n / b  # decode micro-batch passes: each pays TP all-reduces and a PP hop
        for bi in sorted(set(dbs)):  # communication volume depends on the decode batch
            rows = np.array(dbs) == bi
            if tp > 1:
                tpc[rows] += (steps * 2 * nl * geo.tp_rings(cm.cv_tp(bi / pp, 1, m.hidden, tp)))[rows]
            if pp > 1:
                ppc[rows] += (steps * geo.pp_hops(cm.cv_pp(bi / pp, 1, m.hidden)))[rows]
    stage_cost = comp + tpc + ppc + hbm
    stage_cost[n[:, 0] == 0] = 0.0
    replica = stage_cost.max(axis=1)
    bub_max = 0.0
    if train and pp > 1:
        bubble = np.where(nm[:, 0] > 0, stage_cost[:, 1:].sum(axis=1) / np.maximum(nm[:, 0], 1), 0.0)
        bub_max = float(bubble.max())
        replica = replica + bubble
    replica_times = replica.tolist()
    comp_max, tp_max = float(comp.max()), float(np.max(tpc))
    pp_max, hbm_max = float(np.max(ppc)), float(np.max(hbm))

    # 3) training: gradient all-reduce over each (stage, shard)'s DP ring
    dp_cost = 0.0
    if train and dp > 1:
        for j in range(pp):
            vol = cm.cv_dp(layers[j], m.layer_params, dp, tp)
            for k in range(tp):
                dp_cost = max(dp_cost, ring_of(topo, geo.dp_classes[j][k], vol))
    est.time = max(replica_times) + dp_cost
    est.terms = {"comp": comp_max, "tp": tp_max, "pp": pp_max, "hbm": hbm_max, "bubble": bub_max,
                 "dp": dp_cost, "_replica_times": replica_times}

    # 4) weight movement: all-gather within each actor-training replica (resharding / sync), and the
    #    broadcast within each generation replica
    if (train and task.role == "actor") or gen:
        vol = cm.cv_allgather(m.layers, m.layer_params, tp * pp)
        per_rep = [ring_of(topo, geo.replica_classes[i], vol) if tp * pp > 1 else 0.0 for i in range(dp)]
        if train:
            est.reshard, est.allgather_min = max(per_rep), min(per_rep)
        else:
            est.broadcast_max = max(per_rep)
    return est


def ring_of(topo: Topology, classes: tuple[int, ...], volume: float) -> float:
    """ring_cost on a sorted tuple of device classes (one entry per GPU), cached."""
    cache = topo.__dict__.setdefault("_ring_cls_cache", {})
    key = (classes, volume)
    v = cache.get(key)
    if v is None:
        v = cache[key] = cm.ring_cost_classes(topo, classes, volume)
    return v


def hop_of(topo: Topology, a: tuple[int, ...], b: tuple[int, ...], volume: float) -> float:
    """Cheapest single GPU-to-GPU transfer between two cells, cached."""
    cache = topo.__dict__.setdefault("_hop_cache", {})
    key = (a, b, volume)
    v = cache.get(key)
    if v is None:
        v = cache[key] = min(cm.link_time(topo, x, y, volume) for x in set(a) for y in set(b))
    return v
