"""HetRL's analytical cost model (HetRL App. B), component by component.

Component terms (B.2): computation, TP/PP/DP communication over ring graphs, pipeline bubbles,
HBM-bound decoding, resharding and weight synchronisation. Task level (B.3): Ψgen, Ψinf, Ψtrain,
built in :mod:`rollart.planner.taskcost`. End to end (B.4): Φ with the parallelism coefficient η here,
sync/async PPO/GRPO over a plan's GPU groups in :mod:`rollart.planner.stepcost`.

Where we go beyond the appendix, it is said at the spot: (1) a ring's bottleneck is found on device
classes (exact, see :func:`ring_cost`); (2) generation also pays per-decode-step TP all-reduce and PP
hop latency (the appendix sets seq_out = 0 for generation's communication, which would make TP across
regions look free for decoding); (3) Φ is applied to *GPU groups*: tasks sharing a group run one
after another, different groups run with parallelism η; (4) GRPO's training term is actor training
(the appendix writes C^6, the critic, which GRPO does not have); (5) in decoding, dbs_d is read as the
per-stage micro-batch: a replica holding dbs sequences in its KV cache decodes them as pp micro-batches
of dbs/pp, so pipeline stages do not multiply decoding throughput; (6) links missing from the topology
are relayed through other GPUs (see :mod:`rollart.planner.topology`).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

from .topology import Topology

B_BF16 = 2
B_FP32 = 4
INF = math.inf


# --- B.2 volumes and FLOPs ----------------------------------------------------------------------
def layer_flops(seq: int, h1: int, h2: int) -> float:
    """Forward FLOPs of one transformer layer for one sample: qkvo projections + attention + MLP."""
    return 2 * 4 * seq * h1 ** 2 + 2 * 2 * seq ** 2 * h1 + 2 * 3 * seq * h1 * h2


def cv_tp(mbs: int, seq: int, h1: int, tp: int) -> float:
    """Bytes each GPU sends to its ring neighbour per TP all-reduce."""
    return B_BF16 * mbs * seq * h1 * 2 * (tp - 1) / tp


def cv_pp(mbs: int, seq: int, h1: int) -> float:
    """Activation bytes from one pipeline stage to the next per micro-batch."""
    return B_BF16 * mbs * seq * h1


def cv_dp(nl_stage: int, layer_params: int, dp: int, tp: int) -> float:
    """Gradient bytes each GPU sends to its ring neighbour per DP all-reduce."""
    return B_BF16 * nl_stage * layer_params * 2 * (dp - 1) / (dp * tp)


def cv_allgather(nl: int, layer_params: int, group: int) -> float:
    """Bytes each GPU sends per all-gather of a full model over ``group`` GPUs (resharding/sync)."""
    return B_BF16 * nl * layer_params * (group - 1) / group


def cv_p2p(nl: int, layer_params: int) -> float:
    """A full model's weights, sent point to point from a training GPU to a generation GPU."""
    return B_BF16 * nl * layer_params


# --- links and rings ----------------------------------------------------------------------------
def link_time(topo: Topology, a: int, b: int, volume: float) -> float:
    """α + volume/β between device classes a and b (a == b: two GPUs of one class)."""
    bw = topo.class_bandwidth[a, b]
    if bw <= 0:
        return INF
    return float(topo.class_latency[a, b]) + volume / float(bw)


def ring_cost(topo: Topology, devices: Iterable[int], volume: float) -> float:
    """min over rings r through ``devices`` of max over edges e in r of (α_e + volume/β_e).

    Devices of one class are interchangeable, so this works on the class multigraph: the cheapest
    ring's bottleneck is at least the bottleneck of a minimum spanning tree over the classes (drop one
    edge of any ring and a spanning tree is left), and an Euler tour of that tree is a ring whenever
    every class has at least as many GPUs as its tree degree — then the bound is met exactly. Otherwise
    a Held–Karp search over classes (one visit each) gives the best ring. Edges inside a class count
    whenever it holds ≥2 of the devices (its GPUs are visited consecutively).
    """
    return ring_cost_classes(topo, tuple(sorted(int(topo.class_of[d]) for d in devices)), volume)


def ring_cost_classes(topo: Topology, classes: Sequence[int], volume: float) -> float:
    """:func:`ring_cost` given the devices' classes (one entry per device)."""
    counts = Counter(classes)
    if len(classes) <= 1:
        return 0.0
    key = (tuple(sorted(counts.items())), volume)
    cache = topo.__dict__.setdefault("_ring_cache", {})
    hit = cache.get(key)
    if hit is not None:
        return hit
    cls = sorted(counts)
    intra = max((link_time(topo, a, a, volume) for a in cls if counts[a] >= 2), default=0.0)
    if len(cls) == 1:
        result = intra
    else:
        result = max(intra, _class_ring_bottleneck(topo, cls, counts, volume))
    cache[key] = result
    return result


def _class_ring_bottleneck(topo: Topology, cls: list[int], counts: Counter, volume: float) -> float:
    k = len(cls)
    w = [[link_time(topo, a, b, volume) if a != b else 0.0 for b in cls] for a in cls]
    # Kruskal: bottleneck spanning tree
    parent = list(range(k))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    edges = sorted((w[i][j], i, j) for i in range(k) for j in range(i + 1, k))
    deg = [0] * k
    bottleneck, used = 0.0, 0
    for c, i, j in edges:
        if c == INF:
            break
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[ri] = rj
            deg[i] += 1
            deg[j] += 1
            bottleneck = max(bottleneck, c)
            used += 1
    if used < k - 1:
        return INF  # some classes cannot reach each other at all
    if all(deg[i] <= counts[cls[i]] for i in range(k)) or k == 2:
        return bottleneck
    return _held_karp_by_order(topo, cls, edges) if k <= 12 else INF


def _held_karp_by_order(topo: Topology, cls: list[int], edges: list[tuple[float, int, int]]) -> float:
    """:func:`_held_karp_bottleneck` for ``edges`` sorted by cost. The bottleneck is one edge's cost and
    only the edges' order decides which, an order that changes with the volume only where two links'
    α + v/β cross: so the search runs once per order, on ranks, and the cost is read off ``edges``."""
    order = tuple((i, j) for _, i, j in edges)
    cache = topo.__dict__.setdefault("_ring_order_cache", {})
    key = (tuple(cls), order)
    r = cache.get(key)
    if r is None:
        rank = [[0] * len(cls) for _ in cls]
        for pos, (i, j) in enumerate(order):
            rank[i][j] = rank[j][i] = pos
        r = cache[key] = _held_karp_bottleneck(rank)
    return edges[int(r)][0]


def _held_karp_bottleneck(w: list[list[float]]) -> float:
    """Minimum-bottleneck Hamiltonian cycle (each class once) by dynamic programming over subsets."""
    k = len(w)
    full = 1 << k
    best = [[INF] * k for _ in range(full)]
    best[1][0] = 0.0
    for mask in range(1, full, 2):
        row = best[mask]
        for last in range(k):
            cur = row[last]
            if cur == INF:
                continue
            for nxt in range(1, k):
                if mask & (1 << nxt):
                    continue
                val = max(cur, w[last][nxt])
                m2 = mask | (1 << nxt)
                if val < best[m2][nxt]:
                    best[m2][nxt] = val
    return min(max(best[full - 1][j], w[j][0]) for j in range(1, k))


def p2p_min(topo: Topology, src: Iterable[int], dst: Iterable[int], volume: float) -> float:
    """min over d in src, d' in dst of α + volume/β (source and destination are different GPUs)."""
    a_counts = Counter(int(topo.class_of[d]) for d in src)
    b_counts = Counter(int(topo.class_of[d]) for d in dst)
    best = INF
    for a in a_counts:
        for b in b_counts:
            best = min(best, link_time(topo, a, b, volume))
    return best


# --- B.4 end to end ----------------------------------------------------------------------------
def phi(costs_by_group: Sequence[float], eta: float) -> float:
    """Φ = η·max + (1 − η)·sum  (= max + (1 − η)(sum − max)), over the groups' costs."""
    costs = [c for c in costs_by_group if c > 0]
    if not costs:
        return 0.0
    top = max(costs)
    return top + (1.0 - eta) * (sum(costs) - top)
