"""The SIMULATED half of the ARL-Tangram actions benchmark (``actions.py``): the AI-coding trace
(act_speedup, elastic vs fixed DoP, queueing, full mode's sweeps and diagnostics), the MOPD-like GPU
pool and the reward offload. Real scheduler code, simulated time; each workload parameter's source is in
its config docstring (rollart.sim.coding_actions / mopd_actions / actions_baselines).
"""
from __future__ import annotations

import functools
import math
import statistics

from rollart.sim.coding_actions import CodingTraceConfig, action_time_ratio, coding_trace, simulate_coding
from rollart.sim.mopd_actions import MopdTraceConfig, mopd_trace, simulate_gpu_pool
from rollart.sim.actions_baselines import (OffloadConfig, simulate_gpu_dedicated, simulate_reward_offload,
                                           simulate_static)


def log(msg: str) -> None:
    print(msg, flush=True)


# -- simulated ------------------------------------------------------------------------------------
# Decisions are timed (overhead_pct) but not charged to simulated time: at ~0.001% of execution they
# cannot move an ACT, while charging them made every run a different sample of a chaotic system.
coding_run = functools.partial(simulate_coding, charge_latency=False)
gpu_run = functools.partial(simulate_gpu_pool, charge_latency=False)


def low_dop_share(res, limit: int = 4) -> tuple[float, float]:
    """(fraction of test runs started on <= ``limit`` cores, their share of the summed test-run ACT):
    how much of the elastic mean comes from runs that arrived when few cores were free."""
    units, acts = res.units["reward_test"], res.acts["reward_test"]
    low = [a for a, u in zip(acts, units) if u <= limit]
    return len(low) / len(units), sum(low) / sum(acts)


def queue_pct(res) -> float:
    """Summed queueing time / summed execution time of all actions, in % (paper Table 1: 1.5 % for
    Tangram on AI coding at batch 1280)."""
    total = sum(sum(v) for v in res.acts.values())
    return max(0.0, 100.0 * (total - res.exec_seconds) / res.exec_seconds)  # no -0.0 from rounding


def sim_coding(quick: bool) -> dict:
    """Keys are the paper's batch sizes (256, 1280). Full mode: the paper's 1280 cores over 5 nodes.
    --quick: ONE node of 256 cores with batch 256 / 5 = 51 and 1280 / 5 = 256 (same cores per
    trajectory and per node as the paper's setting; labelled QUICK SCALE in the log). The trace is
    ``CodingTraceConfig``'s defaults, each parameter sourced in its docstring."""
    nodes, cores = (1, 256) if quick else (5, 256)
    out = {}
    for batch in (256, 1280):
        sim_batch = batch // 5 if quick else batch
        if quick:
            log(f"[sim coding] QUICK SCALE: paper batch {batch} -> batch {sim_batch} on 1 node of 256 cores")
        trace = coding_trace(CodingTraceConfig(batch=sim_batch))
        runs = {"elastic": coding_run(trace, nodes, cores),
                "static": simulate_static(trace, nodes, cores),
                # pessimistic reading of the paper's pods as a hard 0.5-CPU quota (the paper's 0.5 CPU
                # is a request with a 4-CPU limit, so an uncontended pod runs a command on a full core)
                "static_pod05": simulate_static(trace, nodes, cores, cpu_quota=0.5)}
        if not quick or batch == 256:
            runs["dop4"] = coding_run(trace, nodes, cores, dop=4)
        if not quick or batch == 1280:
            runs["dop16"] = coding_run(trace, nodes, cores, dop=16)
        if not quick:  # our variant: ESTIMATE also prices waiting for more units (depth 3, spread)
            runs["spread"] = coding_run(trace, nodes, cores, depth=3, explore="spread")
        out[batch] = runs
        tools = sum(s.seconds for t in trace for s in t if s.kind == "tool")
        tests = sum(s.seconds for t in trace for s in t if s.kind == "reward_test")
        frac, share = low_dop_share(runs["elastic"])
        st, el = runs["static"], runs["elastic"]
        log(f"[sim coding] batch={batch} action-time ratio={action_time_ratio(trace):.2f} tool:test "
            f"time 1:{tests / tools:.1f} " + " ".join(
                f"{k}: traj_act={r.mean():.1f}s tool={r.mean('tool'):.2f}s test={r.mean('reward_test'):.1f}s"
                for k, r in runs.items()) +
            f"; static/elastic: env {st.mean('tool') / el.mean('tool'):.2f}x (paper Fig. 7: 9.0x), reward "
            f"{st.mean('reward_test') / el.mean('reward_test'):.2f}x (2.8x)"
            f"; elastic test runs started on <= 4 cores: {100 * frac:.0f}%, {100 * share:.0f}% of test-run ACT"
            f"; elastic queueing {queue_pct(el):.1f}% of execution (Table 1: 1.5%): per trajectory "
            f"{el.queued('tool') / len(trace):.1f}s in tool calls, {el.queued('reward_test') / len(trace):.1f}s in "
            f"test runs" + "".join(f"; {k} queueing per trajectory: tools {runs[k].queued('tool') / len(trace):.1f}s, "
                                   f"test runs {runs[k].queued('reward_test') / len(trace):.1f}s"
                                   for k in ("dop4", "dop16") if k in runs))
    if not quick:
        coding_sweeps(out, nodes, cores)
    return out


def coding_sweeps(out: dict, nodes: int, cores: int) -> None:
    """Full mode: Fig. 8(a)'s batch and capacity sweeps, two sensitivity runs and two diagnostics,
    added to ``out`` (the runs at batch 256 and 1280 are reused)."""
    # Fig. 8(a) left: batch sweep on the same 1280 cores (paper: 3.1x at 128 ... 27.7x)
    sweep, elastic_act = {}, {}
    for batch in (128, 512, 1536):
        trace = coding_trace(CodingTraceConfig(batch=batch))
        el = coding_run(trace, nodes, cores)
        sweep[batch], elastic_act[batch] = simulate_static(trace, nodes, cores).mean() / el.mean(), el.mean()
    for batch in (256, 1280):
        sweep[batch] = out[batch]["static"].mean() / out[batch]["elastic"].mean()
        elastic_act[batch] = out[batch]["elastic"].mean()
    out["batch_sweep"] = dict(sorted(sweep.items()))
    out["elastic_1536_vs_128"] = elastic_act[1536] / elastic_act[128]
    log("[sim coding] act_speedup by batch on 1280 cores (paper Fig. 8a left: 3.1x .. 27.7x, growing "
        "with batch; 128 is the point the test-run elasticity is calibrated to): " +
        ", ".join(f"{b}: {v:.2f}x" for b, v in out["batch_sweep"].items()) +
        f"; elastic ACT at 1536 / at 128: {out['elastic_1536_vs_128']:.2f} (paper: < 2)")
    # Fig. 8(a) right: batch 1280 on fewer cores (paper: 1.89x at 768 ... 4.33x, growing with cores)
    trace = coding_trace(CodingTraceConfig(batch=1280))
    cap = {256 * n: simulate_static(trace, n, cores).mean() / coding_run(trace, n, cores).mean()
           for n in (3, 4)}
    cap[1280] = sweep[1280]
    out["capacity_sweep"] = cap
    log("[sim coding] act_speedup at batch 1280 by cores (paper Fig. 8a right: 1.89x at 768 .. 4.33x): " +
        ", ".join(f"{c}: {v:.2f}x" for c, v in cap.items()))
    # sensitivity: the mean Amdahl fraction of test runs (the paper gives no curve; the default 0.79 is
    # calibrated to Fig. 8a at batch 128; 0.85 would match Fig. 7's reward 2.8x; 0.92 is the earlier,
    # unsourced range) -- do the targets come within reach anywhere in the plausible range?
    sens = {}
    for mean_p in (0.79, 0.82, 0.85, 0.88, 0.92):
        prange = (round(mean_p - 0.07, 2), min(0.99, round(mean_p + 0.07, 2)))
        runs = {}
        for batch in (128, 256, 1280):
            trace = coding_trace(CodingTraceConfig(batch=batch, parallel_range=prange))
            runs[batch] = {"elastic": coding_run(trace, nodes, cores), "static": simulate_static(trace, nodes, cores)}
            if batch != 128:
                runs[batch]["fixed"] = coding_run(trace, nodes, cores, dop=4 if batch == 256 else 16)
        r = {"prange": prange,
             "act128": runs[128]["static"].mean() / runs[128]["elastic"].mean(),
             "act1280": runs[1280]["static"].mean() / runs[1280]["elastic"].mean(),
             "reward1280": runs[1280]["static"].mean("reward_test") / runs[1280]["elastic"].mean("reward_test"),
             "vs4": runs[256]["fixed"].mean() / runs[256]["elastic"].mean(),
             "vs16": runs[1280]["fixed"].mean() / runs[1280]["elastic"].mean()}
        sens[mean_p] = r
        log(f"[sim coding, test-run Amdahl fraction {prange[0]:.2f}..{prange[1]:.2f}] static/elastic at batch 128 "
            f"{r['act128']:.2f}x (paper 3.1x), at 1280 {r['act1280']:.2f}x (goal 4.3x; reward {r['reward1280']:.2f}x, "
            f"paper 2.8x); elastic vs DoP 4 at 256 {r['vs4']:.2f}x, vs DoP 16 at 1280 {r['vs16']:.2f}x, min "
            f"{min(r['vs4'], r['vs16']):.2f}x (goal 2x)")
    out["elasticity_sweep"] = sens
    # sensitivity: Fig. 3c's 47% read as the k8s baseline's action share, its env interactions at
    # 9x ARL-Tangram's (§6.2) -> generation median 8.4 s (action_time_ratio(trace, 9) = 0.47)
    alt = {}
    for batch in (256, 1280):
        trace = coding_trace(CodingTraceConfig(batch=batch, gen_median=8.4))
        alt[batch] = {"elastic": coding_run(trace, nodes, cores), "static": simulate_static(trace, nodes, cores),
                      "fixed": coding_run(trace, nodes, cores, dop=4 if batch == 256 else 16)}
    out["alt_fig3c"] = alt
    a = alt[1280]
    log("[sim coding, Fig. 3c's 47% as the baseline's share with 9x env time: generation median 8.4 s] "
        f"batch 1280: static/elastic {a['static'].mean() / a['elastic'].mean():.2f}x (reward "
        f"{a['static'].mean('reward_test') / a['elastic'].mean('reward_test'):.2f}x, env "
        f"{a['static'].mean('tool') / a['elastic'].mean('tool'):.2f}x), elastic queueing "
        f"{queue_pct(a['elastic']):.1f}%; DoP 4 / elastic at 256: "
        f"{alt[256]['fixed'].mean() / alt[256]['elastic'].mean():.2f}x, DoP 16 / elastic at 1280: "
        f"{a['fixed'].mean() / a['elastic'].mean():.2f}x")
    # sensitivity: §6.4's trace benchmark replayed open loop (actions arrive at their one-core timeline)
    rep = {}
    for batch, dop in ((256, 4), (1280, 16)):
        trace = coding_trace(CodingTraceConfig(batch=batch))
        el, fx = coding_run(trace, nodes, cores, replay=True), coding_run(trace, nodes, cores, dop=dop, replay=True)
        rep[batch] = (fx.mean() / el.mean(), fx.mean("reward_test") / el.mean("reward_test"))
    out["replay"] = rep
    log(f"[sim coding, open-loop replay] DoP 4 / elastic at 256: {rep[256][0]:.2f}x (test runs {rep[256][1]:.2f}x), "
        f"DoP 16 / elastic at 1280: {rep[1280][0]:.2f}x (test runs {rep[1280][1]:.2f}x); min "
        f"{min(rep[256][0], rep[1280][0]):.2f}x (goal 2x)")
    coding_diagnostics(out)


def coding_diagnostics(out: dict) -> None:
    """Why elastic test runs lose to DoP 16 at batch 1280 (one node, batch 256 = the paper's per-node
    load). Not the paper's algorithm as evaluated; diagnostics only:
    - depth 32: Algorithm 2's first remaining action may try every DoP 1..32, i.e. also price waiting
      for more cores (the paper evaluates depth 2: it tries 1 and 2 cores);
    - DoP cap 8: the same scheduler with test runs limited to 1..8 cores, i.e. not giving early arrivals
      the cores later arrivals need (DPArrange hands out every free core; nothing prices arrivals)."""
    trace = coding_trace(CodingTraceConfig(batch=256))
    runs = {"depth 2 (paper)": coding_run(trace, 1, 256), "depth 32": coding_run(trace, 1, 256, depth=32),
            "DoP cap 8": coding_run(trace, 1, 256, max_dop=8), "fixed DoP 16": coding_run(trace, 1, 256, dop=16)}
    out["diagnostics"] = runs
    log("[sim coding diagnostics, 1 node, batch 256] " + "; ".join(
        f"{k}: traj_act {r.mean():.1f}s, test run {r.mean('reward_test'):.1f}s, queueing per trajectory in tool "
        f"calls {r.queued('tool') / len(trace):.1f}s, test runs on <= 4 cores "
        f"{100 * sum(u <= 4 for u in r.units['reward_test']) / len(trace):.0f}%" for k, r in runs.items()))


def k8s_overhead_for(goal: float, trace_runs: dict, batch: int) -> float:
    """What-if (NOT a result): the per-action overhead (s) the static baseline would need for the
    action-level speedup to reach ``goal`` — how large the k8s exec / control-plane cost behind the
    paper's 9.0x on env interactions (§6.2, §5.2, §6.3) would have to be in our model."""
    static, elastic = trace_runs["static"], trace_runs["elastic"]
    actions_per_traj = sum(len(v) for v in static.acts.values()) / batch
    return (goal * elastic.mean() - static.mean()) / actions_per_traj


GPU_SEEDS = (0, 1, 2, 3, 4)


def smallest_pool(services, reqs, cfg: MopdTraceConfig, target: float, base: int) -> tuple[int, dict]:
    """Fewest pooled GPUs (1-GPU steps: 8-GPU nodes + a partial node) whose mean ACT <= ``target``;
    binary search, as ACT falls with GPUs. Returns (GPUs, {GPUs: SimResult} evaluated)."""
    results: dict = {}

    def act(g: int) -> float:
        if g not in results:  # early exit once the mean is known to exceed the target
            results[g] = gpu_run(services, reqs, g, cfg, act_limit=target)
        return math.inf if results[g].aborted else results[g].mean()
    lo, hi = max(s.min_units for s in services), base
    while lo < hi:
        mid = (lo + hi) // 2
        if act(mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    act(lo)
    return lo, results


def sim_gpu(quick: bool) -> dict:
    """MOPD-like 10 services (paper §6.1 "MOPD+Search", Fig. 8b right: batch 1024): per trace seed,
    the fewest pooled GPUs matching the dedicated baseline's mean ACT (4 GPUs per service = 40).
    The headline is the median over seeds (one seed's random service mix decides too much)."""
    base_units = 40
    per_seed = {}
    for seed in GPU_SEEDS:
        cfg = MopdTraceConfig(seed=seed)
        services, reqs = mopd_trace(cfg)
        dedicated = simulate_gpu_dedicated(services, reqs, units_per_service=4)
        best, results = smallest_pool(services, reqs, cfg, dedicated.mean(), base_units)
        pooled40 = results.get(base_units)
        if pooled40 is None or pooled40.aborted:
            pooled40 = results[base_units] = gpu_run(services, reqs, base_units, cfg)
        if seed == GPU_SEEDS[0] and not quick:  # the curve for the plot
            for g in range(4, base_units + 1, 4):
                if g not in results or results[g].aborted:
                    results[g] = gpu_run(services, reqs, g, cfg)
        row = {"dedicated": dedicated, "pool": results, "best": best,
               "vs40_1024": dedicated.mean() / pooled40.mean(),
               "restore_frac": results[best].restore_seconds / results[best].exec_seconds}
        if not quick:  # Fig. 8(b) left's second point: batch 2048 on the same 40 GPUs
            cfg2 = MopdTraceConfig(seed=seed, batch=2048)
            s2, r2 = mopd_trace(cfg2)
            d2, p2 = simulate_gpu_dedicated(s2, r2, units_per_service=4), gpu_run(s2, r2, base_units, cfg2)
            row["vs40_2048"] = d2.mean() / p2.mean()
            row["restore_frac_2048"] = p2.restore_seconds / p2.exec_seconds
        per_seed[seed] = row
        busy = dedicated.units["busy_gpu_seconds"][0]
        log(f"[sim gpu] seed {seed}: dedicated {base_units} GPUs mean ACT {dedicated.mean():.1f}s (GPU busy "
            f"{100 * busy / (base_units * max(dedicated.makespan, cfg.window)):.1f}%), pooled 40 GPUs "
            f"{pooled40.mean():.1f}s ({row['vs40_1024']:.1f}x); fewest pooled GPUs at <= dedicated ACT: {best} "
            f"({results[best].mean():.1f}s, restores {100 * row['restore_frac']:.0f}% of execution)" +
            (f"; batch 2048 on 40: {row['vs40_2048']:.1f}x, restores {100 * row['restore_frac_2048']:.0f}%"
             if "vs40_2048" in row else ""))
    fracs = [r["best"] / base_units for r in per_seed.values()]
    out = {"seeds": per_seed, "base": base_units, "frac": statistics.median(fracs),
           "vs40_1024": statistics.median(r["vs40_1024"] for r in per_seed.values())}
    if not quick:
        out["vs40_2048"] = statistics.median(r["vs40_2048"] for r in per_seed.values())
    log(f"[sim gpu] gpu_units_frac per seed {fracs} -> median {out['frac']:.3f}; dedicated/pooled on 40 GPUs "
        f"median {out['vs40_1024']:.2f}x at batch 1024 (paper 3.4x)" +
        (f", {out['vs40_2048']:.2f}x at 2048 (paper 18.1x)" if not quick else ""))
    return out


def sim_offload() -> dict:
    cfg = OffloadConfig()
    out = {"dedicated": simulate_reward_offload(cfg, serverless=False),
           "serverless": simulate_reward_offload(cfg, serverless=True)}
    for k, v in out.items():
        log(f"[sim reward offload] {k}: rollout {v['rollout_seconds']:.0f}s, reward-GPU utilisation "
            f"{100 * v['reward_utilisation']:.1f}%")
    return out


# -- elasticity with the real suites' profiled curves (issue: elastic_vs_fixed re-examined) -------------
def sim_profiled(quick: bool, profile_path: str) -> dict:
    """Elastic vs fixed DoP on the AI-coding trace with every test run's speed-up curve and core cap taken
    from a real suite profiled on this machine (``actions_real.py --profile``: the SWE hidden suites split
    per test file, 1 and 2 cores; cap = the suite's 2 files) instead of Amdahl curves over 1..32 cores.
    Fixed DoP d runs a suite on min(d, cap) cores, so DoP 4 and 16 both become the cap."""
    import json
    import random

    with open(profile_path) as f:
        prof = json.load(f)
    curves = [(1.0, min(2.0, t1 / t2)) for t1, t2 in prof["per_task"]]
    nodes, cores = (1, 256) if quick else (5, 256)
    batch = 128 if quick else 1280
    trace = coding_trace(CodingTraceConfig(batch=batch))
    rng = random.Random(0)
    for steps in trace:
        last = steps[-1]
        if last.kind == "reward_test":
            last.speedup = rng.choice(curves)
    runs = {"elastic": coding_run(trace, nodes, cores), "dop1": coding_run(trace, nodes, cores, dop=1),
            "dop_cap": coding_run(trace, nodes, cores, dop=2)}
    el = runs["elastic"]
    out = {"curves": curves, "profile": prof, "runs": runs, "batch": batch,
           "vs_cap": runs["dop_cap"].mean() / el.mean(), "vs_dop1": runs["dop1"].mean() / el.mean(),
           "vs_cap_tests": runs["dop_cap"].mean("reward_test") / el.mean("reward_test"),
           "elastic_dop2_frac": sum(u == 2 for u in el.units["reward_test"]) / len(el.units["reward_test"])}
    s2 = sorted(c[1] for c in curves)
    log(f"[sim profiled] {len(curves)} real suites profiled {prof['utc']} (load {prof['load_start']:.1f}): "
        f"speed-up on 2 cores median {statistics.median(s2):.2f} (range {s2[0]:.2f}-{s2[-1]:.2f}); batch {batch}: "
        f"mean ACT per trajectory elastic {el.mean():.1f}s, fixed DoP 4/16 (= cap 2) {runs['dop_cap'].mean():.1f}s, "
        f"DoP 1 {runs['dop1'].mean():.1f}s; elastic test runs on 2 cores: {100 * out['elastic_dop2_frac']:.0f}%")
    return out
