"""``time_to_score.py --profile paper``: every role on emulated hardware (``rollart.emulation``), its times set from
RollArt's own measurements of a Qwen3-8B training step, with the quickstart's real learning underneath.

The CPU profile's steps are training-bound (a 0.9M model's train step is the whole step), so overlapping rollout
with training cannot pay there. Here each role lasts what it would on the paper's hardware, relative to the
workload's own generation (SIMULATED timing, every figure so labelled):

* generation: the workload's real requests, each engine step lasting the Qwen3-8B roofline time on an H800
  (Table 2) — ``G`` seconds per Sync+ step, measured in a calibration run (3 Sync+ steps, not timed);
* training: emulated H800s (6·P·tokens at MFU 0.4), as many as make a Sync+ step train for 23/54 of its
  generation time (Fig. 3: generation 54 %, training 23 % of a step);
* environment: every env call (reset and step) sleeps N(μ, μ/2) with 3 % heavy-tailed stragglers, μ making a
  trajectory's env time 15/54 of its generation time (Fig. 3: environment 15 %);
* weight pulls: Table 4's accumulated pull for Qwen3-8B (6.2 s) over Fig. 3's generation time (0.54 x 366 s) of
  ``G``: the real model's bytes through the real weight plane at the rate that takes that long;
* the time scale: large enough that the tiny model's real engine compute stays under half the emulated time
  (else the CPU, not the emulated GPU, sets the rollout's pace).

Where it stands (2026-11-28): it runs end to end, but its full run has not been done and its ``--quick`` takes
about 3 minutes on 2 busy cores (every run starts three emulated workers, and each evaluation plays at the
emulated speed), over the 60 s a ``--quick`` may take; the tiny model's real train step (~1 s on one core) needs
emulated steps of several seconds to stay under its emulated time (the calibration counts the steps it outran),
so a full run of 6 modes x 3 seeds to the quickstart's target would take hours: the workload needs to be made
smaller (or the real step faster) before the full run.

Every mode rolls out on three emulated H800s (the baselines' hardware, as §7.2's scaling study runs ROLLART): a
one-task workload exercises no hardware affinity. Limits: the workload is FrozenLake with one-token actions, so
the shares above are imposed by calibration, not produced by long chains of thought; the calibration reads one
seed's first steps.
"""
from __future__ import annotations

import dataclasses
import statistics

from rollart.emulation import FIG3_STEP_SHARES
from rollart.pipeline import Coordinator, PipelineConfig
from rollart.messages import ResetTrainer

TABLE4_PULL_S = 6.2
"""RollArt Table 4: accumulated weight pull of Qwen3-8B (s), against Fig. 3's 366 s step."""
FIG3_STEP_S = 366.0
"""RollArt Fig. 3: average Qwen3-8B step (successful iterations)."""
WORKERS = {"num_inference_workers": 3, "hw_classes": ("H800",), "proxy.hw_affinity": {}}
TIME_SCALE = 8.0
"""The first time scale the calibration tries (the tiny model's engine steps on 2 busy cores need about this)."""
REAL_OVER_EMULATED_MAX = 0.5
"""The calibration raises the time scale until the real engine compute is at most this share of the emulated."""


@dataclasses.dataclass
class Calibration:
    time_scale: float
    trainer_devices: int
    env_mean_s: float
    link_bytes_per_s: float
    generation_s: float
    """Emulated generation seconds per Sync+ step (scaled)."""
    line: str = ""


def emulated(cfg: PipelineConfig, time_scale: float, devices: int, link: float) -> PipelineConfig:
    from rollart.config import apply_values
    return apply_values(dataclasses.replace(
        cfg, simulate_hardware=True, sim_time_scale=time_scale, weight_link_bytes_per_s=link,
        emulation={"model": "Qwen3-8B", "trainer_hw_class": "H800", "trainer_devices": devices,
                   "weight_link": "none" if not link else "tcp"}), WORKERS)


async def calibrate(base: PipelineConfig, task, trainer, time_scale: float = TIME_SCALE, steps: int = 3,
                    tries: int = 4) -> Calibration:
    """Measure a short Sync+ run's emulated generation, training and trajectory times; derive the profile. The
    time scale doubles (up to ``tries`` runs) while the real engine compute is over REAL_OVER_EMULATED_MAX of the
    emulated time; the last ratio is in the calibration line either way."""
    from rollart.models import ModelConfig
    for attempt in range(tries):
        cfg = dataclasses.replace(emulated(base, time_scale, 1, 0.0), mode="sync", alpha=0, total_steps=steps,
                                  stop_at_success=None, eval_every=0, eval_at_end=False, time_limit_s=0,
                                  run_name="calibration")
        await trainer.send(ResetTrainer())
        result = await Coordinator(cfg, [task], trainer=trainer).run()
        real = sum(w.get("engine_seconds", 0.0) for w in result.workers.values())
        sim = sum(w.get("simulated_scaled_seconds", 0.0) for w in result.workers.values())
        if (sim and real / sim <= REAL_OVER_EMULATED_MAX) or attempt == tries - 1:
            break  # the measured figures are of this time scale
        time_scale *= 2
    measured = result.history[1:] or result.history
    moved = ModelConfig.from_pretrained(base.model).num_params() * 4  # float32 on the CPU
    return derive(generation_s=statistics.mean(h["system/rollout_s"] for h in measured),
                  train_1_s=statistics.mean(h["system/train_emulated_s"] for h in measured),
                  trajectory_generation_s=statistics.mean(t.get("generate", 0.0) for t in result.timings),
                  turns=statistics.mean(h["rollout/turns_mean"] for h in measured), moved_bytes=moved,
                  time_scale=time_scale, real_over_emulated=real / sim if sim else float("nan"), steps=steps)


def derive(generation_s: float, train_1_s: float, trajectory_generation_s: float, turns: float, moved_bytes: int,
           time_scale: float, real_over_emulated: float, steps: int) -> Calibration:
    """The profile from a Sync+ run's emulated generation seconds per step, its train step on one emulated H800,
    a trajectory's generation seconds and turns: Fig. 3's shares and Table 4's pull, relative to generation."""
    gen, share = generation_s, FIG3_STEP_SHARES
    devices = max(1, round(train_1_s / (gen * share["training"] / share["generation"])))
    env_mean = trajectory_generation_s * share["env_reset"] / share["generation"] / (turns + 1)  # reset + steps
    pull_s = gen * TABLE4_PULL_S / (share["generation"] * FIG3_STEP_S)
    cal = Calibration(time_scale, devices, env_mean, moved_bytes / pull_s, gen)
    cal.line = (f"calibration (Sync+, {steps} steps, SIMULATED timing): time scale x{time_scale:g} (real/emulated "
                f"engine {real_over_emulated:.2f}), generation {gen:.2f} s/step, trainer {devices} x H800 "
                f"({train_1_s / devices:.2f} s a step; 23/54 of generation is {gen * 23 / 54:.2f}), env "
                f"{env_mean * 1e3:.0f} ms a call ({turns:.1f} turns), weight pull {pull_s:.2f} s")
    return cal


def apply(cfg: PipelineConfig, cal: Calibration) -> PipelineConfig:
    return emulated(cfg, cal.time_scale, cal.trainer_devices, cal.link_bytes_per_s)


def with_latency(task, cal: Calibration):
    """The training task with the calibrated env latency on every call (evaluation plays without it)."""
    faults = {"mean": cal.env_mean_s, "std": cal.env_mean_s / 2, "straggler_prob": 0.03, "straggler_scale": 3.0,
              "on_reset": True}
    return dataclasses.replace(task, faults=faults)
