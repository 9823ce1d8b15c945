"""HetRL planner: SHA-EA vs the exact ILP, search time at 64 GPUs, and estimated throughput vs baselines.

    python tools/bench/planner.py            # full: 24-GPU ILP settings, 64-GPU searches of ~50 s (~25 min)
    python tools/bench/planner.py --quick    # < 60 s: a 12-GPU ILP setting and ~1 s searches

All step times are SIMULATED: they are the HetRL cost model's estimates (HetRL App. B), the same
model for every planner — the homogeneous (verl-like) planner picks its plan assuming identical GPUs
and links, then that plan is costed on the real topology, as the paper evaluates verl.
  1. ILP vs SHA-EA on <= 24 GPUs, same objective and search space      -> sha_ea_gap_pct, ilp_s
  2. SHA-EA wall time on 64 GPUs (24 A100, 24 L40S, 16 L4)              -> search_s_64
  3. 4 network scenarios x PPO/GRPO x sync/async, Qwen3-8B, 384 prompts x 8 responses, 1024+1024 tokens:
     HetRL (SHA-EA) vs homogeneous (verl-like) vs two-group (StreamRL-like)
                                                    -> mean_speedup_vs_homogeneous, mean_speedup_vs_two_group
The last line holds the headline key=value pairs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rollart.planner.baselines import homogeneous_plan, two_group_plan  # noqa: E402
from rollart.planner.ilp import ILPScheduler  # noqa: E402
from rollart.planner.plan import PlanningError  # noqa: E402
from rollart.planner.scenarios import SCENARIOS, scenario  # noqa: E402
from rollart.planner.search import SHAEA, SearchConfig  # noqa: E402
from rollart.planner.taskcost import PlanContext  # noqa: E402
from rollart.planner.workflow import Workflow, WorkflowConfig  # noqa: E402

WORKLOADS = [("ppo", "sync"), ("ppo", "async"), ("grpo", "sync"), ("grpo", "async")]


def ilp_vs_sha(quick: bool) -> list[dict]:
    if quick:
        settings = [("multi-country", [("A100", 4), ("L40S", 4), ("L4", 4)], 4, "grpo", "sync")]
        budget, limit = 1500, 20.0
    else:
        mix = [("A100", 8), ("L40S", 8), ("L4", 8)]
        settings = [("single-region", mix, 8, "ppo", "sync"), ("multi-country", mix, 8, "ppo", "sync"),
                    ("multi-country", mix, 8, "grpo", "async"), ("multi-continent", mix, 8, "ppo", "async")]
        budget, limit = 20000, 60.0
    rows = []
    for name, mix, per_node, algo, mode in settings:
        topo = scenario(name, mix, gpus_per_node=per_node)
        wf = Workflow(WorkflowConfig(algorithm=algo, mode=mode))
        t0, c0 = time.monotonic(), time.process_time()
        ilp = ILPScheduler(PlanContext(topo, wf), time_limit_s=900.0)  # report, don't abort, when slow
        res = ilp.solve()
        ilp_s, ilp_cpu = time.monotonic() - t0, time.process_time() - c0
        c0 = time.process_time()
        sha = SHAEA(PlanContext(topo, wf), SearchConfig(budget=budget, time_limit_s=limit,
                                                         granularity=ilp.granularity)).run()
        sha_cpu = time.process_time() - c0
        gap = max(0.0, 100.0 * (sha.step_time / res.objective - 1.0))  # >= 0 up to rounding: the ILP is exact
        rows.append({"setting": f"{name} {len(topo.devices)} GPUs {algo}-{mode}", "ilp": res.objective,
                     "ilp_s": ilp_s, "ilp_cpu": ilp_cpu, "ilp_solve_s": res.solve_s, "milps": res.milps,
                     "sha": sha.step_time, "sha_s": sha.search_s, "sha_cpu": sha_cpu, "gap": gap,
                     "granularity": ilp.granularity})
        print(f"[ilp] {rows[-1]['setting']} (level-2 sizes in steps of {ilp.granularity}): ILP "
              f"{res.objective:.2f} s/step in {ilp_s:.1f} s wall / {ilp_cpu:.1f} s CPU (cost-model enumeration "
              f"{res.precompute_s:.1f} s + {res.milps} MILPs {res.solve_s:.1f} s); SHA-EA {sha.step_time:.2f} "
              f"in {sha.search_s:.1f} s wall / {sha_cpu:.1f} s CPU, {sha.evaluated} plans -> gap {gap:.3f}%",
              flush=True)
    return rows


def scenarios(quick: bool) -> list[dict]:
    budget, limit = (400, 1.0) if quick else (6000, 50.0)
    rows = []
    for name in SCENARIOS:
        topo = scenario(name)
        for algo, mode in WORKLOADS:
            wf = Workflow(WorkflowConfig(algorithm=algo, mode=mode))
            ctx = PlanContext(topo, wf)
            c0 = time.process_time()
            het = SHAEA(ctx, SearchConfig(budget=budget, time_limit_s=limit)).run()
            het_cpu = time.process_time() - c0
            homo = homogeneous_plan(ctx)
            try:
                two, relaxed = two_group_plan(ctx), False
            except PlanningError:  # one-node regions are too small for StreamRL's single-region pools
                two, relaxed = two_group_plan(ctx, strict=False), True
            row = {"scenario": name, "workload": f"{algo.upper()}-{mode}", "het": het.step_time,
                   "homo": homo.step_time, "two": two.step_time, "two_relaxed": relaxed,
                   "search_s": het.search_s, "search_cpu": het_cpu, "evals": het.evaluated,
                   "tok_het": het.tokens_per_s, "tok_homo": homo.tokens_per_s, "tok_two": two.tokens_per_s}
            rows.append(row)
            print(f"[e2e] {name:20s} {row['workload']:11s} HetRL {het.step_time:7.1f} s  verl-like "
                  f"{homo.step_time:7.1f} s (x{homo.step_time / het.step_time:.2f})  StreamRL-like"
                  f"{'*' if relaxed else ''} {two.step_time:7.1f} s (x{two.step_time / het.step_time:.2f})  "
                  f"search {het.search_s:.1f} s wall / {het_cpu:.1f} s CPU, {het.evaluated} plans", flush=True)
    return rows


def plot(ilp_rows: list[dict], rows: list[dict], path: str) -> None:
    fig, axes = plt.subplots(1, len(SCENARIOS) + 1, figsize=(22, 4.2))
    for ax, name in zip(axes, SCENARIOS):
        sub = [r for r in rows if r["scenario"] == name]
        xs = range(len(sub))
        w = 0.27
        ax.bar([x - w for x in xs], [r["tok_het"] / 1e3 for r in sub], w, label="HetRL (SHA-EA)")
        ax.bar(list(xs), [r["tok_two"] / 1e3 for r in sub], w, label="StreamRL-like two-group")
        ax.bar([x + w for x in xs], [r["tok_homo"] / 1e3 for r in sub], w, label="verl-like homogeneous")
        ax.set_xticks(list(xs), [r["workload"] for r in sub], fontsize=8)
        ax.set_title(f"{name} (simulated)")
        ax.set_ylabel("k tokens/s (cost model)")
    axes[0].legend(fontsize=7)
    ax = axes[-1]
    ax.bar(range(len(ilp_rows)), [r["gap"] for r in ilp_rows])
    ax.set_xticks(range(len(ilp_rows)), [r["setting"].replace(" GPUs", "\nGPUs") for r in ilp_rows], fontsize=6)
    ax.axhline(1.0, color="red", ls="--", lw=1, label="1% target")
    ax.set_ylabel("SHA-EA gap to ILP optimum, %")
    ax.set_title("SHA-EA vs ILP (simulated)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    t0 = time.monotonic()
    ilp_rows = ilp_vs_sha(args.quick)
    rows = scenarios(args.quick)
    plot(ilp_rows, rows, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots", "planner.png"))
    vs_homo = [r["homo"] / r["het"] for r in rows]
    vs_two = [r["two"] / r["het"] for r in rows]
    print(f"total {time.monotonic() - t0:.1f} s wall, {time.process_time():.1f} s CPU; "
          "* = StreamRL-like pools relaxed to span regions (one node per region is too small)")
    print(f"sha_ea_gap_pct={max(r['gap'] for r in ilp_rows):.3f} "
          f"ilp_s={max(r['ilp_s'] for r in ilp_rows):.1f} ilp_cpu_s={max(r['ilp_cpu'] for r in ilp_rows):.1f} "
          f"search_s_64={max(r['search_s'] for r in rows):.1f} "
          f"mean_speedup_vs_homogeneous={statistics.mean(vs_homo):.2f} "
          f"max_speedup_vs_homogeneous={max(vs_homo):.2f} "
          f"mean_speedup_vs_two_group={statistics.mean(vs_two):.2f} "
          f"min_speedup_vs_two_group={min(vs_two):.2f}")


if __name__ == "__main__":
    main()
