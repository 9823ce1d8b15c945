"""HetRL's hybrid scheduler: nested successive halving over levels 1–2, an evolutionary algorithm below
(HetRL §3.2, §3.4, Algorithm 1).

The five levels: (1) task grouping — a set partition of the tasks; (2) coarse GPU grouping — how many
GPUs each task group gets (multiples of ``granularity``); (3) medium assignment — which GPUs, held as a
(groups × device classes) count matrix; (4) intra-model parallelisation — enumerated per task in
:mod:`rollart.planner.groupplan`; (5) tasklet mapping — the locality-first layouts of
:mod:`rollart.planner.taskcost`. SHA treats (1) and (2) as arms; the EA evolves (3) for each arm with a
mutation that moves faster GPUs into training groups and a swap-based local search for locality.
"""
from __future__ import annotations

import math
import random
import time
import zlib
from dataclasses import dataclass
from itertools import combinations
from typing import Iterator, Sequence

import numpy as np

from rollart.config import ConfigError

from .costmodel import INF
from .plan import Plan, PlanningError, devices_from_counts, evaluate_groups
from .search_pool import GroupingPool
from .taskcost import PlanContext


@dataclass
class SearchConfig:
    """Budget and knobs of the SHA-EA search."""

    budget: int = 4000
    """Search budget B in plan evaluations (each EA step evaluates one plan). As in Algorithm 1 it is split
    over the SHA rounds; every live arm still gets at least one evaluation per round."""
    time_limit_s: float = 55.0
    """Wall-clock cap; the best plan so far is returned when it is reached."""
    granularity: int = 0
    """Level-2 group sizes are multiples of this many GPUs; 0 = the smallest divisor of N that keeps the
    number of arms <= min(max_arms, budget/4)."""
    max_arms: int = 3000
    """Upper bound on (task grouping, GPU grouping) arms when granularity is chosen automatically."""
    population: int = 6
    """EA population per arm."""
    p_upgrade: float = 0.5
    """Probability that a mutation moves a faster GPU into a training group."""
    seed: int = 0
    workers: int = 0
    """Processes that evolve the task groupings of a round side by side; 0 = one per CPU this process may
    use, 1 = all in this process. Each arm draws from its own random stream, so a search that the budget
    (not the time cap) ends returns the same plan whatever the number of workers."""

    def __post_init__(self) -> None:
        if self.budget < 1 or self.population < 2 or self.time_limit_s <= 0:
            raise ConfigError("budget >= 1, population >= 2 and time_limit_s > 0 are required")
        if self.workers < 0:
            raise ConfigError(f"workers={self.workers}: give 0 (one per CPU) or a positive number of processes")
        if not 0 <= self.p_upgrade <= 1:
            raise ConfigError("p_upgrade must be in [0, 1]")


# --- levels 1 and 2 -------------------------------------------------------------------------------
def task_groupings(names: Sequence[str]) -> list[tuple[tuple[str, ...], ...]]:
    """All set partitions of the tasks (Bell number many), each group in workflow order."""
    def rec(items: list[str]) -> Iterator[list[list[str]]]:
        if not items:
            yield []
            return
        head, rest = items[0], items[1:]
        for part in rec(rest):
            yield [[head]] + part
            for i in range(len(part)):
                yield part[:i] + [[head] + part[i]] + part[i + 1:]
    order = {n: i for i, n in enumerate(names)}
    out = []
    for p in rec(list(names)):
        groups = tuple(sorted((tuple(sorted(g, key=order.get)) for g in p), key=lambda g: order[g[0]]))
        out.append(groups)
    return out


def compositions(units: int, parts: int) -> list[tuple[int, ...]]:
    """Ordered ways to write ``units`` as ``parts`` positive integers (C(units-1, parts-1) many)."""
    out = []
    for cuts in combinations(range(1, units), parts - 1):
        bounds = (0,) + cuts + (units,)
        out.append(tuple(bounds[i + 1] - bounds[i] for i in range(parts)))
    return out


def choose_granularity(n: int, groupings: Sequence[tuple], max_arms: int) -> int:
    for g in range(1, n + 1):
        if n % g:
            continue
        arms = sum(math.comb(n // g - 1, len(tg) - 1) for tg in groupings if len(tg) <= n // g)
        if arms <= max_arms:
            return g
    return n


def level2_arms(n: int, tg: tuple, granularity: int) -> list[tuple[int, ...]]:
    units = n // granularity
    if len(tg) > units:
        return []
    return [tuple(u * granularity for u in c) for c in compositions(units, len(tg))]


# --- level 3: the evolutionary algorithm ------------------------------------------------------------
class Arm:
    """EA state for one (task grouping, GPU grouping) pair, with its own random stream (seeded by the search's
    seed and the arm itself), so that its evolution does not depend on which process runs it or when."""

    def __init__(self, tg: tuple, sizes: tuple[int, ...], seed: int):
        self.tg, self.sizes = tg, sizes
        self.rng = random.Random(zlib.crc32(repr((seed, tg, sizes)).encode()))
        self.population: list[tuple[float, np.ndarray]] = []
        self.best_cost = INF
        self.best_counts: np.ndarray | None = None
        self.evals = 0


class SHAEA:
    """Nested successive halving (levels 1–2) with an EA (level 3) per arm."""

    def __init__(self, ctx: PlanContext, cfg: SearchConfig | None = None):
        self.ctx, self.cfg = ctx, cfg or SearchConfig()
        self.topo, self.wf = ctx.topo, ctx.wf
        self.rng = random.Random(self.cfg.seed)
        topo = self.topo
        k = len(topo.classes)
        self.capacity = topo.class_capacity.astype(int)
        self.tflops = topo.class_tflops
        self.locality = np.zeros((k, k))
        for a in range(k):
            da = topo.devices[topo.classes[a][0]]
            for b in range(k):
                db = topo.devices[topo.classes[b][0]]
                self.locality[a, b] = (3.0 if da.node == db.node else 2.0 if da.zone == db.zone
                                       else 1.0 if da.region == db.region else 0.0)
        self.train_names = set(self.wf.training_tasks)
        self.evaluated = 0
        self.deadline = math.inf
        self.t0 = time.monotonic()
        self.best_cost = INF
        self.best_found_s = 0.0
        """Seconds from the start of :meth:`run` to the first evaluation reaching the lowest cost so far."""
        self.cap_hit = False
        self.workers = 1
        """Processes the running search spreads its task groupings over (set by :meth:`run`)."""

    # cost of one individual
    def cost(self, arm: Arm, counts: np.ndarray) -> float:
        self.evaluated += 1
        arm.evals += 1
        plan = evaluate_groups(arm.tg, devices_from_counts(self.topo, counts), self.ctx)
        c = plan.step_time if plan is not None else INF
        if c < arm.best_cost:
            arm.best_cost, arm.best_counts = c, counts.copy()
        if c < self.best_cost:  # strictly lower: a later tie does not move the time to the best plan
            self.best_cost, self.best_found_s = c, time.monotonic() - self.t0
        return c

    def random_individual(self, arm: Arm, seeded: bool) -> np.ndarray:
        order = [c for c in range(len(self.capacity)) for _ in range(self.capacity[c])]
        if seeded:  # training groups first, on the fastest GPUs, kept together by locality order
            order.sort(key=lambda c: -self.tflops[c])
            groups = sorted(range(len(arm.tg)), key=lambda g: not (set(arm.tg[g]) & self.train_names))
        else:
            arm.rng.shuffle(order)
            groups = list(range(len(arm.tg)))
        counts = np.zeros((len(arm.tg), len(self.capacity)), dtype=int)
        pos = 0
        for g in groups:
            for c in order[pos:pos + arm.sizes[g]]:
                counts[g, c] += 1
            pos += arm.sizes[g]
        return counts

    def mutate(self, arm: Arm, parent: np.ndarray) -> np.ndarray:
        x = parent.copy()
        n_groups = x.shape[0]
        if n_groups < 2:
            return x
        train_groups = [g for g in range(n_groups) if set(arm.tg[g]) & self.train_names]
        if train_groups and arm.rng.random() < self.cfg.p_upgrade:
            gt = arm.rng.choice(train_groups)
            slow = [a for a in range(x.shape[1]) if x[gt, a] > 0]
            a = arm.rng.choice(slow)
            faster = [(g, b) for g in range(n_groups) if g not in train_groups
                      for b in range(x.shape[1]) if x[g, b] > 0 and self.tflops[b] > self.tflops[a]]
            if faster:
                g, b = arm.rng.choice(faster)
                x[gt, a] -= 1; x[gt, b] += 1; x[g, b] -= 1; x[g, a] += 1
                return x
        for _ in range(arm.rng.randint(1, 3)):
            g1, g2 = arm.rng.sample(range(n_groups), 2)
            a_opts = [a for a in range(x.shape[1]) if x[g1, a] > 0]
            b_opts = [b for b in range(x.shape[1]) if x[g2, b] > 0]
            a, b = arm.rng.choice(a_opts), arm.rng.choice(b_opts)
            if a != b:  # swap one GPU, or (half the time) a block of them, e.g. a whole node
                k = 1 if arm.rng.random() < 0.5 else arm.rng.randint(1, min(x[g1, a], x[g2, b]))
                x[g1, a] -= k; x[g1, b] += k; x[g2, b] -= k; x[g2, a] += k
        return x

    def local_search(self, x: np.ndarray) -> np.ndarray:
        """Greedy cross-group swaps that raise the node/zone/region locality score; sizes stay fixed."""
        x = x.copy()
        W = self.locality
        diag = np.diag(W)
        for _ in range(4 * x.shape[0] * x.shape[1]):
            y = x @ W  # (groups, classes): locality of one more GPU of class c with group g
            # gain of group g giving one GPU of class a and taking one of class b
            d = -y[:, :, None] + y[:, None, :] + diag[None, :, None] - W[None, :, :]
            d = np.where(x[:, :, None] > 0, d, -np.inf)
            total = d[:, None, :, :] + np.transpose(d, (0, 2, 1))[None, :, :, :]
            g = x.shape[0]
            total[np.arange(g), np.arange(g)] = -np.inf
            best = np.unravel_index(np.argmax(total), total.shape)
            if not total[best] > 1e-9:
                break
            g1, g2, a, b = best
            x[g1, a] -= 1; x[g1, b] += 1; x[g2, b] -= 1; x[g2, a] += 1
        return x

    def ea_steps(self, arm: Arm, steps: int) -> None:
        for _ in range(steps):
            if time.monotonic() > self.deadline:
                self.cap_hit = True
                return
            if len(arm.population) < self.cfg.population:
                o = self.random_individual(arm, seeded=not arm.population)
            else:
                a, b = arm.rng.sample(arm.population, 2)
                o = self.mutate(arm, min(a, b, key=lambda p: p[0])[1])
            # swap-based local search for locality; it is kept only if it lowers the cost (locality is a
            # proxy: memory can make a spread-out group the better one). The genotype o keeps the
            # phenotype's fitness and is not rewritten (Baldwinian).
            phenotype = self.local_search(o)
            c = self.cost(arm, phenotype)
            if not np.array_equal(phenotype, o):
                c = min(c, self.cost(arm, o))
            if len(arm.population) < self.cfg.population:
                arm.population.append((c, o))
            else:
                worst = max(range(len(arm.population)), key=lambda i: arm.population[i][0])
                if c < arm.population[worst][0]:
                    arm.population[worst] = (c, o)

    def first_evaluations(self, n_arms: int) -> int:
        """How much of an arm's initial population to evaluate before judging it: as far as the budget —
        and, once this process's evaluation rate is known, the time limit over every worker — allows (half of
        it at most)."""
        affordable = float(self.cfg.budget)
        elapsed = time.monotonic() - self.t0
        if self.evaluated >= 20 and elapsed > 0:
            affordable = min(affordable, self.evaluated / elapsed * self.cfg.time_limit_s * self.workers)
        elif self.cfg.time_limit_s < 30:
            return 1
        return max(1, min(self.cfg.population, int(affordable // (2 * n_arms))))

    def grouping_rounds(self, arms: list[Arm], b_m: int, n_arms: int) -> list[Arm]:
        """Level 2 for one task grouping: successive halving over its GPU groupings with budget ``b_m``; the
        better half of its arms goes on."""
        live = arms
        rounds2 = max(1, math.ceil(math.log2(max(2, len(live)))))
        for _ in range(rounds2):
            b_mn = max(1, b_m // (len(live) * rounds2))
            for arm in live:
                self.ea_steps(arm, max(b_mn, self.first_evaluations(n_arms) - len(arm.population)))
            live = _best_half(live)
        return _best_half(arms)

    # Algorithm 1
    def run(self, task_grouping_filter=None) -> Plan:
        t0 = self.t0 = time.monotonic()
        self.deadline = t0 + self.cfg.time_limit_s
        self.best_cost, self.best_found_s, self.cap_hit = INF, 0.0, False
        n = len(self.topo.devices)
        tgs = task_groupings([t.name for t in self.wf.tasks])
        if task_grouping_filter is not None:
            tgs = [tg for tg in tgs if task_grouping_filter(tg)]
        # at least ~4 evaluations per arm: coarser level-2 sizes when the budget is small
        g = self.cfg.granularity or choose_granularity(n, tgs, min(self.cfg.max_arms, max(1, self.cfg.budget // 4)))
        if n % g:
            raise ConfigError(f"granularity {g} does not divide the {n} GPUs")
        arms = {tg: [Arm(tg, s, self.cfg.seed) for s in level2_arms(n, tg, g)] for tg in tgs}
        arms = {tg: a for tg, a in arms.items() if a}
        B = self.cfg.budget
        live_tgs = list(arms)
        n_arms = sum(len(a) for a in arms.values())
        rounds1 = max(1, math.ceil(math.log2(max(2, len(live_tgs)))))
        with GroupingPool(self, self.cfg.workers, len(live_tgs)) as workers:
            for r1 in range(rounds1):
                b_m = B // (len(live_tgs) * rounds1)
                # random order: if the time limit cuts a round short, the arms it reached are a fair sample
                order = self.rng.sample(live_tgs, len(live_tgs))
                arms.update(workers.grouping_rounds([(tg, arms[tg]) for tg in order], b_m, n_arms))
                live_tgs = sorted(live_tgs, key=lambda t: min(a.best_cost for a in arms[t]))
                live_tgs = live_tgs[:max(1, math.ceil(len(live_tgs) / 2))]
                if time.monotonic() > self.deadline:
                    self.cap_hit = self.cap_hit or r1 < rounds1 - 1  # rounds were left undone
                    break
        best_arm = min((a for t in arms for a in arms[t]), key=lambda a: a.best_cost)
        if best_arm.best_counts is None:
            raise PlanningError(infeasible_reason(self.ctx))
        plan = evaluate_groups(best_arm.tg, devices_from_counts(self.topo, best_arm.best_counts), self.ctx)
        plan.planner, plan.search_s, plan.evaluated = "sha-ea", time.monotonic() - t0, self.evaluated
        plan.best_found_s, plan.cap_hit = self.best_found_s, self.cap_hit
        return plan


def _best_half(arms: list[Arm]) -> list[Arm]:
    ranked = sorted(arms, key=lambda a: a.best_cost)
    return ranked[:max(1, math.ceil(len(ranked) / 2))]


def infeasible_reason(ctx: PlanContext) -> str:
    """Explain why nothing fits: compare the smallest footprint with all usable memory."""
    wf, topo = ctx.wf, ctx.topo
    usable = float(np.sum(topo.mem)) * wf.cfg.usable_memory_fraction
    need = 0.0
    for t in wf.tasks:
        per_param = 4 + 12 / len(topo.devices) if t.kind == "train" else 2
        need += t.model.params * per_param
    if need > usable:
        return (f"no plan fits in memory: the workflow's models need at least {need / 1e9:.0f} GB "
                f"(weights, gradients, optimizer states) but all {len(topo.devices)} GPUs offer "
                f"{usable / 1e9:.0f} GB usable; add GPUs or use a smaller model")
    return ("no plan satisfies memory (C3) or connectivity: every candidate either overflowed a GPU "
            "or needed a link that does not exist; add GPUs or links, shorten sequences, or lower "
            "max_decode_batch/micro_batch_size")
