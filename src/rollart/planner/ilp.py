"""Exact scheduling by integer linear programming (HetRL §3.5), with scipy's HiGHS ``milp``.

What it optimises, exactly: the same objective over the same search space as SHA-EA.
  * Level 1 (task grouping) is enumerated: one MILP per set partition of the tasks.
  * Levels 2–3 are the decision variables: x[g, v] = 1 if group g receives the device-class count
    vector v (its size a multiple of the level-2 granularity; every GPU used once: for each class c,
    sum over g, v of v_c · x[g, v] = capacity_c).
  * Levels 4–5 for a group are the deterministic group planner (:func:`plan_group` on the
    locality-ordered devices of v), whose per-task costs become the coefficients — i.e. the cost
    model is *enumerated* per (task set, v), not approximated.
  * The end-to-end cost (:func:`rollart.planner.stepcost.end_to_end`) is linear in those costs up to
    max terms, linearised exactly with epigraph variables: Φ over groups (M ≥ S_g), async
    max(generation side, rest) (T ≥ both), and C_p2p = min over class pairs (a, b) reachable by the
    training and generation groups (u_ab ≤ [train uses a], u_ab ≤ [gen uses b], Σ u = 1).
Since every max appears with a positive coefficient in a minimisation, the MILP optimum equals the
optimum of the cost model over this space; the returned plan is re-evaluated with the cost model and
the two numbers are checked to agree.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from . import costmodel as cm
from .groupplan import plan_group
from .plan import Plan, PlanningError, devices_from_counts, evaluate_groups
from .search import choose_granularity, infeasible_reason, task_groupings
from .taskcost import PlanContext


MAX_VECTORS = 20000


@dataclass
class ILPResult:
    plan: Plan
    objective: float
    solve_s: float
    precompute_s: float
    milps: int
    variables: int


def _vectors(capacity: np.ndarray, granularity: int) -> list[tuple[int, ...]]:
    out = []
    for v in itertools.product(*(range(int(c) + 1) for c in capacity)):
        s = sum(v)
        if s > 0 and s % granularity == 0:
            out.append(v)
    return out


class ILPScheduler:
    def __init__(self, ctx: PlanContext, granularity: int = 0, max_arms: int = 3000,
                 time_limit_s: float = 180.0):
        self.ctx = ctx
        self.topo, self.wf = ctx.topo, ctx.wf
        n = len(self.topo.devices)
        self.tgs = task_groupings([t.name for t in self.wf.tasks])
        self.granularity = granularity or choose_granularity(n, self.tgs, max_arms)
        self.time_limit_s = time_limit_s
        self.capacity = self.topo.class_capacity.astype(int)
        space = int(np.prod(self.capacity + 1))
        if space > MAX_VECTORS:
            raise PlanningError(f"the ILP enumerates {space:,} device-count vectors per group here; it is "
                                f"meant for small settings (<= ~24 GPUs in a few classes): use sha-ea")
        self.vectors = _vectors(self.capacity, self.granularity)
        self._group: dict = {}
        actor = self.wf.by_name["actor_gen"].model
        self.p2p_vol = cm.cv_p2p(actor.layers, actor.layer_params)

    def group_data(self, names: tuple[str, ...], v: tuple[int, ...]):
        key = (names, v)
        if key not in self._group:
            devs = devices_from_counts(self.topo, np.array([v]))[0]
            g = plan_group(names, devs, self.ctx)
            self._group[key] = g if g.feasible else None
        return self._group[key]

    def solve(self) -> ILPResult:
        """Branch and bound over level 1: LP-relaxation bounds order the task groupings and prune
        those whose bound cannot beat the incumbent; the rest are solved to optimality."""
        t0 = time.monotonic()
        deadline = t0 + self.time_limit_s
        pre = time.monotonic()
        models = []
        for tg in self.tgs:
            cands = [[(v, self.group_data(names, v)) for v in self.vectors] for names in tg]
            cands = [[(v, g) for v, g in c if g is not None] for c in cands]
            if all(cands):
                models.append((tg, cands, self._build(tg, cands)))
        pre = time.monotonic() - pre
        t_solve = time.monotonic()
        bounds = []
        for tg, cands, model in models:
            lp = self._run(model, relax=True, time_limit=max(1.0, deadline - time.monotonic()))
            if lp is not None:
                bounds.append((lp.fun, tg, cands, model))
        bounds.sort(key=lambda b: b[0])
        best = None
        milps = nvars = 0
        for lb, tg, cands, model in bounds:
            if best is not None and lb >= best[0] * (1 - 1e-9):
                break  # sorted: no later grouping can beat the incumbent either
            if time.monotonic() > deadline:
                raise PlanningError(f"ILP did not finish in {self.time_limit_s:.0f} s "
                                    f"({milps} of {len(bounds)} task groupings solved)")
            res = self._run(model, relax=False, time_limit=max(1.0, deadline - time.monotonic()),
                            cutoff=None if best is None else best[0])
            milps += 1
            nvars += model["nvar"]
            if res is None:
                continue
            if best is None or res.fun < best[0] - 1e-9:
                best = (float(res.fun), tg, self._choice(res.x, cands, model))
        solve = time.monotonic() - t_solve
        if best is None:
            raise PlanningError(infeasible_reason(self.ctx))
        obj, tg, choice = best
        plan = evaluate_groups(tg, devices_from_counts(self.topo, np.array(choice)), self.ctx, planner="ilp")
        if plan is None or abs(plan.step_time - obj) > 1e-6 * max(1.0, obj):
            raise AssertionError(f"ILP objective {obj} != cost model {plan and plan.step_time}")
        plan.search_s = time.monotonic() - t0
        plan.evaluated = milps
        return ILPResult(plan, obj, solve, pre, milps, nvars)

    def _run(self, model, relax: bool, time_limit: float, cutoff: float | None = None):
        integrality = np.zeros(model["nvar"])
        if not relax:
            integrality[:model["nx"]] = 1
        cons = [model["cons"]]
        if cutoff is not None:  # only solutions that beat the incumbent are of interest
            cons.append(LinearConstraint(model["cost"][None, :], -np.inf, cutoff * (1 - 1e-9)))
        res = milp(model["cost"], integrality=integrality, bounds=model["bounds"], constraints=cons,
                   options={"time_limit": time_limit, "mip_rel_gap": 0.0, "presolve": True})
        if res.x is None or res.status != 0:
            return None
        return res

    @staticmethod
    def _choice(x, cands, model):
        out = []
        for gi, off in enumerate(model["offs"]):
            j = int(np.argmax(x[off:off + len(cands[gi])]))
            out.append(cands[gi][j][0])
        return out

    def _build(self, tg, cands) -> dict:
        wf, eta = self.wf, self.wf.cfg.eta
        k = len(self.capacity)
        gi_of = {n: gi for gi, names in enumerate(tg) for n in names}
        # variable layout: x[g, v] ..., then M_inf, M_train, T (async), u[a, b]
        offs, nx = [], 0
        for c in cands:
            offs.append(nx)
            nx += len(c)
        i_minf, i_mtr, i_t = nx, nx + 1, nx + 2
        g_gen, g_tr = gi_of["actor_gen"], gi_of["actor_train"]
        split = g_gen != g_tr
        pairs = [(a, b) for a in range(k) for b in range(k)] if split else []
        i_u = nx + 3
        nvar = i_u + len(pairs)
        cost = np.zeros(nvar)
        rows: list[tuple[dict[int, float], float, float]] = []

        def x_coeffs(gi, fn) -> dict[int, float]:
            return {offs[gi] + j: fn(v, g) for j, (v, g) in enumerate(cands[gi])}

        def add(vec: dict[int, float], scale: float = 1.0):
            for i, c in vec.items():
                cost[i] += scale * c

        # assignment: one vector per group, every GPU of every class used once
        for gi in range(len(tg)):
            rows.append(({offs[gi] + j: 1.0 for j in range(len(cands[gi]))}, 1.0, 1.0))
        for c in range(k):
            row = {}
            for gi in range(len(tg)):
                for j, (v, _) in enumerate(cands[gi]):
                    if v[c]:
                        row[offs[gi] + j] = float(v[c])
            rows.append((row, float(self.capacity[c]), float(self.capacity[c])))

        def phi_terms(names, m_idx) -> tuple[dict[int, float], float]:
            """Linear form of Φ over groups: η·M + (1 − η)·Σ S_g, with M ≥ S_g."""
            lin: dict[int, float] = {}
            groups = sorted({gi_of[n] for n in names})
            for gi in groups:
                s = x_coeffs(gi, lambda v, g, gi=gi: sum(g.tasks[n].time for n in names if n in g.tasks))
                row = dict(s)
                row[m_idx] = -1.0
                rows.append((row, -np.inf, 0.0))  # S_g - M <= 0
                for i, c in s.items():
                    lin[i] = lin.get(i, 0.0) + (1.0 - eta) * c
            lin[m_idx] = lin.get(m_idx, 0.0) + eta
            return lin, 0.0

        phi_inf, _ = phi_terms(wf.inference_tasks, i_minf)
        phi_tr, _ = phi_terms(wf.training_tasks, i_mtr)
        gen_time = x_coeffs(g_gen, lambda v, g: g.tasks["actor_gen"].time)
        if wf.cfg.mode == "sync":
            add(gen_time)
            add(phi_inf)
            add(phi_tr)
        else:
            gen_side = x_coeffs(g_gen, lambda v, g: sum(e.time for e in g.tasks.values()))
            rows.append(({**gen_side, i_t: -1.0}, -np.inf, 0.0))
            rest = {}
            for d in (phi_inf, phi_tr):
                for i, c in d.items():
                    rest[i] = rest.get(i, 0.0) + c
            rest[i_t] = rest.get(i_t, 0.0) - 1.0
            rows.append((rest, -np.inf, 0.0))
            cost[i_t] += 1.0
        # weight update: resharding when colocated, else all-gather + broadcast + cheapest p2p path
        if not split:
            add(x_coeffs(g_gen, lambda v, g: g.tasks["actor_train"].reshard))
        else:
            add(x_coeffs(g_tr, lambda v, g: g.tasks["actor_train"].allgather_min))
            add(x_coeffs(g_gen, lambda v, g: g.tasks["actor_gen"].broadcast_max))
            rows.append(({i_u + p: 1.0 for p in range(len(pairs))}, 1.0, 1.0))
            for p, (a, b) in enumerate(pairs):
                t = cm.link_time(self.topo, a, b, self.p2p_vol)
                if t == cm.INF or (a == b and self.capacity[a] < 2):
                    rows.append(({i_u + p: 1.0}, 0.0, 0.0))
                    continue
                cost[i_u + p] = t
                uses_a = {offs[g_tr] + j: -1.0 for j, (v, _) in enumerate(cands[g_tr]) if v[a]}
                uses_b = {offs[g_gen] + j: -1.0 for j, (v, _) in enumerate(cands[g_gen]) if v[b]}
                rows.append(({i_u + p: 1.0, **uses_a}, -np.inf, 0.0))
                rows.append(({i_u + p: 1.0, **uses_b}, -np.inf, 0.0))
        ri, ci, vals = [], [], []
        lo, hi = np.zeros(len(rows)), np.zeros(len(rows))
        for r, (vec, l, h) in enumerate(rows):
            ri.extend([r] * len(vec))
            ci.extend(vec.keys())
            vals.extend(vec.values())
            lo[r], hi[r] = l, h
        A = coo_matrix((vals, (ri, ci)), shape=(len(rows), nvar))
        upper = np.full(nvar, np.inf)
        upper[:nx] = 1.0
        upper[i_u:] = 1.0
        return {"cost": cost, "cons": LinearConstraint(A.tocsr(), lo, hi), "nvar": nvar, "nx": nx,
                "offs": offs, "bounds": Bounds(np.zeros(nvar), upper)}
