"""PlexRL §6.2 live on emulated GPUs (tools/bench/multiplex.py part 5; SIMULATED timing): two identical FrozenLake
jobs (recipes/multiplex_two_jobs.py, pair=lake+lake, async α=1), each alone on a private trainer, then both on ONE
shared trainer (the real TrainingService, Router and HRRS scheduler deciding), every role on emulated H800s.

Calibrated from PlexRL's measured 7B job (§6.3 table; ``rollart.sim.multiplex``), relative to the workload's own
rollout, as the paper's shape is a ratio and our workload is not its math task:
* rollout: Qwen3-8B (the nearest shape to the paper's Qwen2.5-7B) on Tab. 1's 2 rollout GPUs per job, as 2 one-GPU
  H800 workers (the paper: one TP-2 replica), at the roofline of ``rollart.hardware``;
* a train step: compute_log_prob + update_actor + sync_weight, 57.5 s of the 289.0 s rollout cycle: the trainer's
  GPU count is set so a step of the workload's tokens lasts that share of its measured rollout (the weight pull
  itself then runs at the real plane's speed, milliseconds);
* a context switch on the shared trainer: §6.2's 19.0 s load of the 30B optimizer state scaled to 7B by size, 4.43 s
  of the 289.0 s cycle, held by the emulated device like an operation;
* the time scale: grown until the tiny model's real engine compute is at most a quarter of its emulated time (the
  two jobs' engines share the rollout core when packed) and its real train step at most 0.8 of the emulated one.

GPU time as §6.2 counts it, total GPU time (training + rollout) per completed step, both sides the same steps:
a private job holds Tab. 1's 2 + 8 GPUs for its run; packed, each job holds its 2 rollout GPUs for its own run and the
8-GPU training pool is held for the shared run (from starting the service).
  -> live_gpu_hours_saved_pct = 100 (1 - packed GPU-seconds / private GPU-seconds)
  -> live_packed_slowdown     = a job's seconds per step packed / alone (mean of the two jobs)
The same with each job's train step 0.9 of its rollout (``train_share``; a crippled configuration: two jobs'
training no longer fits one pool) is the test that the key can fail (tests/multiplex/test_plexrl_live.py).
Limits: the jobs are FrozenLake with a tiny model, not the paper's math task; only training is shared, as in §6.2;
the share is set against the calibration's synchronous rollout, and an asynchronous step of these jobs may last longer
than that (α=1 aborts): each run prints the share its steps had. Greedy evaluation only at each job's end.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

import tts_paper
from rollart.emulation import TRAIN_MFU, TrainerSpeedConfig
from rollart.sim.multiplex import SETUP_S, SHAPES, table1_pools

CYCLE_S = SHAPES["7B"]["cycle"]
"""PlexRL §6.3: the 7B job's rollout cycle, seconds."""
TRAIN_S = sum(SHAPES["7B"]["ops"])
"""PlexRL §6.3: its training operations a step (compute_log_prob, update_actor, sync_weight), seconds."""
SWITCH_S = SETUP_S["7B"]
ROLLOUT_GPUS, TRAIN_GPUS = table1_pools("7B")
ENGINE_REAL_MAX = 0.25
"""Real engine compute at most this share of its emulated time, measured alone (packed, two jobs share the core)."""
TRAINER_REAL_MAX = 0.8
"""The real train step at most this share of its emulated time (no train step of its full runs outran it)."""
TIME_SCALE = 8.0
CALIBRATION_TRAINER_GPUS = 4096
"""The calibration's trainer emulates this many GPUs, so its steps last their real time (what it must measure)."""


def recipe():
    """recipes.multiplex_two_jobs (MultiplexRecipe, run), the repository root on the import path."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from recipes.multiplex_two_jobs import MultiplexRecipe, run
    return MultiplexRecipe, run


@dataclasses.dataclass
class Calibration:
    time_scale: float
    trainer_gpus: int
    switch_s: float
    """Emulated seconds of a switch, before the time scale."""
    rollout_s: float
    """Rollout seconds a step (scaled), as measured and grown."""
    line: str


async def calibrate(common: dict, steps: int = 3, tries: int = 2, train_share: float = TRAIN_S / CYCLE_S,
                    fit_trainer: bool = True) -> Calibration:
    """Sync runs of the two jobs alone on emulated rollout GPUs, the trainer at its real speed: rollout seconds
    and tokens a step, the real train step, the engines' real/emulated time; the time scale grown until both fit
    (a second run at the grown scale when ``tries`` allows). Without ``fit_trainer`` only the engines set it: train
    steps may then outrun their emulated time, and the runs count them."""
    MultiplexRecipe, run = recipe()
    scale = TIME_SCALE
    for attempt in range(tries):
        out = await run(MultiplexRecipe(**{**common, "total_steps": steps, "alone": True, "mode": "sync",
                                           "simulate_hardware": True, "sim_time_scale": scale,
                                           "trainer_gpus": CALIBRATION_TRAINER_GPUS}))
        jobs = [v for v in out.values() if isinstance(v, dict)]
        rollout = statistics.mean(j["rollout_s"] for j in jobs)
        engine = max(j["engine_real_s"] / j["engine_emulated_s"] for j in jobs)
        real_train = max(j["train_real_max_s"] for j in jobs)
        grow = tts_paper.growth(engine, real_train, rollout, fit_trainer, train_share, ENGINE_REAL_MAX,
                                TRAINER_REAL_MAX)
        if grow == 1.0 or attempt == tries - 1:
            break
        scale *= grow * 1.1
    scale, rollout = scale * grow, rollout * grow
    tokens = statistics.mean(j["tokens"] for j in jobs)
    one_gpu = TrainerSpeedConfig("H800", 1, "Qwen3-8B", TRAIN_MFU, scale).step_seconds(int(tokens))
    gpus = max(1, round(one_gpu / (rollout * train_share)))
    switch = rollout / scale * SWITCH_S / CYCLE_S
    line = (f"calibration (alone, sync, {steps} steps, SIMULATED timing): time scale x{scale:.3g} (real/emulated "
            f"engine {engine / grow:.2f}), rollout {rollout:.2f} s a step, train step {one_gpu / gpus:.2f} s on "
            f"{gpus} x H800 ({train_share:.3f} of the rollout; real {real_train:.2f} s), switch "
            f"{switch * scale:.2f} s")
    return Calibration(scale, gpus, switch, rollout, line)


def gpu_seconds(alone: dict, packed: dict, jobs: list[str]) -> tuple[float, float]:
    """(private, packed) GPU-seconds: a private job holds rollout + training GPUs for its run; packed, each job its
    rollout GPUs for its run and the shared training pool for the whole shared run."""
    private = sum((ROLLOUT_GPUS + TRAIN_GPUS) * alone[j]["wall_s"] for j in jobs)
    shared = sum(ROLLOUT_GPUS * packed[j]["wall_s"] for j in jobs) + TRAIN_GPUS * packed["run_s"]
    return private, shared


async def live(steps: int, calibration_steps: int = 3, tries: int = 2, fit_trainer: bool = True,
               train_share: float = TRAIN_S / CYCLE_S) -> dict:
    """Calibrate (``calibrate``), then the two jobs alone and packed (async α=1, the same steps); the key figures
    and the runs."""
    MultiplexRecipe, run = recipe()
    with tempfile.TemporaryDirectory(prefix="rollart-plexrl-") as tmp:
        common = dict(pair="lake+lake", share="trainer", evals=0, eval_episodes=1, batch_groups=1,
                      actor_mode="inprocess")
        cal = await calibrate(dict(common, logdir=f"{tmp}/calibration"), steps=calibration_steps, tries=tries,
                              train_share=train_share, fit_trainer=fit_trainer)
        print(f"[live 5] {cal.line}", flush=True)
        emulated = dict(common, total_steps=steps, simulate_hardware=True, sim_time_scale=cal.time_scale,
                        trainer_gpus=cal.trainer_gpus, switch_s=cal.switch_s)
        alone = await run(MultiplexRecipe(alone=True, logdir=f"{tmp}/alone", **emulated))
        packed = await run(MultiplexRecipe(logdir=f"{tmp}/packed", **emulated))
    jobs = [j for j, v in alone.items() if isinstance(v, dict)]
    private, shared = gpu_seconds(alone, packed, jobs)
    runs = [r[j] for r in (alone, packed) for j in jobs]
    out = {"saved_pct": 100 * (1 - shared / private), "private_gpu_s": private, "packed_gpu_s": shared,
           "slowdown": statistics.mean(packed[j]["step_s"] / alone[j]["step_s"] for j in jobs),
           "outran": sum(r["train_outran"] for r in runs),
           "engine_real_max": max(r["engine_real_s"] / r["engine_emulated_s"] for r in runs),
           "alone": alone, "packed": packed, "calibration": cal}
    emulated_only = out["outran"] == 0 and out["engine_real_max"] <= 0.5
    out["timing"] = "SIMULATED" if emulated_only else "MIXED"
    for j in jobs:
        print(f"[live 5] {j}: alone {alone[j]['wall_s']:.1f} s ({alone[j]['step_s']:.2f} s/step), packed "
              f"{packed[j]['wall_s']:.1f} s ({packed[j]['step_s']:.2f} s/step); train step emulated "
              f"{packed[j]['train_emulated_s']:.2f} s, {alone[j]['train_emulated_s'] / alone[j]['step_s']:.2f} of an "
              f"asynchronous step alone (the calibration's share of a synchronous rollout: {train_share:.2f})",
              flush=True)
    print(f"[live 5] GPU-seconds (Tab. 1 pools: {ROLLOUT_GPUS} rollout + {TRAIN_GPUS} training per job): private "
          f"{private:.0f}, packed {shared:.0f} (shared run {packed['run_s']:.1f} s) -> saved {out['saved_pct']:.1f}%, "
          f"packed slowdown x{out['slowdown']:.2f}; train steps outran {out['outran']:.0f}, real/emulated engine "
          f"up to {out['engine_real_max']:.2f} [{out['timing']} timing"
          + ("" if emulated_only else ": some steps ran at this CPU's speed, not the emulated GPUs'") + "]", flush=True)
    return out
