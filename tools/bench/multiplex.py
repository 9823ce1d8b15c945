"""Multiplexing (PlexRL §6.2–6.3, §4.4): GPU-hours of 2-job packing, trace drain time, HRRS vs FCFS.

    python tools/bench/multiplex.py            # full: 120-job trace on 16 groups, 100-step jobs
    python tools/bench/multiplex.py --quick    # < 60 s: 48-job trace on 8 groups

  1. SIMULATED §6.2: GPU-hours per effective training step (§6.2: "total GPU time (training + rollout)
     divided by the number of completed training steps"), two identical jobs with 100-step budgets
     ("Under identical 100-step budgets"), split-async vs packing both jobs' training on one shared pool
     ("rollout uses per-job GPUs while training GPUs form a shared pool that is time-sliced across two
     concurrently active jobs"). Pools per job from §6.1 Tab. 1 ("GPU allocations for all settings are
     listed in Tab. 1"): rollout / training GPUs 7B 2 / 8, 30B 8 / 64, 235B 32 / 96 (our reading of the
     header-less table, argued in ``rollart.sim.multiplex.TABLE1``); phase shapes from the §6.3 table.
     Also at other rollout:training ratios (sensitivity, incl. equal pools).  -> gpu_hours_saved_pct
  2. SIMULATED §6.3: trace replay under Isolated / Pack / Spread / Spread+Backfill: drain time and the CDF
     of normalised queueing delay (wait / isolated duration).            -> drain_vs_isolated
  3. SIMULATED §4.4: HRRS vs FCFS runtime order on the same trace (Spread+Backfill): context switches and
     p99 operation wait.                                                  -> switches_ratio, p99_wait_ratio
  4. LIVE: the real TrainingService (worker process; in-process actor under --quick; tiny model) under interleaved bursts from two jobs,
     HRRS vs FCFS: context switches actually performed.                   -> live_switches_ratio
  5. LIVE on emulated GPUs (tools/bench/plexrl_live.py; SIMULATED timing): two identical FrozenLake jobs alone
     (private trainers) and packed on ONE shared trainer, every role on emulated H800s calibrated from PlexRL's
     7B shape (§6.3: a train step 57.5 of a 289.0 s rollout cycle, a switch 4.43 s), GPU time on Tab. 1's pools.
     -> live_gpu_hours_saved_pct (paper 31.36 for 7B), live_packed_slowdown, live_timing
  6. LIVE on this CPU, the two-job recipe (recipes/multiplex_two_jobs.py: FrozenLake + GuessNumber, tiny model, same
     seeds), run alone (each job with a private inference worker and trainer, one after the other) and with both
     jobs sharing ONE trainer and ONE inference worker, at the real speed of this machine's cores. Device time is
     accounted from the real runs: a private set holds 2 devices (worker + trainer) for its job's run, the shared
     set 2 devices for the shared run; busy seconds (engine steps + weight swaps; trainer operations) are measured
     on the devices too.
     -> cpu_live_saved_pct = 100 (1 - held shared / held private), same steps both ways
     -> cpu_live_packed_slowdown = a job's training seconds per step shared / alone (mean of the two jobs)
     On a machine whose cores the two jobs must also share, packing costs step time: every "device" is the same
     cores. The shared run keeps each job's prefix cache across the worker's weight swaps (the default); the same
     shared run with every swap emptying the cache (job_prefix_cache=false) runs beside it:
     -> cpu_live_saved_pct_drop_cache, same definition.
     Where the shared worker's time went is printed per run: engine steps, swaps, draining toward a swap,
     idle (held, not busy), prompt tokens prefilled vs served from the prefix cache.
The last line holds the headline key=value pairs.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import plexrl_live  # noqa: E402
from rollart.sim.multiplex import (PAPER_SAVED_PCT, SHAPES, gpu_hours_two_jobs, make_trace,  # noqa: E402
                                   replay, table1_pools)

POLICIES = ("isolated", "pack", "spread", "spread+backfill")


def gpu_hours(steps: int) -> tuple[dict, dict]:
    """Tab. 1 pools per model (the headline), then a sweep of rollout:training ratios on 8 training GPUs."""
    table1 = {m: gpu_hours_two_jobs(m, steps=steps) for m in SHAPES}
    for m, r in table1.items():
        print(f"[sim 6.2] Tab. 1 pools {m}: rollout {r['rollout_gpus']} / training {r['train_gpus']} GPUs per job: "
              f"split {r['split_gpu_h_per_step']:.3f} vs packed {r['packed_gpu_h_per_step']:.3f} GPU-h/step -> "
              f"saved {r['saved_pct']:.1f}% (bound {r['bound_pct']:.1f}%, paper {PAPER_SAVED_PCT[m]:.2f}%) "
              f"slowdown x{r['slowdown']:.3f} switches {r['switches']}")
        R, T = r["rollout_gpus"], r["train_gpus"]  # the paper's figure at these pools implies this slowdown
        print(f"           the paper's {PAPER_SAVED_PCT[m]:.2f}% at these pools implies packed jobs ran "
              f"x{(1 - PAPER_SAVED_PCT[m] / 100) * 2 * (R + T) / (2 * R + T):.3f} their split-async time")
    rows = {}
    for ratio in (0.125, 0.25, 0.5, 1.0):
        rows[ratio] = {m: gpu_hours_two_jobs(m, steps=steps, rollout_gpus=int(8 * ratio), train_gpus=8)
                       for m in SHAPES}
    for ratio, per in rows.items():
        print(f"[sim 6.2] rollout:train={ratio:g}  " + "  ".join(
            f"{m}: saved {r['saved_pct']:.1f}% slowdown x{r['slowdown']:.3f}" for m, r in per.items()))
    return table1, rows


def trace_replay(n_jobs: int, groups: int, seed: int) -> dict:
    jobs = make_trace(n_jobs, seed=seed)
    out = {p: replay(jobs, groups, p, seed=seed) for p in POLICIES}
    iso = out["isolated"].drain_s
    for p, r in out.items():
        d = sorted(r.norm_delay)
        print(f"[sim 6.3] {p:16s} drain {r.drain_s / 3600:6.1f} h ({r.drain_s / iso:.3f} of isolated)  "
              f"delay p50 {d[len(d) // 2]:.2f} p90 {d[int(0.9 * len(d))]:.2f} max {d[-1]:.2f}  switches {r.switches}")
    return out


def hrrs_vs_fcfs(n_jobs: int, groups: int, seed: int, hrrs_run) -> dict:
    """FCFS on the same trace; the HRRS run is part 2's Spread+Backfill replay (HRRS is its runtime order)."""
    jobs = make_trace(n_jobs, seed=seed)
    out = {"hrrs": hrrs_run, "fcfs": replay(jobs, groups, "spread+backfill", runtime="fcfs", seed=seed)}
    for rt, r in out.items():
        w = sorted(r.op_waits)
        print(f"[sim 4.4] {rt}: switches {r.switches}  op wait p50 {w[len(w) // 2]:.1f} s  p99 {w[int(0.99 * len(w))]:.1f} s"
              f"  drain {r.drain_s / 3600:.1f} h")
    return out


async def live(bursts: int, mode: str) -> dict[str, float]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "multiplex"))
    from mx_fixtures import save_tiny_policy, trainer_config, trajectories
    from rollart.multiplex.messages import Forward
    from rollart.multiplex.service import ServiceConfig, TrainingService
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        a, b = save_tiny_policy(Path(tmp) / "a", 0), save_tiny_policy(Path(tmp) / "b", 1)
        batch = trajectories(seed=3)
        for policy in ("hrrs", "fcfs"):
            async with TrainingService(ServiceConfig(mode=mode, policy=policy)) as s:
                await s.register_job("A", trainer_config(a)); await s.register_job("B", trainer_config(b))
                base = s.scheduler.stats()["switches"]
                t0 = time.perf_counter()
                for _ in range(bursts):  # each job sends 3 forwards at once, arrivals interleaved A,B,A,B,...
                    futs = [s.send(j, Forward(batch)) for _ in range(3) for j in ("A", "B")]
                    await asyncio.gather(*futs)
                out[policy] = s.scheduler.stats()["switches"] - base
                print(f"[live] {policy}: {bursts} bursts of 6 forwards -> {out[policy]:.0f} context switches "
                      f"({time.perf_counter() - t0:.1f} s)")
    return out


async def cpu_two_jobs(steps: int, batch_groups: int) -> dict:
    """Part 6: the two-job recipe alone, then shared (both planes), on this CPU; device time from the real runs."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from recipes.multiplex_two_jobs import MultiplexRecipe, run
    with tempfile.TemporaryDirectory() as tmp:
        # every actor in this process on both sides (the alone runs' actors are in-process too), so neither
        # side pays process starts the other does not
        common = dict(total_steps=steps, eval_episodes=1, batch_groups=batch_groups,
                      actor_mode="inprocess", service_mode="inprocess")
        alone = await run(MultiplexRecipe(alone=True, logdir=f"{tmp}/alone", **common))
        shared = await run(MultiplexRecipe(logdir=f"{tmp}/shared", **common))
        dropped = await run(MultiplexRecipe(job_prefix_cache=False, logdir=f"{tmp}/dropped", **common))
    jobs = ("lake", "game")
    held_private = sum(2 * alone[j]["wall_s"] for j in jobs)  # each job: its worker + its trainer, for its run
    held_shared = 2 * shared["run_s"]  # one worker + one trainer, for the shared run (from starting them)
    busy_private = sum(alone[j]["inference_busy_s"] for j in jobs)
    prompt_private = sum(alone[j]["prompt_tokens"] for j in jobs)
    hit_private = sum(alone[j]["cached_tokens"] for j in jobs) / max(prompt_private, 1)
    out = {"held_private_s": held_private, "held_shared_s": held_shared,
           "saved_pct": 100 * (1 - held_shared / held_private),
           "saved_pct_drop_cache": 100 * (1 - 2 * dropped["run_s"] / held_private),
           "held_drop_cache_s": 2 * dropped["run_s"], "inference_busy_drop_cache_s": dropped["inference_busy_s"],
           "inference_busy_private_s": busy_private, "inference_busy_shared_s": shared["inference_busy_s"],
           "trainer_busy_shared_s": shared["trainer_busy_s"], "swaps": shared["inference_switches"],
           "step_s": {j: (alone[j]["step_s"], shared[j]["step_s"]) for j in jobs}}
    out["slowdown"] = statistics.mean(b / a for a, b in out["step_s"].values())
    walls = ", ".join(f"{j} {alone[j]['wall_s']:.1f} s" for j in jobs)
    print(f"[cpu 6] alone (private sets): job walls {walls} "
          f"-> held {held_private:.1f} device-s; inference busy {busy_private:.1f} s, "
          f"{prompt_private} prompt tokens, prefix-cache hits {hit_private:.0%}")
    print(f"[cpu 6] alone: {prompt_private - sum(alone[j]['cached_tokens'] for j in jobs)} prompt tokens prefilled")
    for name, sh in (("shared, per-job prefix cache", shared), ("shared, cache emptied at each swap", dropped)):
        print(f"[cpu 6] {name} (one worker + one trainer): run {sh['run_s']:.1f} s -> held {2 * sh['run_s']:.1f} "
              f"device-s; inference busy {sh['inference_busy_s']:.1f} s = engine steps {sh['inference_engine_s']:.1f} s "
              f"(of which draining toward a swap {sh['inference_drain_s']:.1f} s) + {sh['inference_switches']} weight "
              f"swaps {sh['inference_swap_s']:.2f} s; idle {sh['inference_idle_s']:.1f} s; trainer busy "
              f"{sh['trainer_busy_s']:.1f} s; {sh['prompt_tokens']} prompt tokens, "
              f"{sh['prompt_tokens'] - sh['cached_tokens']} prefilled, prefix-cache hits {sh['prefix_hit_rate']:.0%}")
    for j, (a, b) in out["step_s"].items():
        print(f"[cpu 6] {j}: {a:.2f} s/step alone, {b:.2f} s/step shared -> x{b / a:.2f}")
    walls = [alone[j]["wall_s"] for j in jobs]
    out["no_slowdown_pct"] = 100 * (1 - max(walls) / sum(walls))
    print(f"[cpu 6] reference: a shared run as long as the longer job's run alone (no slowdown) would save "
          f"{out['no_slowdown_pct']:.1f}% at these walls (not a bound: a shared run also overlaps the jobs' "
          f"start-up and idle time)")
    print(f"[cpu 6] device-seconds saved {out['saved_pct']:.1f}% (cache emptied at each swap: "
          f"{out['saved_pct_drop_cache']:.1f}%), packed slowdown x{out['slowdown']:.2f}")
    return out


def plot(trace: dict, table1: dict, rows: dict, path: Path, two: dict | None = None, emu: dict | None = None) -> None:
    panels = 3 + bool(two) + bool(emu)
    fig, ax = plt.subplots(1, panels, figsize=(5 * panels, 4))
    for p, r in trace.items():
        d = sorted(r.norm_delay)
        ax[0].plot(d, [(i + 1) / len(d) for i in range(len(d))], label=p)
    ax[0].set_xscale("symlog"); ax[0].set_xlabel("normalised queueing delay (wait / job duration)")
    ax[0].set_ylabel("CDF"); ax[0].legend(); ax[0].set_title("SIMULATED trace replay (§6.3)")
    iso = trace["isolated"].drain_s
    ax[1].bar(list(trace), [r.drain_s / iso for r in trace.values()])
    ax[1].axhline(0.56, color="k", ls="--", label="paper: 0.56"); ax[1].legend()
    ax[1].set_ylabel("drain time / isolated"); ax[1].set_title("SIMULATED time to drain the trace")
    for m in SHAPES:
        ax[2].plot(list(rows), [rows[r][m]["saved_pct"] for r in rows], marker="o", label=m)
    xs = [x / 100 for x in range(10, 101)]
    ax[2].plot(xs, [100 / (2 * (1 + x)) for x in xs], "k:", label="bound T/(2(R+T)), no slowdown")
    for i, m in enumerate(SHAPES):
        r, t = table1_pools(m)
        ax[2].plot([r / t], [table1[m]["saved_pct"]], marker="*", ms=14, ls="", color=f"C{i}",
                   label=f"{m} Tab. 1 pools (sim)")
        ax[2].plot([r / t], [PAPER_SAVED_PCT[m]], marker="x", ms=10, ls="", color=f"C{i}",
                   label=f"{m} paper measured")
    ax[2].set_xlabel("rollout GPUs / training GPUs per job"); ax[2].set_ylabel("GPU-hours saved per step, %")
    ax[2].set_title("SIMULATED 2-job packing vs split-async (§6.2)"); ax[2].legend(fontsize=7)
    if two:
        labels = ["held", "inference busy"] + [f"{j} s/step x10" for j in two["step_s"]]
        private = [two["held_private_s"], two["inference_busy_private_s"], *(10 * a for a, _ in two["step_s"].values())]
        shared = [two["held_shared_s"], two["inference_busy_shared_s"], *(10 * b for _, b in two["step_s"].values())]
        xs = range(len(labels))
        ax[3].bar([x - 0.27 for x in xs], private, 0.27, label="alone: private worker + trainer per job")
        ax[3].bar(list(xs), shared, 0.27, label="shared: one worker + one trainer, per-job prefix cache")
        ax[3].bar([0.27, 1.27], [two["held_drop_cache_s"], two["inference_busy_drop_cache_s"]], 0.27,
                  label="shared, prefix cache emptied at each swap")
        ax[3].set_xticks(list(xs)); ax[3].set_xticklabels(labels, fontsize=8); ax[3].set_ylabel("device-seconds")
        ax[3].set_title(f"LIVE 2 jobs on this CPU: saved {two['saved_pct']:.0f}% (emptied cache "
                        f"{two['saved_pct_drop_cache']:.0f}%), slowdown x{two['slowdown']:.1f}", fontsize=10)
        ax[3].legend(fontsize=7)
    if emu:
        a = ax[-1]
        jobs = [j for j, v in emu["alone"].items() if isinstance(v, dict)]
        a.bar([-0.2, 0.2], [emu["private_gpu_s"], emu["packed_gpu_s"]], 0.4, color=["C0", "C1"])
        a.set_ylabel("GPU-seconds (Tab. 1 pools)")
        b = a.twinx()
        for i, j in enumerate(jobs):
            b.bar([1.8 + i, 2.2 + i], [emu["alone"][j]["step_s"], emu["packed"][j]["step_s"]], 0.4, color=["C0", "C1"])
        b.set_ylabel("s/step")
        a.set_xticks([0, *range(2, 2 + len(jobs))]); a.set_xticklabels(["GPU-s", *(f"{j} s/step" for j in jobs)])
        a.legend(handles=[plt.Rectangle((0, 0), 1, 1, color="C0"), plt.Rectangle((0, 0), 1, 1, color="C1")],
                 labels=["alone: private trainer", "packed: one shared trainer"], fontsize=7)
        a.set_title(f"LIVE on emulated H800s (SIMULATED timing): saved {emu['saved_pct']:.0f}%, "
                    f"slowdown x{emu['slowdown']:.2f}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small trace, < 60 s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-live", action="store_true", help="skip the live parts (4, 5 and 6; --quick skips 6)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    n_jobs, groups = (48, 8) if args.quick else (120, 16)
    table1, rows = gpu_hours(steps=100)  # §6.2: identical 100-step budgets, in both modes (it is cheap)
    trace = trace_replay(n_jobs, groups, args.seed)
    rt = hrrs_vs_fcfs(n_jobs, groups, args.seed, trace["spread+backfill"])
    lv = {} if args.no_live else asyncio.run(live(3 if args.quick else 10, "inprocess" if args.quick else "process"))
    emu = None if args.no_live else asyncio.run(plexrl_live.live(
        2, calibration_steps=2, tries=1, fit_trainer=False) if args.quick else plexrl_live.live(12))
    two = None if args.no_live or args.quick else asyncio.run(cpu_two_jobs(12, 4))
    plot(trace, table1, rows, Path(__file__).parent / "plots" / "multiplex.png", two, emu)
    saved = statistics.mean(r["saved_pct"] for r in table1.values())
    paper = statistics.mean(PAPER_SAVED_PCT.values())
    saved_equal = statistics.mean(r["saved_pct"] for r in rows[1.0].values())
    drain = trace["spread+backfill"].drain_s / trace["isolated"].drain_s
    best = min(trace[p].drain_s for p in POLICIES[1:]) / trace["isolated"].drain_s
    w = {k: sorted(r.op_waits) for k, r in rt.items()}
    p99 = {k: v[int(0.99 * len(v))] for k, v in w.items()}
    live_ratio = (lv["hrrs"] / lv["fcfs"]) if lv.get("fcfs") else float("nan")
    print(f"wall_s={time.perf_counter() - t0:.1f}")
    print(f"gpu_hours_saved_pct={saved:.1f} " + " ".join(f"gpu_hours_saved_pct_{m}={r['saved_pct']:.1f}"
                                                          for m, r in table1.items())
          + f" paper_gpu_hours_saved_pct={paper:.1f} gpu_hours_saved_pct_equal_pools={saved_equal:.1f} "
          f"drain_vs_isolated={drain:.3f} best_shared_drain_vs_isolated={best:.3f} "
          f"switches_ratio={rt['hrrs'].switches / rt['fcfs'].switches:.3f} p99_wait_ratio={p99['hrrs'] / p99['fcfs']:.3f} "
          f"live_switches_ratio={live_ratio:.3f} "
          + (f"live_gpu_hours_saved_pct={emu['saved_pct']:.1f} live_packed_slowdown={emu['slowdown']:.3f} "
             f"live_timing={emu['timing']} "
             if emu else "live_gpu_hours_saved_pct=nan live_packed_slowdown=nan ")
          + (f"cpu_live_saved_pct={two['saved_pct']:.1f} cpu_live_saved_pct_drop_cache={two['saved_pct_drop_cache']:.1f} "
             f"cpu_live_saved_pct_no_slowdown={two['no_slowdown_pct']:.1f} cpu_live_packed_slowdown={two['slowdown']:.3f} "
             if two else "")
          + "simulated=gpu_hours,drain,switches,live_gpu_hours")


if __name__ == "__main__":
    main()
