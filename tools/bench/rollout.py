"""Rollout benchmark: trajectory-level vs batched env interaction (RollArt §7.3 R2, Fig. 11b),
distance to the ideal critical path, and redundant env rollouts (§7.4, Fig. 14b).

    python tools/bench/rollout.py --quick    # < 60 s on 2 cores
    python tools/bench/rollout.py            # 256 envs, 5 sigmas, more repeats and seeds (~15 min)

Everything runs the real rollout code — EnvHost (env calls on threads under timeouts), EnvManager
(one coroutine per trajectory, token-in/token-out chat), RolloutScheduler, SampleBuffer — on real
gymnasium envs. Only the LLM is a stand-in: a scripted policy with a fixed per-turn generate
latency. Env latency is injected per turn by rollart.rollout.env_faults with the paper's shape, scaled from
μ = 10 s to μ = max(80 ms, E · c / 0.3), where c is the rollout path's own CPU per turn measured first in the
same run (``turn_cpu_us``: one trajectory-level batch of E envs at 80 ms): in the paper a turn's few hundred µs of rollout CPU vanish against 10 s of env
latency, and the scaled run keeps them small too — with every env waiting, the turns of E envs take at most 30 %
of the pinned core. At 80 ms and 256 envs (300–500 µs a turn) they took 70–80 % of it, and the steady stream,
queueing on its own CPU, measured that core rather than the rollout's design (BENCHMARKS.md, rollout). The run
prints the μ it used (``mu_s``), and says when it had to raise it.

1. R2 (FrozenLake 4x4, 6 turns per trajectory, E envs = batch size B, per-turn latency N(μ, σ)
   clipped at 0, σ = 0.1μ … μ). Batched: every env of a batch starts each turn together and steps
   after all generations (Fig. 5b); batches follow one another, as in synchronous training.
   Trajectory-level: each env runs its own loop; in asynchronous training the rollout runs
   continuously, so its step time is the time to fill a batch of B from the running stream. Both
   are measured the same way, as Fig. 11b's average step time over ten iterations: after one warm-up
   batch, the mean over ``ITERATIONS`` batches (10; 3 under --quick) — the judged
   ``traj_vs_batch_sigma_*``. The single-batch ratio (one lockstep batch after its warm-up against
   one trajectory-level batch from a cold start: no overlap between batches) is a report
   (``single_batch_*``). ``vs_ideal`` = measured single-batch trajectory-level time /
   the critical path computed from the injected latencies (max over trajectories of Σ injected env
   latency + turns × generate latency); worst over σ. Each σ is measured in interleaved repeats and
   the median is reported (the machine is shared; see BENCHMARKS.md); --quick runs the single batch
   once per σ. ``cpu_us_per_turn`` is a micro-benchmark of the rollout path's own cost: CPU (loop
   and env threads) per trajectory turn of a 128-env batch with no injected latency and an instant
   policy (least-disturbed of 5 runs); per-turn CPU is what queues up when trajectories move in
   lockstep (σ = 0.1μ).
   The process is pinned to one CPU (``--pin-cpu``, default the first usable one; ``-1`` leaves it free),
   as EnvHostConfig.cpu_affinity pins an env-host process: the envs run Python under one GIL, and on
   this 2-vCPU VM every env call handed between threads on different cores cost a cross-core GIL
   hand-off, costing 2-3x the CPU per turn whenever the other core was idle (BENCHMARKS.md, rollout).
   The micro-benchmark line also prints voluntary context switches per turn, which show that regime.
2. Redundant env rollouts (MathTool: 1–2 turns; per-call env latency N(μ, 0.1μ) with heavy-tailed
   Pareto stragglers and ~5% env failures). The LLM stand-in here has a fixed generation capacity
   (rollart.sim.decode, SIMULATED): all running sequences decode together, 8 tokens per turn, a step
   takes 5 ms up to 48 concurrent sequences and grows linearly above (at most 9,600 tokens/s), so
   40 ms per turn when unsaturated — extra envs slow every other trajectory's generation. Baseline:
   exactly G groups of n, a failed env is replaced. Redundant: +n/4 envs per group and +G/4 groups,
   extras cancelled when the batch is complete. Each (G, n) cell is run on ≥ 5 seeds (baseline and
   redundant on the same seed, interleaved); a cell's speedup is the median of its per-seed
   baseline/redundant ratios, and ``redundant_speedup`` is the median cell of the grid (the paper
   reports 1.62×; the min and max cells are printed too). It fails (< 1.6) when the stragglers and
   failures the extra envs hide cost less than the generation capacity they take, e.g. when the
   grid's batches already saturate the decode capacity.
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from envs.frozenlake import shortest_path_action  # noqa: E402
from rollart.messages import CloseIdleEnvs  # noqa: E402
from rollart.sim.batched import BatchedInteraction  # noqa: E402
from rollart.rollout.buffer import BufferConfig, SampleBuffer  # noqa: E402
from rollart.rollout.env_client import EnvPool  # noqa: E402
from rollart.rollout.env_host import EnvHost, EnvHostConfig  # noqa: E402
from rollart.rollout.env_manager import EnvManager, TaskSpec  # noqa: E402
from rollart.rollout.group_scheduler import RolloutScheduler, SchedulerConfig  # noqa: E402
from rollart.rollout.scripted import ByteTokenizer, ScriptedPolicy  # noqa: E402
from rollart.sim.decode import CapacityLimitedLLM, DecodeCapacity  # noqa: E402

MU_MIN = 0.080      # least mean injected env latency per turn (s): the paper's 10 s scaled down
ROLLOUT_CPU_SHARE = 0.3  # most of the pinned core the turns of all envs may take at the scaled μ
ITERATIONS = 10     # steady-state batches each side is averaged over (Fig. 11b: ten iterations); --quick: 3
GEN_S = 0.005       # scripted generate latency per turn (s), FrozenLake (prefill-heavy, one-token actions)
MATH_DECODE = DecodeCapacity(min_step_s=0.005, saturation=48, tokens_per_turn=8)  # 40 ms/turn unsaturated
GROUP = 8


_HOST: list[EnvHost] = []
PIN_CPU: list[int] = []  # set by --pin-cpu before the host starts; empty = not pinned


def env_host() -> EnvHost:
    """One in-process env host shared by every run (its threads are started once). As an env-host
    process would, it lowers the GIL switch interval to 0.2 ms and freezes the objects alive at its
    start (the imports) out of the cyclic GC, and it reuses envs across trajectories (long-lived envs,
    reset per trajectory, as in the paper; see EnvHostConfig), and it pins the process to one CPU (--pin-cpu)."""
    if not _HOST:
        _HOST.append(EnvHost(EnvHostConfig(max_threads=4096, min_threads=160, step_timeout_s=60,
                                           gil_switch_interval_s=0.0002, gc_freeze=True, reuse_envs=True,
                                           cpu_affinity=tuple(PIN_CPU))))
    return _HOST[0]


async def make_scheduler(task: TaskSpec, choose, gen_s: float, cfg: SchedulerConfig,
                         buffer: SampleBuffer | None = None, warm: int = 0,
                         capacity: DecodeCapacity | None = None, interaction=None) -> RolloutScheduler:
    """A scheduler over the shared host with ``warm`` envs of the task created before the clock starts
    (both modes alike: environments are launched ahead of the step, then reset per trajectory). With
    ``capacity`` the policy waits on a shared capacity-limited decode loop instead of sleeping ``gen_s``; with
    ``interaction`` (BatchedInteraction) the env manager plays in lockstep batches."""
    tok = ByteTokenizer()
    policy = ScriptedPolicy(tok, choose, latency_s=gen_s)
    if capacity is not None:
        policy = CapacityLimitedLLM(policy, capacity)
    pool = EnvPool([env_host()])
    await env_host().close_idle(CloseIdleEnvs())
    if warm:
        await pool.prewarm(task.env_id, task.env_kwargs, task.faults, warm)
    manager = EnvManager(policy, tok, pool)
    return RolloutScheduler([task], interaction(manager) if interaction else manager, cfg, buffer=buffer)


def frozenlake_task(mu: float, sigma: float, seed: int) -> TaskSpec:
    faults = {"mean": mu, "std": sigma, "fault_seed": seed}
    return TaskSpec("frozenlake", "rollart/FrozenLake-v0", faults=faults, max_turns=12)


@functools.lru_cache(maxsize=None)
def choose_frozenlake_obs(obs: str) -> str:
    return shortest_path_action(obs)


def choose_frozenlake(tid: str, obs: str) -> str:
    """The scripted "LLM": BFS on the grid (memoised: the stand-in's own CPU is not under test)."""
    return choose_frozenlake_obs(obs)


async def batched_time(mu: float, sigma: float, envs: int, batches: int, seed: int) -> float:
    """Batched (lockstep), one batch after another as synchronous training runs them: steady-state time per
    batch of ``envs`` trajectories over ``batches`` batches (a first one is a warm-up and not counted)."""
    cfg = SchedulerConfig(group_size=GROUP, max_concurrency=envs, seed=seed)
    sched = await make_scheduler(frozenlake_task(mu, sigma, seed), choose_frozenlake, GEN_S, cfg, warm=envs,
                                 interaction=BatchedInteraction)
    await sched.collect_batch(envs // GROUP)
    start = time.perf_counter()
    for _ in range(batches):
        await sched.collect_batch(envs // GROUP)
    return (time.perf_counter() - start) / batches


async def continuous_time(mu: float, sigma: float, envs: int, batches: int, seed: int) -> float:
    """Trajectory-level, running continuously: steady-state time per batch of ``envs`` trajectories
    (the first batch, while every env starts at once, is a warm-up and not counted)."""
    buf = SampleBuffer(BufferConfig(group_size=GROUP, capacity=4 * envs))
    cfg = SchedulerConfig(group_size=GROUP, max_concurrency=envs, seed=seed)
    sched = await make_scheduler(frozenlake_task(mu, sigma, seed), choose_frozenlake, GEN_S, cfg, buf, warm=envs)
    producer = asyncio.create_task(sched.run())
    await buf.get_batch(envs)
    start = time.perf_counter()
    for _ in range(batches):
        await buf.get_batch(envs)
    elapsed = time.perf_counter() - start
    producer.cancel()
    try:
        await producer
    except asyncio.CancelledError:
        pass
    return elapsed / batches


async def single_batch(mu: float, sigma: float, envs: int, seed: int) -> tuple[float, float]:
    """(measured, ideal critical path) for one trajectory-level batch."""
    cfg = SchedulerConfig(group_size=GROUP, max_concurrency=envs, seed=seed)
    sched = await make_scheduler(frozenlake_task(mu, sigma, seed), choose_frozenlake, GEN_S, cfg, warm=envs)
    start = time.perf_counter()
    groups = await sched.collect_batch(envs // GROUP)
    measured = time.perf_counter() - start
    ideal = max(t.info["env"]["injected_delay_total"] + t.num_turns * GEN_S for g in groups for t in g)
    return measured, ideal


async def cpu_per_turn(envs: int, seed: int, mu: float = 0.0, gen_s: float = 0.0) -> tuple[float, float, float, float]:
    """The rollout path's own cost: one trajectory-level batch of FrozenLake, by default with no injected env
    latency and an instant scripted policy (the micro-benchmark), or with latency N(mu, 0.1 mu) and a policy of
    ``gen_s`` a turn (every turn then also sleeps and wakes a thread). Returns µs per turn of (wall time, CPU of
    the whole process — loop and env threads —, CPU of the loop thread) and voluntary context switches of the
    process per turn (threads blocking on the GIL or a queue: cross-core hand-offs raise it)."""
    task = frozenlake_task(mu, 0.1 * mu, seed)
    cfg = SchedulerConfig(group_size=GROUP, max_concurrency=envs, seed=seed)
    sched = await make_scheduler(task, choose_frozenlake, gen_s, cfg, warm=envs)
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    wall, cpu, loop_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    groups = await sched.collect_batch(envs // GROUP)
    wall, cpu, loop_cpu = time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - loop_cpu
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
    turns = sum(t.num_turns for g in groups for t in g)
    return wall / turns * 1e6, cpu / turns * 1e6, loop_cpu / turns * 1e6, switches / turns


_WORD = re.compile(r"has (\d+) \w+ and buys (\d+) boxes with (\d+) \w+ each, then gives away (\d+)")


def choose_math(tid: str, obs: str) -> str:
    """Scripted solver: calculator for expressions, then the answer; word problems directly."""
    if obs.startswith("Result: "):
        return f"\\boxed{{{obs.split(': ', 1)[1]}}}"
    expr = re.search(r"What is (.*)\?", obs)
    if expr:
        return f"<calc>{expr.group(1)}</calc>"
    m = _WORD.search(obs)
    a, bags, b, c = (int(x) for x in m.groups()) if m else (0, 0, 0, 0)
    return f"\\boxed{{{a + bags * b - c}}}"


def math_task(seed: int) -> TaskSpec:
    # per call (reset + 1-2 steps): N(60 ms, 6 ms); 2% stragglers x 3*(1+Lomax(2.5)) (mean x5,
    # heavy tail); 2% failures, i.e. ~5% of trajectories fail
    faults = {"mean": 0.060, "std": 0.006, "straggler_prob": 0.02, "straggler_scale": 3.0,
              "straggler_alpha": 2.5, "fail_prob": 0.02, "on_reset": True, "fault_seed": seed}
    return TaskSpec("math", "rollart/MathTool-v0", faults=faults, max_turns=4)


async def redundancy_time(groups: int, n: int, redundant: bool, seed: int) -> tuple[float, dict, int]:
    cfg = SchedulerConfig(group_size=n, max_concurrency=4096, max_replacements=64, seed=seed,
                          extra_envs_per_group=max(1, n // 4) if redundant else 0,
                          extra_groups=max(1, groups // 4) if redundant else 0)
    warm = (groups + cfg.extra_groups) * (n + cfg.extra_envs_per_group)
    sched = await make_scheduler(math_task(seed), choose_math, 0.0, cfg, warm=warm, capacity=MATH_DECODE)
    start = time.perf_counter()
    result = await sched.collect_batch(groups)
    elapsed = time.perf_counter() - start
    assert len(result) == groups and all(t.reward == 1.0 for g in result for t in g)
    return elapsed, dict(sched.counters), max(sched.manager.policy.batch_sizes, default=0)


async def main_async(args) -> str:
    # both sides averaged over ITERATIONS steady-state batches, as Fig. 11b averages ten iterations
    envs, batches, seeds, r2_repeats = (64, 3, 5, 1) if args.quick else (256, ITERATIONS, 9, 3)
    sigmas = [0.1, 0.5, 1.0] if args.quick else [0.1, 0.25, 0.5, 0.75, 1.0]
    micro = [await cpu_per_turn(128, seed) for seed in range(5)]  # least-disturbed of 5 (shared machine)
    wall_us, cpu_us, loop_us = (min(m[k] for m in micro) for k in range(3))
    vcsw = statistics.median(m[3] for m in micro)
    print(f"micro (128 envs, no injected latency, instant policy): wall={wall_us:.0f}us/turn "
          f"cpu={cpu_us:.0f}us/turn loop_thread_cpu={loop_us:.0f}us/turn (min of 5) "
          f"voluntary_switches={vcsw:.2f}/turn (median) cpus={sorted(os.sched_getaffinity(0))}", flush=True)
    # the CPU of a turn as the runs below spend it (each turn also sleeps and wakes a thread): one batch at MU_MIN
    turn_us = (await cpu_per_turn(envs, seed=99, mu=MU_MIN, gen_s=GEN_S))[1]
    mu = max(MU_MIN, envs * turn_us * 1e-6 / ROLLOUT_CPU_SHARE)
    print(f"env latency per turn: mu={mu * 1e3:.0f} ms (the paper's 10 s scaled; "
          + (f"raised from {MU_MIN * 1e3:.0f} ms so that {envs} envs x {turn_us:.0f} us of rollout CPU a turn "
             f"take at most {ROLLOUT_CPU_SHARE:.0%} of the core)" if mu > MU_MIN else
             f"{envs} envs x {turn_us:.0f} us a turn take {envs * turn_us * 1e-6 / mu:.0%} of the core)"), flush=True)
    r2 = []
    for i, frac in enumerate(sigmas):
        sigma = frac * mu
        runs = []
        for rep in range(r2_repeats):  # interleaved repeats; the median damps load spikes
            seed = 100 * i + rep
            b = await batched_time(mu, sigma, envs, batches, seed)
            c = await continuous_time(mu, sigma, envs, batches, seed)
            run = {"batched": b, "traj": c, "ratio": b / c}
            if rep == 0 or not args.quick:  # --quick runs one repeat (time budget)
                m, ideal = await single_batch(mu, sigma, envs, seed)
                run.update(single=m, ideal=ideal, single_ratio=b / m, vs_ideal=m / ideal)
            runs.append(run)
        row = {k: statistics.median(r[k] for r in runs if k in r) for k in runs[0]}
        row["sigma_frac"] = frac
        r2.append(row)
        print(f"sigma={frac:.2f}mu batched_step={row['batched']:.3f}s traj_step={row['traj']:.3f}s "
              f"traj_vs_batch={row['ratio']:.2f}x single_batch_traj={row['single']:.3f}s "
              f"single_ratio={row['single_ratio']:.2f}x ideal={row['ideal']:.3f}s "
              f"vs_ideal={row['vs_ideal']:.3f} (runs: " + " ".join(f"{r['ratio']:.2f}" for r in runs) + ")",
              flush=True)

    grid = [(4, 4), (4, 8), (8, 8)] if args.quick else [(4, 4), (4, 8), (8, 4), (8, 8), (16, 8), (16, 16)]
    red = []
    for gi, (g, n) in enumerate(grid):
        ratios, base, redu, peak = [], [], [], [0, 0]
        launched = failed = 0
        for r in range(seeds):  # baseline and redundant on the same seed, interleaved
            t0, c0, p0 = await redundancy_time(g, n, False, seed=100 * gi + r)
            t1, _, p1 = await redundancy_time(g, n, True, seed=100 * gi + r)
            ratios.append(t0 / t1)
            base.append(t0)
            redu.append(t1)
            peak = [max(peak[0], p0), max(peak[1], p1)]
            launched, failed = launched + c0.get("launched", 0), failed + c0.get("failed", 0)
        red.append({"groups": g, "n": n, "speedup": statistics.median(ratios), "ratios": ratios,
                    "fail_rate": failed / max(1, launched)})
        print(f"redundancy groups={g} n={n} baseline={statistics.median(base):.3f}s "
              f"redundant={statistics.median(redu):.3f}s speedup={red[-1]['speedup']:.2f}x (median of "
              f"{seeds} seeds: " + " ".join(f"{x:.2f}" for x in sorted(ratios)) + f") peak_decode_batch="
              f"{peak[0]}/{peak[1]} env_fail_rate={red[-1]['fail_rate']:.3f}", flush=True)

    plot(r2, red, mu)
    cells = [x["speedup"] for x in red]
    grid_txt = ",".join(f"{x['groups']}x{x['n']}:{x['speedup']:.2f}" for x in red)
    return (f"traj_vs_batch_sigma_min={r2[0]['ratio']:.2f} traj_vs_batch_sigma_max={r2[-1]['ratio']:.2f} "
            f"single_batch_sigma_min={r2[0]['single_ratio']:.2f} single_batch_sigma_max={r2[-1]['single_ratio']:.2f} "
            f"vs_ideal={max(x['vs_ideal'] for x in r2):.3f} redundant_speedup={statistics.median(cells):.2f} "
            f"redundant_speedup_min_cell={min(cells):.2f} redundant_speedup_max_cell={max(cells):.2f} "
            f"redundant_grid={grid_txt} cpu_us_per_turn={cpu_us:.0f} turn_cpu_us={turn_us:.0f} envs={envs} mu_s={mu:.3f} "
            f"pin_cpu={PIN_CPU[0] if PIN_CPU else -1}")


def plot(r2: list[dict], red: list[dict], mu: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [x["sigma_frac"] for x in r2]
    a.plot(xs, [x["ratio"] for x in r2], "o-", label="trajectory-level (continuous) vs batched")
    a.plot(xs, [x["single_ratio"] for x in r2], "s--", label="single batch vs batched")
    a.plot(xs, [x["vs_ideal"] for x in r2], "^:", label="trajectory-level / ideal critical path")
    a.plot([0.1, 1.0], [1.23, 2.27], "k+", markersize=12, label="paper Fig. 11b (1.23x, 2.27x)")
    a.axhline(1.10, color="g", linestyle=":", linewidth=0.8, label="vs ideal goal <= 1.10")
    a.set_xlabel(f"sigma / mu (per-turn env latency, mu = {mu * 1e3:.0f} ms)")
    a.set_ylabel("step-time ratio")
    a.set_title("R2: trajectory-level vs batched env interaction")
    a.legend(fontsize=7)
    labels = [f"G={x['groups']} n={x['n']}" for x in red]
    b.bar(labels, [x["speedup"] for x in red], alpha=0.6, label="per-cell median over seeds")
    for i, x in enumerate(red):
        b.plot([i] * len(x["ratios"]), x["ratios"], "k.", markersize=4)
    b.axhline(1.62, color="k", linestyle="--", label="paper 1.62x")
    b.axhline(1.0, color="r", linestyle=":", linewidth=0.8)
    b.set_ylabel("rollout speedup (baseline / redundant), dots = seeds")
    b.set_title("Redundant envs: stragglers + ~5% failures, capacity-limited LLM (SIMULATED)", fontsize=9)
    b.legend(fontsize=7)
    fig.suptitle("measured on this machine: real rollout code, scripted policy, injected env latency; right: "
                 "LLM stand-in with fixed decode capacity", fontsize=8)
    fig.tight_layout()
    out = os.path.join(os.path.dirname(__file__), "plots", "rollout.png")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="< 60 s: fewer envs, batches and repeats")
    parser.add_argument("--pin-cpu", type=int, default=min(os.sched_getaffinity(0)),
                        help="CPU the process (event loop and env threads) is pinned to, as an env-host "
                             "process is (EnvHostConfig.cpu_affinity); -1: not pinned")
    args = parser.parse_args()
    if args.pin_cpu >= 0:
        PIN_CPU.append(args.pin_cpu)
    start = time.perf_counter()
    line = asyncio.run(main_async(args))
    print(f"total {time.perf_counter() - start:.1f}s")
    print(line)


if __name__ == "__main__":
    main()
