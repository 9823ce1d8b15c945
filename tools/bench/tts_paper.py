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
* weight push and pulls: Table 4's push (trainer -> store, 32.4 s) and accumulated pull (store -> workers, 6.2 s)
  for Qwen3-8B over Fig. 3's generation time (0.54 x 366 s) of ``G``: the real model's bytes through the real
  weight plane at the rates that take that long (the pulls stream behind the push, so a Sync+ step waits for
  both, as the paper's synchronous design does; since 2026-12-07, as async_training.py's links);
* the time scale: large enough that the tiny model's real engine compute stays under half the emulated time and its
  real train step under half of the emulated one (else the CPU, not the emulated GPU, sets that role's pace).

Where it stands (2026-11-28): the real train step sets the time scale. At the quickstart's 4 groups a step (~14-16k
tokens) it takes 3.7 s on the trainer's core while rollout runs (the two cores slow each other about 2x here),
which forces about x32: a Sync+ step of 16-19 s, hours for 3 seeds. With ``--set batch_groups=1`` (a ~1 s real
train step) the scale is about x33 at 3.3 s of emulated generation a Sync+ step, and 4 modes of one seed take
~30 minutes (BENCHMARKS.md, time_to_score, has three seeds: 2026-11-28). ``--quick`` (44 s) runs one group a step
and lets the engine alone set the time scale (x8): its train steps then outrun their emulated time, which its
last line says (``train_outran``, ``timing=MIXED``), so its figures are not emulated timing.

Every mode rolls out on three emulated H800s (the baselines' hardware, as §7.2's scaling study runs ROLLART): a
one-task workload exercises no hardware affinity. Limits: the workload is FrozenLake with one-token actions, so
the shares above are imposed by calibration, not produced by long chains of thought; the calibration reads one
seed's first steps.
"""
from __future__ import annotations

import dataclasses
import statistics

from rollart.emulation import FIG3_STEP_SHARES, TRAIN_MFU, TrainerSpeedConfig, paper_train_s, paper_transfer_s
from rollart.pipeline import Coordinator, PipelineConfig
from rollart.pipeline.emulated import on_emulated_gpus
from rollart.messages import ResetTrainer

MODEL = "Qwen3-8B"
"""The model every role emulates (RollArt Fig. 3's step)."""
WORKERS = {"num_inference_workers": 3, "hw_classes": ("H800",), "proxy.hw_affinity": {}}
ACTOR_MODE = "inprocess"
"""The emulated workers run in the coordinator's process (on the rollout core, where their processes would also
run): each run then starts in ~2 s instead of ~8 s; their real engine compute stays a measured share of the
emulated time."""
TIME_SCALE = 8.0
"""The first time scale the calibration tries (the tiny model's engine steps on 2 busy cores need about this)."""
REAL_OVER_EMULATED_MAX = 0.5
"""The calibration raises the time scale until the real engine compute is at most this share of the emulated."""
TRAINER_REAL_MAX = 0.5
"""... and until the real train step is at most this share of its emulated time (the trainer has a core of its
own: only the step's own length has to fit). At 0.8 (until 2026-12-07) the calibration's two measured steps left
too little room for the real step's spread: 79 of ~1,000 train steps of a three-seed run outran their emulated
time (its figures MIXED)."""
CALIBRATION_TRAINER_DEVICES = 4096
"""The calibration run's trainer emulates this many H800s, so that its steps last their real time."""


@dataclasses.dataclass
class Calibration:
    time_scale: float
    trainer_devices: int
    env_mean_s: float
    link_bytes_per_s: float
    push_bytes_per_s: float
    generation_s: float
    """Emulated generation seconds per Sync+ step (scaled)."""
    line: str = ""


def emulated(cfg: PipelineConfig, time_scale: float, devices: int, link: float, push: float = 0.0) -> PipelineConfig:
    return on_emulated_gpus(cfg, time_scale=time_scale, trainer_devices=devices, model=MODEL, link_bytes_per_s=link,
                            weight_push_bytes_per_s=push, **WORKERS)


async def calibrate(base: PipelineConfig, task, trainer, time_scale: float = TIME_SCALE, steps: int = 3,
                    tries: int = 2, fit_trainer: bool = True) -> Calibration:
    """Measure a short Sync+ run's emulated generation, its real train step and a trajectory's times; derive the
    profile. The run's trainer emulates CALIBRATION_TRAINER_DEVICES GPUs, so its steps last their real time (what the
    calibration must know); one H800's time for the batch's tokens is computed. The time scale then grows until the
    real engine compute is at most REAL_OVER_EMULATED_MAX of the emulated time and the real train step at most
    TRAINER_REAL_MAX of its emulated one (23/54 of generation): a second run at that scale measures it when ``tries``
    allows, else the first run's emulated figures are scaled to it (the line says which). Without ``fit_trainer``
    (``--quick``) only the engine sets the time scale: train steps may then outrun their emulated time, and the runs
    count them (their timing is this CPU's, and the bench's last line says so)."""
    from rollart.models import ModelConfig
    for attempt in range(tries):
        cfg = dataclasses.replace(emulated(base, time_scale, CALIBRATION_TRAINER_DEVICES, 0.0), mode="sync",
                                  alpha=0, total_steps=steps, stop_at_success=None, eval_every=0, eval_at_end=False,
                                  time_limit_s=0, run_name="calibration")
        await trainer.send(ResetTrainer())
        result = await Coordinator(cfg, [task], trainer=trainer).run()
        measured = result.history[1:] or result.history
        real = sum(w.get("engine_seconds", 0.0) for w in result.workers.values())
        sim = sum(w.get("simulated_scaled_seconds", 0.0) for w in result.workers.values())
        engine_ratio = real / sim if sim else 0.0
        gen = statistics.mean(h["system/rollout_s"] for h in measured)
        real_train = max(h["system/train_real_s"] for h in measured)
        grow = growth(engine_ratio, real_train, gen, fit_trainer)
        if grow == 1.0 or attempt == tries - 1:
            break
        time_scale *= grow * 1.1  # a margin: the second run's own figures are the calibration's
    scaled = time_scale * grow
    tokens = statistics.mean(h["system/tokens_per_step"] for h in measured)
    one_h800 = TrainerSpeedConfig("H800", 1, MODEL, TRAIN_MFU, scaled)
    moved = ModelConfig.from_pretrained(base.model).num_params() * 4  # float32 on the CPU
    cal = derive(generation_s=gen * grow, train_1_s=one_h800.step_seconds(int(tokens)),
                 trajectory_generation_s=grow * statistics.mean(t.get("generate", 0.0) for t in result.timings),
                 turns=statistics.mean(h["rollout/turns_mean"] for h in measured), moved_bytes=moved,
                 time_scale=scaled, real_over_emulated=engine_ratio / grow, steps=steps)
    cal.line += f"; real train step {real_train:.2f} s" + (
        f" (measured at x{time_scale:g}, emulated figures scaled x{grow:.2f} to x{scaled:.3g})" if grow > 1 else "")
    return cal


def growth(engine_ratio: float, real_train_s: float, generation_s: float, fit_trainer: bool = True,
           train_share: float = FIG3_STEP_SHARES["training"] / FIG3_STEP_SHARES["generation"],
           engine_max: float = REAL_OVER_EMULATED_MAX, trainer_max: float = TRAINER_REAL_MAX) -> float:
    """How much the time scale must grow (>= 1) for the real engine compute to stay within ``engine_max`` of its
    emulated time and (``fit_trainer``) the real train step within ``trainer_max`` of the emulated one, which is
    ``train_share`` of the generation (Fig. 3 makes it 23/54 of a Sync+ step's)."""
    return max(1.0, engine_ratio / engine_max,
               real_train_s / (trainer_max * generation_s * train_share) if fit_trainer else 1.0)


def derive(generation_s: float, train_1_s: float, trajectory_generation_s: float, turns: float, moved_bytes: int,
           time_scale: float, real_over_emulated: float, steps: int) -> Calibration:
    """The profile from a Sync+ run's emulated generation seconds per step, its train step on one emulated H800,
    a trajectory's generation seconds and turns: Fig. 3's shares and Table 4's pull, relative to generation."""
    gen, share = generation_s, FIG3_STEP_SHARES
    devices = max(1, round(train_1_s / paper_train_s(gen)))
    env_mean = trajectory_generation_s * share["env_reset"] / share["generation"] / (turns + 1)  # reset + steps
    pull_s, push_s = paper_transfer_s("pull", gen), paper_transfer_s("push", gen)
    cal = Calibration(time_scale, devices, env_mean, moved_bytes / pull_s, moved_bytes / push_s, gen)
    cal.line = (f"calibration (Sync+, {steps} steps, SIMULATED timing): time scale x{time_scale:g} (real/emulated "
                f"engine {real_over_emulated:.2f}), generation {gen:.2f} s/step, trainer {devices} x H800 "
                f"({train_1_s / devices:.2f} s a step; 23/54 of generation is {gen * 23 / 54:.2f}), env "
                f"{env_mean * 1e3:.0f} ms a call ({turns:.1f} turns), weight push {push_s:.2f} s and pull {pull_s:.2f} s")
    return cal


def apply(cfg: PipelineConfig, cal: Calibration) -> PipelineConfig:
    return emulated(cfg, cal.time_scale, cal.trainer_devices, cal.link_bytes_per_s, cal.push_bytes_per_s)


def with_latency(task, cal: Calibration):
    """The training task with the calibrated env latency on every call (evaluation plays without it)."""
    faults = {"mean": cal.env_mean_s, "std": cal.env_mean_s / 2, "straggler_prob": 0.03, "straggler_scale": 3.0,
              "on_reset": True}
    return dataclasses.replace(task, faults=faults)
