"""Asynchronous training vs the paper's baselines: step time of ROLLART (α=1) vs Sync+, One-off, AReaL.

    python tools/bench/async_training.py --quick   # a few steps per mode: step-time ratios (< 60 s)
    python tools/bench/async_training.py           # time-to-score per mode (Fig. 10a) + α sweep 1..6 (Fig. 13)

rollart.txt §7.1-§7.4 on a CPU-scaled workload. One process runs every configuration one after the
other on the same tasks, seed and tiny model (~0.9M params, built by make_tiny_model):

* disaggregated on one machine (R4: "training and rollout execute concurrently on separate GPUs"): one
  trainer process pinned to core 0 serves every mode (``reset`` to the initial weights between modes);
  this coordinator — envs, scheduler, rewards, inference workers — is pinned to the other core(s).
* workload: three tasks mixed uniformly, as in recipes/grpo_multitask.py — FrozenLake (multi-turn,
  1-token answers: prefill-heavy), MathTool (24-token answers: decode-heavy), GuessNumber (multi-turn
  game). Every env step sleeps a Gaussian latency N(μ, μ/2) with 3 % heavy-tailed stragglers
  (envs/faults.py; the shape of §7.3 R2). The two time scales are calibrated to the paper's measured
  step breakdown (§3, Fig. 3: generation 54 %, training 23 %, environment 15 %, other 8 %): with
  ``--env-scale 0.005`` (μ = 10 s × 0.005 = 50 ms per turn) and ``--gen-scale 3`` (simulated Qwen3-8B
  time ×3: our answers are tens of tokens, the paper's thousands), a Sync+ step spends ~22 % of its time
  training and its trajectories ~79 % generating / ~20 % in env steps (paper: 54/(54+15) = 78 %
  generation). Each run prints this breakdown so the calibration can be checked on the machine at hand.
* ``rollart``: mode=async, α=1 (per-turn bound), hardware-affinity routing — FrozenLake to an H800
  worker, the rest to two H20 workers (simulated cost 2.85+2×1.00=4.85 vs the baselines' 2×2.85=5.70,
  85%; the paper's ROLLART/baseline cost is 83%).
* ``syncplus``: mode=sync — trajectory-level envs, async reward, then train, then update (Sync+).
* ``oneoff``: mode=oneoff — batch k+1 rolls out with weights k-1 while batch k trains.
* ``areal``: mode=areal, α=1 bounded when a trajectory starts (rollout at most α batches ahead of
  training, as AReaL's controller does), no abort of in-flight ones, no affinity routing.
* The baselines roll out on two H800 workers (the paper runs baselines all-H800).

Real vs simulated: the trainer (forward/backward/AdamW of the tiny model), the engine's tokens, the envs,
rewards, actors, ZeroMQ transport and weight store are real and run on this CPU. SIMULATED: each inference
worker additionally sleeps the step time a Qwen3-8B engine would need on its hardware class (roofline of
rollart.txt Table 2, ×sim_time_scale); env latency is injected sleep; weight pulls from the store cross a
SIMULATED slower link (``weight_link_bytes_per_s``), standing in for the cross-cluster hop of Table 4.

Last line: ``async_vs_syncplus= async_vs_oneoff= async_vs_areal= exposed_pull_frac= …`` — step-time ratios
(baseline s/step ÷ rollart s/step, > 1 means rollart is faster); in the full run also time-to-score ratios.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import envs  # noqa: E402,F401
from rollart.actors import ActorSystem  # noqa: E402
from rollart.actors.cpus import ENV_VAR, format_cpus  # noqa: E402
from rollart.pipeline import Coordinator, PipelineConfig  # noqa: E402
from rollart.rollout.env_manager import TaskSpec  # noqa: E402
from rollart.tools.make_tiny_model import make_tiny_model  # noqa: E402
from rollart.trainer import TrainerConfig  # noqa: E402

ENV_SCALE = 0.005
"""Paper env latency × this: μ=10 s -> 50 ms per turn (calibrated to Fig. 3's breakdown, see above)."""
FAULTS = {"mean": 10.0 * ENV_SCALE, "std": 5.0 * ENV_SCALE, "straggler_prob": 0.03, "straggler_scale": 3.0}
"""Per-turn Gaussian latency N(μ, μ/2) with 3% stragglers ×(3·Pareto) — the paper's shape, scaled."""
GEN_SCALE = 3.0
"""Simulated Qwen3-8B engine time × this (calibrated to Fig. 3's breakdown, see above)."""
SIM_TIME_SCALE = GEN_SCALE
LINK_BYTES_PER_S = 12e6
"""SIMULATED store -> inference link (12 MB/s: the 3.6 MB tiny model takes ~0.3 s to pull)."""

BASE_TASKS = [
    TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
             max_new_tokens=1, max_turns=8),
    TaskSpec(name="MathTool", env_id="rollart/MathTool-v0", max_new_tokens=24, max_turns=3),
    TaskSpec(name="GuessNumber", env_id="rollart/GuessNumber-v0", env_kwargs={"high": 16},
             max_new_tokens=4, max_turns=6),
]
TRAIN_TASKS = [dataclasses.replace(t, faults=dict(FAULTS)) for t in BASE_TASKS]
EVAL_TASKS = BASE_TASKS  # greedy evaluation without injected latency (it measures the policy, not the envs)

AFFINITY = {"FrozenLake": "H800", "default": "H20"}
MODES = {
    "rollart": dict(mode="async", alpha=1, num_inference_workers=3, worker_classes=("H800", "H20", "H20"),
                    hw_affinity=AFFINITY),
    "syncplus": dict(mode="sync", num_inference_workers=2, worker_classes=("H800",), hw_affinity={}),
    "oneoff": dict(mode="oneoff", num_inference_workers=2, worker_classes=("H800",), hw_affinity={}),
    "areal": dict(mode="areal", alpha=1, num_inference_workers=2, worker_classes=("H800",), hw_affinity={}),
}


def set_workload(env_scale: float, gen_scale: float, math_tokens: int = 24) -> None:
    """Rescale the injected env latency (paper μ=10 s, σ=5 s) and the simulated generation time, and set
    MathTool's answer budget."""
    global SIM_TIME_SCALE
    if env_scale <= 0 or gen_scale <= 0:
        raise SystemExit(f"--env-scale and --gen-scale must be > 0, got {env_scale}, {gen_scale}")
    SIM_TIME_SCALE = gen_scale
    FAULTS.update(mean=10.0 * env_scale, std=5.0 * env_scale)
    for i, t in enumerate(TRAIN_TASKS):
        tokens = math_tokens if t.name == "MathTool" else t.max_new_tokens
        TRAIN_TASKS[i] = dataclasses.replace(t, faults=dict(FAULTS), max_new_tokens=tokens)


def split_cores() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(trainer cores, rollout cores): training and rollout on separate cores of this machine, as on
    separate clusters (rollart.txt R4) — the trainer process on the first core; this coordinator (envs,
    scheduler, rewards, inference workers) on the rest. Every mode gets the same split."""
    cores = tuple(sorted(os.sched_getaffinity(0)))
    return (cores[:1], cores[1:]) if len(cores) >= 2 else ((), ())


async def start_trainer(system: ActorSystem, cfg: PipelineConfig, model: str, cpus: tuple[int, ...]):
    """One trainer process for every mode (``reset`` between them): spawning one per mode would cost more
    than the --quick budget. It is the same TrainerActor the pipeline spawns."""
    from rollart.models import load_tokenizer
    tcfg = dataclasses.replace(cfg.trainer, model_path=model, seed=cfg.seed,
                               pad_id=load_tokenizer(model).pad_token_id or 0)
    env = {ENV_VAR: format_cpus(cpus)} if cpus else {}
    return await system.spawn("rollart.pipeline.trainer_actor:TrainerActor", dataclasses.asdict(tcfg),
                              name="trainer", mode="process", env=env)


def base_config(model: str, logdir: str, seed: int) -> PipelineConfig:
    return PipelineConfig(
        model=model, logdir=logdir, seed=seed, batch_groups=3, group_size=4, max_concurrency=24,
        simulate_hardware=True, sim_time_scale=SIM_TIME_SCALE, bucket_bytes=1 << 20,
        weight_link_bytes_per_s=LINK_BYTES_PER_S,
        trainer=TrainerConfig(lr=1e-3, grad_clip=1.0, num_threads=1, adv_eps=1e-4),
        quiet=True, checkpoint_every=0, eval_episodes=1, eval_every=0)


async def run_mode(name: str, cfg: PipelineConfig, trainer) -> dict:
    t0 = time.perf_counter()
    await trainer.call("reset")
    result = await Coordinator(cfg, TRAIN_TASKS, eval_tasks=EVAL_TASKS, trainer=trainer).run()
    first = result.history[0]["system/elapsed_s"] if result.history else 0.0
    hist = result.history
    elapsed = [h["system/elapsed_s"] for h in hist]
    skip = 1 if len(hist) > 2 else 0  # the first step includes the pipeline filling up
    per_step = (elapsed[-1] - elapsed[0]) / (len(hist) - 1) if skip else elapsed[-1] / max(len(hist), 1)
    accum = sum(h.get("system/weight_pull_accum_s", 0.0) for h in hist[skip:])
    exposed = sum(h.get("system/weight_pull_exposed_s", 0.0) for h in hist[skip:])
    reached = None
    if cfg.stop_at_success is not None:
        for step, success in result.evals:
            if step and all(v >= cfg.stop_at_success for k, v in success.items() if k != "mean"):
                reached = next(h["system/elapsed_s"] for h in hist if h["step"] == step)
                break
    mean = lambda key: sum(h.get(key, 0.0) for h in hist[skip:]) / max(len(hist) - skip, 1)  # noqa: E731
    parts = {k: sum(t.get(k, 0.0) for t in result.timings) for k in ("generate", "env_step", "env_reset", "total")}
    split = {k: parts[k] / parts["total"] if parts["total"] else 0.0 for k in ("generate", "env_step", "env_reset")}
    out = dict(name=name, mode=cfg.mode, alpha=cfg.alpha, steps=len(hist), step_s=per_step,
               train_s=mean("system/train_s"), wait_s=mean("system/get_batch_wait_s"),
               push_s=mean("system/weight_push_s"), pull_accum_s=accum, pull_exposed_s=exposed,
               staleness_max=max((h.get("rollout/staleness_max", 0.0) for h in hist), default=0.0),
               success=mean("charts/success"), evals=[(s, e["mean"]) for s, e in result.evals],
               curve=[(h["system/elapsed_s"], h.get("charts/success", 0.0)) for h in hist],
               time_to_score_s=reached, wall_s=time.perf_counter() - t0, aborted=result.buffer.get("aborted"),
               traj_split=split, buffer={k: v for k, v in result.buffer.items() if "/" in k})
    print(f"{name:>10}: {len(hist)} steps, {per_step:.2f} s/step (train {out['train_s']:.2f} s, "
          f"get_batch wait {out['wait_s']:.2f} s), pull accum {accum:.2f} s exposed {exposed:.2f} s, "
          f"staleness max {out['staleness_max']:.0f}, aborted {out['aborted']}, time-to-score {reached}, wall "
          f"{out['wall_s']:.0f} s (first step at {first:.1f} s, tokens/step {hist[-1].get('system/tokens_per_step', 0):.0f}; "
          f"trajectory time: generate {split['generate']:.0%} env_step {split['env_step']:.0%} "
          f"env_reset {split['env_reset']:.0%}; train {out['train_s'] / per_step:.0%} of a step; {out['buffer']})"
          + (" evals: " + " ".join(f"{step}:" + "/".join(f"{v:.2f}" for v in e.values()) for step, e in result.evals)
             if result.evals else ""),
          flush=True)
    return out


def plot(results: dict, sweep: list[dict], path: Path, quick: bool) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3 if not quick else 1, figsize=(15 if not quick else 6, 4), squeeze=False)
    ax = axes[0][0]
    names = list(results)
    ax.bar(names, [results[n]["step_s"] for n in names], color=["tab:green", "tab:gray", "tab:blue", "tab:orange"],
           label="step time")
    ax.bar(names, [results[n]["train_s"] for n in names], width=0.3, color="black", alpha=0.6,
           label="train_step (CPU-real)")
    ax.set_ylabel("s / step")
    ax.legend(fontsize=8)
    ax.set_xlabel("gen + env latency SIMULATED, training CPU-real", fontsize=8)
    ax.set_title("step time by mode" + (" (--quick: few steps)" if quick else ""))
    if not quick:
        ax = axes[0][1]
        for n in names:
            if results[n]["evals"]:
                ax.plot([t for t, _ in results[n]["curve"]], [s for _, s in results[n]["curve"]], label=n)
        ax.set_xlabel("training wall time (s)")
        ax.set_ylabel("rollout success (train batches)")
        ax.set_title("Fig. 10a analogue: success vs time")
        ax.legend()
        sweep_panel(axes[0][2], sweep, "s / step")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def sweep_panel(ax, sweep: list[dict], ylabel: str) -> None:
    ax.plot([r["alpha"] for r in sweep], [r["step_s"] for r in sweep], "o-")
    ax.set_xlabel("α (asynchronous bound)")
    ax.set_ylabel(ylabel)
    ax.set_title("Fig. 13 analogue: ROLLART step time vs α")


def plot_sweep(sweep: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    sweep_panel(ax, sweep, "s / step (SIMULATED gen + env latency, CPU-real training)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


async def run_all(args, steps: int, tmp: str) -> tuple[dict, list]:
    model = str(make_tiny_model(Path(tmp) / "tiny", seed=args.seed))
    trainer_cpus, rollout_cpus = split_cores() if args.split_cores else ((), ())
    base = dataclasses.replace(base_config(model, tmp, args.seed), actor_mode=args.actor_mode,
                               rollout_cpus=rollout_cpus)
    results, sweep = {}, []
    async with ActorSystem(heartbeat_interval=1.0, heartbeat_timeout=60.0) as system:
        trainer = await start_trainer(system, base, model, trainer_cpus)
        for name, over in MODES.items():
            if args.sweep_only:
                break
            if args.only and name not in args.only.split(","):
                continue
            cfg = dataclasses.replace(base, run_name=name, total_steps=steps, eval_at_end=not args.quick, **over)
            if not args.quick:
                cfg = dataclasses.replace(cfg, eval_every=5, eval_episodes=4, stop_at_success=args.target,
                                          time_limit_s=args.mode_budget_s)
            results[name] = await run_mode(name, cfg, trainer)
        if not args.quick or args.sweep_only:
            for alpha in range(1, 7):
                cfg = dataclasses.replace(base, run_name=f"alpha{alpha}", total_steps=args.sweep_steps,
                                          eval_at_end=False, **{**MODES["rollart"], "alpha": alpha})
                sweep.append(await run_mode(f"alpha={alpha}", cfg, trainer))
    return results, sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few steps per mode: step-time ratios only")
    ap.add_argument("--steps", type=int, default=0, help="steps per mode (default 4 quick, 200 full)")
    ap.add_argument("--target", type=float, default=0.75, help="full run: greedy success target on every task")
    ap.add_argument("--mode-budget-s", type=float, default=600.0, help="full run: time limit per mode")
    ap.add_argument("--sweep-steps", type=int, default=12, help="full run: steps per α in the sweep")
    ap.add_argument("--sweep-only", action="store_true",
                    help="only the α sweep 1..6 (--sweep-steps each), writes plots/async_training_alpha.png")
    ap.add_argument("--env-scale", type=float, default=ENV_SCALE,
                    help="paper env latency (mu=10 s, sigma=5 s) x this (default %(default)s)")
    ap.add_argument("--gen-scale", type=float, default=GEN_SCALE,
                    help="simulated Qwen3-8B generation time x this (default %(default)s)")
    ap.add_argument("--math-tokens", type=int, default=24,
                    help="MathTool answer budget; 128 makes it decode-heavy like the paper's long-CoT tasks "
                         "(re-calibrate with --gen-scale 1; see BENCHMARKS.md)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--actor-mode", default="inprocess", choices=("process", "inprocess"),
                    help="actors as processes (disaggregated, default) or in this process (threads)")
    ap.add_argument("--split-cores", action=argparse.BooleanOptionalAction, default=True,
                    help="trainer process on core 0, rollout on the other cores (default on)")
    ap.add_argument("--only", default="", help="comma-separated modes to run (debugging)")
    ap.add_argument("--json", default="", help="also write every measurement to this file")
    args = ap.parse_args()
    set_workload(args.env_scale, args.gen_scale, args.math_tokens)
    logging.basicConfig(level=logging.ERROR)
    steps = args.steps or (3 if args.quick else 200)
    with tempfile.TemporaryDirectory() as tmp:
        results, sweep = asyncio.run(run_all(args, steps, tmp))
    if args.sweep_only:
        plot_sweep(sweep, Path(__file__).parent / "plots" / "async_training_alpha.png")
        best = min(sweep, key=lambda r: r["step_s"])
        print("SIMULATED generation + env latency + pull link as in the mode comparison; REAL tiny-model training")
        print(" ".join(f"alpha{r['alpha']}_step_s={r['step_s']:.2f}" for r in sweep)
              + f" alpha_best={best['alpha']} alpha_best_vs_1={sweep[0]['step_s'] / best['step_s']:.2f}"
              + f" sweep_steps={args.sweep_steps}")
        return
    if len(results) < len(MODES):
        return
    plot(results, sweep, Path(__file__).parent / "plots" / "async_training.png", args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "sweep": sweep}, indent=1, default=str))
    r = results["rollart"]
    ratio = {n: results[n]["step_s"] / r["step_s"] for n in ("syncplus", "oneoff", "areal")}
    frac = r["pull_exposed_s"] / r["pull_accum_s"] if r["pull_accum_s"] else float("nan")
    print(f"SIMULATED: generation time (Qwen3-8B roofline on H800/H20 x{SIM_TIME_SCALE}), env latency (injected "
          f"sleep N({FAULTS['mean']}, {FAULTS['std']}) s/turn + stragglers), "
          f"weight-pull link ({LINK_BYTES_PER_S / 1e6:.0f} MB/s); REAL: tiny-model training, engine, envs, actors "
          f"({args.actor_mode})")
    line = (f"async_vs_syncplus={ratio['syncplus']:.2f} async_vs_oneoff={ratio['oneoff']:.2f} "
            f"async_vs_areal={ratio['areal']:.2f} exposed_pull_frac={frac:.2f} "
            f"rollart_step_s={r['step_s']:.2f} steps_per_mode={steps}")
    if args.quick:
        line += " measure=step_time_ratio_quick"
    else:
        tts = {n: results[n]["time_to_score_s"] for n in results}
        for n in ("syncplus", "oneoff", "areal"):
            v = tts[n] / tts["rollart"] if tts[n] and tts["rollart"] else float("nan")
            line += f" tts_async_vs_{n}={v:.2f}"
        best = min(sweep, key=lambda s: s["step_s"])
        line += f" alpha_best={best['alpha']} alpha_best_vs_1={sweep[0]['step_s'] / best['step_s']:.2f}"
    print(line)


if __name__ == "__main__":
    main()
