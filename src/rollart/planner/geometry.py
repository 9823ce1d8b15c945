"""Where a task's tasklets sit on an ordered device list, and what estimates derive from that once per
planning run (HetRL B.3, level 5).

A (tp, pp, dp) config's :class:`Layout` (positions of replicas, stages and shards, independent of the GPUs); per
GPU classes and config its :class:`Geometry`; per replica of GPUs its :class:`Replica` (per-stage speeds, TP ring
and PP hop costs), interned and numbered in :class:`Replicas`; per split of the step's samples its
:class:`Batches`. :mod:`rollart.planner.taskcost` computes the estimates from these.
"""
from __future__ import annotations

import functools
import math
from operator import itemgetter
from typing import TYPE_CHECKING, Sequence

import numpy as np

from . import costmodel as cm
from .topology import Topology

if TYPE_CHECKING:
    from .taskcost import ParallelConfig, PlanContext


class Batches:
    """One split of the step's samples over the replicas, interned per planning run (:func:`batches`):
    equal splits are one object, and what the estimates derive from a split is computed once."""

    def __init__(self, samples: Sequence[int], mbs: int):
        self.samples = tuple(samples)
        self.array = np.array(samples, dtype=float)
        self.micro_batches = tuple(max(1, math.ceil(n / mbs)) if n > 0 else 0 for n in samples)
        self.empty = 0 in self.samples
        """Some replica gets no sample."""
        self.zeros = (0,) * len(samples)
        """Decode batches of a task that does not generate (a replica cost key needs one)."""
        self._in_flight: dict[int, tuple[int, ...]] = {}

    def in_flight(self, pp: int) -> tuple[int, ...]:
        """Per replica, micro-batches that can be in flight in a pp-stage pipeline (working memory)."""
        hit = self._in_flight.get(pp)
        if hit is None:
            hit = self._in_flight[pp] = tuple(min(n, pp) for n in self.micro_batches)
        return hit


def batches(samples: Sequence[int], ctx: PlanContext) -> Batches:
    key = ("batches", tuple(samples))
    return memo(ctx, key, lambda: Batches(key[1], ctx.wf.cfg.micro_batch_size))


def memo(ctx: PlanContext, key: tuple, make):
    """ctx.cache[key], computed by ``make()`` on first use."""
    hit = ctx.cache.get(key)
    if hit is None:
        hit = ctx.cache[key] = make()
    return hit


def frozen(a: np.ndarray) -> np.ndarray:
    """A cached array that estimates share: read-only, so that no caller can change another's numbers."""
    a.flags.writeable = False
    return a


class Layout:
    """Where each tasklet of a (tp, pp, dp, layout) config sits, as positions of the device list.

    Independent of the GPUs, so built once per config (:func:`layout`)."""

    def __init__(self, cfg: ParallelConfig):
        tp, pp, dp = cfg.tp, cfg.pp, cfg.dp
        self.replica_positions = [[cfg.position(i, j, k) for j in range(pp) for k in range(tp)]
                                  for i in range(dp)]
        """Per replica, its positions stage by stage, TP shard within stage (the 'cell order')."""
        stage_of, replica_of = np.zeros(cfg.size, dtype=int), np.zeros(cfg.size, dtype=int)
        for i, pos in enumerate(self.replica_positions):
            for q, p in enumerate(pos):
                stage_of[p], replica_of[p] = q // tp, i
        self.stage_of, self.replica_of = frozen(stage_of), frozen(replica_of)
        size, positions = tp * pp, self.replica_positions
        contiguous = all(pos == list(range(i * size, (i + 1) * size)) for i, pos in enumerate(positions))
        self._slices = [slice(i * size, (i + 1) * size) for i in range(dp)] if contiguous else None
        self._getters = None if contiguous else [itemgetter(*pos) for pos in positions]
        self._by_replica = None if contiguous else frozen(np.array([p for pos in positions for p in pos]))
        self._dp = dp

    def replica_rows(self, x: np.ndarray) -> np.ndarray:
        """(dp, tp·pp): per-position values ``x`` with one row per replica, in cell order."""
        return (x if self._by_replica is None else x[self._by_replica]).reshape(self._dp, -1)

    def per_replica(self, seq: tuple) -> tuple[tuple, ...]:
        """``seq`` (one entry per position) cut into each replica's entries, in cell order."""
        if self._slices is not None:  # 'replica' layout: a replica is a slice
            return tuple([seq[s] for s in self._slices])
        # 'stage' layout with pp, dp > 1: a replica has several positions, so itemgetter gives a tuple
        return tuple([get(seq) for get in self._getters])


@functools.cache
def layout(cfg: ParallelConfig) -> Layout:
    return Layout(cfg)


class Replica:
    """One model replica's GPUs under (tp, pp): per stage its slowest GPU and the device classes its TP
    ring and PP hop use.

    Interned and numbered per planning run (:class:`Replicas`), so that costs are cached per replica
    across all the GPU groups and configs it occurs in."""

    __slots__ = ("classes", "cell_classes", "tflops", "hbm", "tflops_tp", "ring_classes", "topo", "_rings",
                 "_hops")

    def __init__(self, devices: Sequence[int], tp: int, pp: int, ctx: PlanContext):
        classes = [ctx.class_of[d] for d in devices]
        tflops = [ctx.tflops[d] for d in devices]
        hbm = [ctx.hbm[d] for d in devices]
        cells = [slice(j * tp, (j + 1) * tp) for j in range(pp)]
        self.classes = tuple(classes)
        self.cell_classes = tuple(tuple(sorted(classes[s])) for s in cells)
        self.tflops = tuple(min(tflops[s]) for s in cells)
        self.hbm = tuple(min(hbm[s]) for s in cells)
        self.tflops_tp = tuple(f * tp for f in self.tflops)
        """Computation's denominator per stage: the slowest GPU's FLOP/s times tp."""
        self.ring_classes = tuple(sorted(classes))
        """The ring through all the replica's GPUs (weight all-gather / broadcast)."""
        self.topo = ctx.topo
        self._rings: dict[float, tuple[float, ...]] = {}
        self._hops: dict[float, tuple[float, ...]] = {}

    def tp_rings(self, volume: float) -> tuple[float, ...]:
        """Per stage, its TP ring's cost for ``volume`` bytes per neighbour."""
        r = self._rings.get(volume)
        if r is None:
            r = self._rings[volume] = tuple(rings_of(self.topo, self.cell_classes, volume))
        return r

    def pp_hops(self, volume: float) -> tuple[float, ...]:
        """Per stage, the hop cost to the next stage (0 for the last)."""
        h = self._hops.get(volume)
        if h is None:
            cc = self.cell_classes
            hops = [hop_of(self.topo, cc[j], cc[j + 1], volume) for j in range(len(cc) - 1)]
            h = self._hops[volume] = (*hops, 0.0)
        return h


class Replicas:
    """A planning run's replicas under one (tp, pp), interned by their classes in cell order and numbered:
    the number is a cheap cache key."""

    def __init__(self, ctx: PlanContext, tp: int, pp: int):
        self.ctx, self.tp, self.pp = ctx, tp, pp
        self.number: dict[tuple[int, ...], int] = {}
        self.items: list[Replica] = []

    def add(self, classes: tuple[int, ...], devices: Sequence[int]) -> int:
        """Number the replica on ``devices`` (cell order), whose classes are ``classes``."""
        self.items.append(Replica(devices, self.tp, self.pp, self.ctx))
        n = self.number[classes] = len(self.items) - 1
        return n


def replicas(ctx: PlanContext, tp: int, pp: int) -> Replicas:
    return memo(ctx, ("replicas", tp, pp), lambda: Replicas(ctx, tp, pp))


class Geometry:
    """An ordered device list under one config: its replicas, and the per-stage speeds that split layers.

    Shared by every task evaluated on the same GPU classes and config (:func:`geometry`)."""

    def __init__(self, devices: Sequence[int], cfg: ParallelConfig, ctx: PlanContext,
                 sig: tuple[int, ...]):
        lay = layout(cfg)
        self.layout = lay
        known = replicas(ctx, cfg.tp, cfg.pp)
        ids = []
        for i, classes in enumerate(lay.per_replica(sig)):
            n = known.number.get(classes)
            if n is None:
                n = known.add(classes, [devices[p] for p in lay.replica_positions[i]])
            ids.append(n)
        self.replica_ids = tuple(ids)
        """Each replica's number in :class:`Replicas`: the key of its costs."""
        self.replicas = tuple([known.items[n] for n in ids])
        self.ring_classes = tuple([r.ring_classes for r in self.replicas])
        self.stage_tflops = tuple(min(col) for col in zip(*(r.tflops for r in self.replicas)))
        self.stage_hbm = tuple(min(col) for col in zip(*(r.hbm for r in self.replicas)))
        self.usable = np.array([ctx.usable[d] for d in devices])
        self.tp = cfg.tp
        self._topo = ctx.topo
        self._dp_costs: dict[tuple[float, ...], float] = {}
        self._weight_rings: dict[float, tuple[float, float]] = {}

    def dp_cost(self, volumes: tuple[float, ...]) -> float:
        """Slowest gradient all-reduce: over stages j and TP shards k, the ring through shard k of stage j
        in every replica, for ``volumes[j]`` bytes per neighbour."""
        cost = self._dp_costs.get(volumes)
        if cost is None:
            tp, cost = self.tp, 0.0
            for j, vol in enumerate(volumes):
                shards = [tuple(sorted(r.classes[j * tp + k] for r in self.replicas)) for k in range(tp)]
                cost = max(cost, max(rings_of(self._topo, shards, vol)))
            self._dp_costs[volumes] = cost
        return cost

    def weight_rings(self, volume: float) -> tuple[float, float]:
        """Slowest and fastest ring through a whole replica's GPUs (weight all-gather / broadcast)."""
        r = self._weight_rings.get(volume)
        if r is None:
            rings = rings_of(self._topo, self.ring_classes, volume)
            r = self._weight_rings[volume] = (max(rings), min(rings))
        return r


def signature(devices: Sequence[int], ctx: PlanContext) -> tuple[int, ...]:
    """The devices' classes in order: estimates depend on nothing else."""
    cls = ctx.class_of
    return tuple(cls[d] for d in devices)


def geometry(devices: tuple[int, ...], cfg: ParallelConfig, ctx: PlanContext,
             sig: tuple[int, ...] | None = None) -> Geometry:
    sig = sig or signature(devices, ctx)
    return memo(ctx, ("geom", sig, cfg.key), lambda: Geometry(devices, cfg, ctx, sig))


def rings_of(topo: Topology, classes: Sequence[tuple[int, ...]], volume: float) -> list[float]:
    """ring_cost on each sorted tuple of device classes (one entry per GPU), cached."""
    cache = topo.__dict__.setdefault("_ring_cls_cache", {})
    out = []
    for cl in classes:
        v = cache.get((cl, volume))
        if v is None:
            v = cache[(cl, volume)] = cm.ring_cost_classes(topo, cl, volume)
        out.append(v)
    return out


def hop_of(topo: Topology, a: tuple[int, ...], b: tuple[int, ...], volume: float) -> float:
    """Cheapest single GPU-to-GPU transfer between two cells, cached."""
    cache = topo.__dict__.setdefault("_hop_cache", {})
    key = (a, b, volume)
    v = cache.get(key)
    if v is None:
        v = cache[key] = min(cm.link_time(topo, x, y, volume) for x in set(a) for y in set(b))
    return v
