"""ARL-Tangram action-level scheduling and serverless reward: simulated at paper scale + real runs here.

    python tools/bench/actions.py            # full: paper-scale simulations + real runs (~3 min)
    python tools/bench/actions.py --quick    # QUICK SCALE: the coding simulations on 1 node of 256 cores
                                             # with batch 51 / 256 (paper batch / 5), short real runs, the
                                             # torch-free rule reward in the real reward run

SIMULATED (real scheduler code, simulated time; each decision timed in real wall time). Workloads follow
the papers; each parameter's source is in its config docstring (rollart.sim.coding_actions / mopd_actions /
actions_baselines):
  1. AI-coding trace (ARL-Tangram §6.1: 1280 cores over 5 nodes, batch 1280; actions ~47% of a
     trajectory, Fig. 3c; tool:test time ~1:9 from §6.2's 9.0x / 2.8x / 4.3x and Table 1; test-run
     elasticity calibrated to Fig. 8a's 3.1x at batch 128): mean per-trajectory ACT, action-level
     elastic vs per-trajectory static allocation (a pod per trajectory requested at its start with
     §6.1's 0.5-CPU request and 4-CPU limit: single-process commands, CFS-shared cores) -> act_speedup
     (its parts: static/elastic on tool calls -> act_env_gain, paper 9.0x; on test runs
     -> act_reward_gain, paper 2.8x; and vs a hard 0.5-CPU quota per pod: a pessimistic reading, NOT
     the paper's pod                                                          -> act_speedup_pod05)
  2. average ACT (over all actions: tools and test runs, the sum Algorithm 1 minimises, Eq. 2; the
     same ratio as §6.3's total ACT per trajectory), elastic vs fixed DoP with every test run's speed-up
     curve and core cap PROFILED from a real suite on this machine (actions_real.py --profile; DoP 4 and
     16 become the cap), worst over fixed DoP 1 and the cap                  -> elastic_vs_fixed
     (vs the cap -> elastic_vs_dopcap; vs DoP 1 -> elastic_vs_dop1); and, as before, with Amdahl curves
     over DoP 1..32 vs fixed DoP 4 (batch 256) and 16 (batch 1280), §6.4 / Fig. 9 -> elastic_vs_fixed_amdahl
     (the same over the reward test runs only                               -> elastic_vs_fixed_tests;
     share of elastic test runs started on <= 4 cores                        -> low_dop_test_frac;
     elastic queueing / execution time, paper Table 1: 1.5 %                 -> queue_pct)
     Full mode also logs Fig. 8a's batch and capacity sweeps, a sweep of the test runs' elasticity, two
     other readings of the paper (Fig. 3c's 47 % as the baseline's share; §6.4's trace replayed open
     loop) and two scheduler diagnostics (depth 32; a DoP cap of 8) -- see BENCHMARKS.md "actions".
  3. scheduler decision time / action execution time, both real: the generated suites run through the CPU
     manager below (Table 1's ratio)                                          -> overhead_pct
     (the same decisions over the simulated execution seconds above: ~0.001 %, a report)
                                                                              -> sim_overhead_pct
  4. MOPD-like: 10 services, batch 1024 (§6.1 "MOPD+Search", Fig. 8b right); per trace seed 0-4 the
     fewest pooled GPUs whose mean ACT <= the dedicated baseline (4 GPUs per service, 40 GPUs);
     median over seeds                                                         -> gpu_units_frac
     (dedicated / pooled mean ACT on the same 40 GPUs, Fig. 8b left: 3.4x)  -> gpu_ded_vs_pool40
  5. rollart Fig. 12: reward-GPU utilisation and rollout time, dedicated vs serverless
REAL (this machine): generated pytest suites through the CPU manager (cgroup-pinned processes,
pytest -n DoP) vs static per-trajectory cores (-> real_suite_act_speedup, overhead_pct); and the
serverless endpoint vs a dedicated worker. A real grpo_swe rollout is benchmarked by actions_real.py alone.
The last line holds the headline key=value pairs.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling halves below
from actions_real import PROFILE, real_cpu, real_gpu, real_reward  # noqa: E402
from actions_simulated import (GPU_SEEDS, k8s_overhead_for, log, low_dop_share, queue_pct,  # noqa: E402
                               sim_coding, sim_gpu, sim_offload, sim_profiled)

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots", "actions.png")


# -- report ----------------------------------------------------------------------------------------
def plot(coding: dict, gpu: dict, offload: dict, real_cpu_res: dict, real_rw: dict, quick: bool) -> None:
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    runs = coding[1280]
    names = [n for n in ("static_pod05", "static", "dop4", "dop16", "elastic", "spread") if n in runs]
    tool = [sum(runs[n].acts["tool"]) / len(runs[n].traj_act) for n in names]
    test = [sum(runs[n].acts["reward_test"]) / len(runs[n].traj_act) for n in names]
    ax[0, 0].bar(names, tool, label="tool actions")
    ax[0, 0].bar(names, test, bottom=tool, label="reward test run")
    ax[0, 0].set_title("SIMULATED AI coding: ACT per trajectory, " +
                       ("QUICK SCALE 256 cores, batch 256" if quick else "1280 cores, batch 1280"), fontsize=10)
    ax[0, 0].set_ylabel("seconds")
    ax[0, 0].legend()
    width = 0.25
    groups = [(b, kind) for kind in (None, "reward_test") for b in (256, 1280)]
    for k, n in enumerate(["dop4", "dop16", "elastic"]):
        ax[0, 1].bar([x + k * width for x in range(len(groups))],
                     [coding[b][n].mean(kind) if n in coding[b] else 0.0 for b, kind in groups],
                     width, label=n)
    ax[0, 1].set_xticks([x + width for x in range(len(groups))],
                        [f"batch {b}\n{'per trajectory' if kind is None else 'test runs'}"
                         for b, kind in groups])
    ax[0, 1].set_ylabel("seconds")
    ax[0, 1].set_title("SIMULATED elastic vs fixed DoP: mean ACT", fontsize=10)
    ax[0, 1].legend()
    seed0 = gpu["seeds"][GPU_SEEDS[0]]
    gs = sorted(g for g, r in seed0["pool"].items() if not r.aborted)
    ax[1, 0].plot(gs, [seed0["pool"][g].mean() for g in gs], "o-", label=f"pooled (EOE, elastic), seed {GPU_SEEDS[0]}")
    ax[1, 0].axhline(seed0["dedicated"].mean(), color="r", ls="--", label=f"dedicated ({gpu['base']} GPUs)")
    ax[1, 0].set_yscale("log")
    ax[1, 0].set_xlabel("GPUs")
    ax[1, 0].set_title("SIMULATED MOPD-like 10 services, batch 1024: mean ACT\n"
                       "fewest GPUs at dedicated ACT per seed: " +
                       ", ".join(str(r["best"]) for r in gpu["seeds"].values()))
    ax[1, 0].legend()
    labels = ["sim dedicated", "sim serverless", "real dedicated", "real serverless"]
    utils = [offload["dedicated"]["reward_utilisation"], offload["serverless"]["reward_utilisation"],
             real_rw["dedicated"]["utilisation"], real_rw["serverless"]["utilisation"]]
    ax[1, 1].bar(labels, [100 * u for u in utils], color=["C3", "C2", "C3", "C2"])
    ax[1, 1].set_ylabel("reward worker utilisation %")
    ax[1, 1].set_title("Reward: dedicated vs serverless (sim: rollart Fig. 12 setup)")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=90)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="< 60 s")
    a = p.parse_args()
    t0 = time.monotonic()
    if not os.path.exists(PROFILE):
        sys.exit(f"{PROFILE} is missing: run python tools/bench/actions_real.py --profile first (profiles the "
                 "real suites' speed-up on 1 and 2 cores, ~5 min)")
    profiled = sim_profiled(a.quick, PROFILE)
    coding = sim_coding(a.quick)
    gpu = sim_gpu(a.quick)
    offload = sim_offload()
    real_cpu_res = asyncio.run(real_cpu(a.quick))
    real_rw = asyncio.run(real_reward(a.quick))
    real_gpu_res = asyncio.run(real_gpu(a.quick))
    plot(coding, gpu, offload, real_cpu_res, real_rw, a.quick)
    c = coding[1280]
    act_speedup = c["static"].mean() / c["elastic"].mean()
    # all actions: the ratio of summed ACTs (same actions on both sides) = ratio of per-trajectory means
    vs4 = coding[256]["dop4"].mean() / coding[256]["elastic"].mean()
    vs16 = coding[1280]["dop16"].mean() / coding[1280]["elastic"].mean()
    vs4_tests = coding[256]["dop4"].mean("reward_test") / coding[256]["elastic"].mean("reward_test")
    vs16_tests = coding[1280]["dop16"].mean("reward_test") / coding[1280]["elastic"].mean("reward_test")
    batch1280 = len(c["elastic"].traj_act)
    log(f"[what-if, not a result] per-action k8s overhead the static baseline would need for 4.3x: "
        f"{k8s_overhead_for(4.3, c, batch1280):.1f}s per action")
    decision = sum(r.decision_seconds for b in (256, 1280) for k, r in coding[b].items() if not k.startswith("static"))
    execution = sum(r.exec_seconds for b in (256, 1280) for k, r in coding[b].items() if not k.startswith("static"))
    ratios = {f"vs {n} @{b}": coding[b][n].mean("reward_test") / coding[b]["elastic"].mean("reward_test")
              for b in (256, 1280) for n in ("dop4", "dop16", "spread") if n in coding[b]}
    log("[summary] simulated reward test-run ACT, elastic " +
        ", ".join(f"{k}: {v:.2f}x" for k, v in ratios.items()) +
        f"; plot {PLOT}; wall {time.monotonic() - t0:.0f}s")
    pairs = {
        "act_speedup": act_speedup,
        "act_env_gain": c["static"].mean("tool") / c["elastic"].mean("tool"),
        "act_reward_gain": c["static"].mean("reward_test") / c["elastic"].mean("reward_test"),
        "act_speedup_pod05": c["static_pod05"].mean() / c["elastic"].mean(),
        # profiled curves of the real suites with their core caps; every fixed DoP (1, and 4/16 = the cap)
        "elastic_vs_fixed": min(profiled["vs_cap"], profiled["vs_dop1"]),
        "elastic_vs_dopcap": profiled["vs_cap"],
        "elastic_vs_dop1": profiled["vs_dop1"],
        "elastic_vs_fixed_amdahl": min(vs4, vs16),
        "elastic_vs_dop4": vs4,
        "elastic_vs_dop16": vs16,
        "elastic_vs_fixed_tests": min(vs4_tests, vs16_tests),
        "elastic_vs_dop4_tests": vs4_tests,
        "elastic_vs_dop16_tests": vs16_tests,
        "low_dop_test_frac": low_dop_share(c["elastic"])[0],
        "queue_pct": queue_pct(c["elastic"]),
        "overhead_pct": real_cpu_res["overhead_pct"],
        "sim_overhead_pct": 100 * decision / execution,
        "gpu_units_frac": gpu["frac"],
        "gpu_ded_vs_pool40": gpu["vs40_1024"],
        "sim_reward_util_dedicated": offload["dedicated"]["reward_utilisation"],
        "sim_reward_util_serverless": offload["serverless"]["reward_utilisation"],
        "sim_rollout_s_dedicated": offload["dedicated"]["rollout_seconds"],
        "sim_rollout_s_serverless": offload["serverless"]["rollout_seconds"],
        # generated suites (actions_real.py alone gives real_act_speedup / real_overhead_pct of a grpo_swe rollout)
        "real_suite_act_speedup": real_cpu_res["static"] / real_cpu_res["elastic"],
        "real_reward_util_dedicated": real_rw["dedicated"]["utilisation"],
        "real_reward_util_serverless": real_rw["serverless"]["utilisation"],
        "real_gpu_hit_rate": real_gpu_res["hits"] / real_gpu_res["requests"],
    }
    print(" ".join(f"{k}={v:.4g}" for k, v in pairs.items()), flush=True)


if __name__ == "__main__":
    main()
