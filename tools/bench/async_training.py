"""Asynchronous training vs the paper's baselines: step time of ROLLART (α=1) vs Sync+, One-off, AReaL.

    python tools/bench/async_training.py --quick   # a few steps per mode: step-time ratios (< 60 s)
    python tools/bench/async_training.py           # steady-state step time per mode + α sweep 1..6 (Fig. 13)

RollArt §7.1-§7.4 on a CPU-scaled workload. One process runs every configuration one after the
other on the same tasks, seed and model (a 0.14M-param model built by make_tiny_model, ``--model-size``):

* disaggregated on one machine (R4: "training and rollout execute concurrently on separate GPUs"): one
  trainer process pinned to core 0 serves every mode (``reset`` to the initial weights between modes);
  this coordinator — envs, scheduler, rewards, inference workers — is pinned to the other core(s).
* calibration first (``calibrate``, 3 Sync+ steps, 2 under --quick, judged nowhere): it measures the workload's
  rollout seconds and tokens a step, and sizes from them the two emulated roles every mode then runs with — the
  trainer, as many emulated H800s as make a Sync+ train step 23/69 of its rollout (Fig. 3: training 23 %,
  generation 54 %, environment 15 % of a step), at the MFU that makes it exactly that (the papers give no MFU),
  over the batch's tokens as the emulated engines counted them, and the weight links (below). The calibration
  line says what it chose.
* workload: Table 1's two kinds of task, weighted 3:1:1 (every batch in that mix, ``rollout.keep_task_mix``) as the
  paper's five split 3 many-turn (SWE-bench, WebShop, FrozenLake: prefill-heavy) to 2 few-turn long-CoT (GEM-math,
  GEM-game: decode-heavy). The real envs are
  CPU-scaled stand-ins — FrozenLake (≤ 8 turns of 1-token moves), MathTool (3 turns) and GuessNumber (5 turns)
  answering in fixed-length chains of thought (``--math-cot``, ``--game-cot``) — and the learning is theirs; their
  requests are timed as turns of the paper's tasks they stand for (``PAPER_PROFILES``, since 2026-12-07:
  ``emulation.task_profiles``, rollart.sim.engine_profiled): a FrozenLake turn as the paper's FrozenLake (a 600-token
  prompt, 512-token observations, 10-40-token answers), a MathTool turn as GEM-math (1,000-6,000 tokens of
  reasoning), a GuessNumber turn as GEM-game (500-3,000), each on an emulated engine of the worker's class that
  batches, caches prefixes and runs out of KV as vLLM does. The stand-ins take other turn counts than the paper's
  tasks (FrozenLake 8 against the profile's 20-40, GuessNumber 5 against GEM-game's 1), so each request stands for
  the paper task's mean turns / the stand-in's ``max_turns`` (``emulation.task_turns``, ``--paper-turns``, since
  2026-12-07): a whole stand-in trajectory carries a paper trajectory's work (before, FrozenLake's load was 3.75x
  too light and GEM-game's 5x too heavy). Limits: a stand-in that ends early (a hole, a right guess) carries less,
  and an answer's emulated length does not follow its real one.
  ``--no-paper-profiles`` times each engine step from its real tokens instead (the workload until 2026-12-04:
  the stand-ins then were neither decode- nor prefill-heavy enough for either class to gain, 6 H20 against
  2 H800 reading 0.96-1.18 for every task in tools/bench/affinity.py, against the paper's 0.49-0.79 and 1.9).
  Every env step sleeps a Gaussian latency N(μ, μ/2) with 3 % heavy-tailed stragglers (rollout/env_faults.py;
  the shape of §7.3 R2); with ``--env-scale 0.003`` (μ = 10 s × 0.003 = 30 ms per turn) and ``--gen-scale
  0.04`` (a GEM-math turn ~1.1 s) trajectories spend about 75 % generating and 25 % in env steps (the paper's
  54:15 is 78:22); each run prints the breakdown.
* the simulated hardware must set the workers' speed, not this CPU: each mode prints the share of requests whose
  real output came after their emulated turn (then that request's time is this CPU's) and the workers' real
  engine time / emulated busy time (``late_frac_max``, ``late_s_max`` and ``real_vs_sim_max`` on the last line).
* hardware cost-equivalent, as RollArt's affinity ablation compares it (§7.3 R1: 64 H800 + 24 H20 against 72
  H800, 206 against 205 by Table 2's normalised cost, H800 2.85, H20 1.00): the baselines roll out on 3 H800s
  (``BASELINE_WORKERS``, cost 8.55); ROLLART on 2 H800 + 3 H20 (cost 8.70, 1.02x), routing the decode-heavy tasks
  to the H20s. Each run prints both costs (``rollout_cost_ratio`` on the last line).
* what affinity can pay here: the run prints the tokens each class generated per prompt token it computed
  (``decode_per_prefill_<class>`` on the last line, emulated tokens) beside the paper's profiles' (GEM-Math 19.4,
  FrozenLake 0.049).
* ``rollart``: mode=async, α=1 (per-turn bound), hardware-affinity routing, the configuration above.
* ``syncplus``: mode=sync — trajectory-level envs, async reward, then train, then update (Sync+).
* ``oneoff``: mode=oneoff — batch k+1 rolls out with weights k-1 while batch k trains.
* ``areal``: mode=areal, α=1 bounded when a trajectory starts (rollout at most α batches ahead of
  training, as AReaL's controller does), no abort of in-flight ones, no affinity routing.
* ``rollart_samehw``: ROLLART on the baselines' workers (no affinity), as §7.2's scaling study runs it:
  what its coordination alone (trajectory-level rollout, per-turn α bound) does; ``samehw_vs_*`` keys (the full
  run only: --quick leaves this report out to stay under a minute).
* every overlapped mode keeps ``--concurrency`` × batch-size trajectories in flight (1.0: the envs a Sync+ batch
  has); the full run sweeps ``--concurrencies`` (1, 1.5, 2) for the overlapped modes and judges each at its
  fastest (``concurrency_<mode>=`` on the last line). Since the start bound counts a batch until its train step
  is done (ee42b84, as AReaL's capacity does), more in flight gains both a little (2026-12-04: rollart 1.94 ->
  1.74 s a step, AReaL-style 1.41 -> 1.32); before, it freed the batch at ``get_batch`` and AReaL-style gained
  more (1.16 -> 0.91 s).

Real vs simulated: the trainer (forward/backward/AdamW of the tiny model), the engine's tokens, the envs,
rewards, actors, ZeroMQ transport and weight store are real and run on this CPU. SIMULATED: each inference
worker returns a request once a Qwen3-8B engine of its hardware class would have served the paper task's turn
(roofline of RollArt Table 2, ×sim_time_scale); a train step counts done only after Qwen3-8B's 6·P·tokens on the calibrated
H800s at the calibrated MFU (×sim_time_scale; ``train_outran=`` on the last line counts the steps whose real compute was the
longer); env latency is injected sleep; weight pushes and pulls go over SIMULATED links.

Weight pulls: the model's real bytes through the real weight plane (store -> workers), over a link as slow as
makes a pull last what Qwen3-8B's does in the paper against its step: Table 4's accumulated pull (6.2 s) keeps
its share of Fig. 3's step, 6.2 / (0.69 × 366 s) of the rollout (generation + environment) seconds of a Sync+
step (``rollart.emulation.paper_transfer_s``), measured by the calibration. The push, trainer -> store, takes
Table 4's 32.4 s likewise (its own simulated link), and the pulls, which wait for the store's buckets, stream
behind it: a Sync+ step waits for push and pull, as the paper's synchronous design does (38.6 s of Table 4); the
overlapped modes push while rollout and the next train step go on (§6.3's asynchronous weight update engine, since
2026-12-07). A pull sized by the link alone (15.3 GB at Table 3's 2.2 GB/s,
×gen_scale) would last about ten of this workload's steps, whose trajectories are hundreds of times shorter than
the paper's; where the real plane is the slower, a pull lasts its real time.

``exposed_pull_frac`` (ROLLART, steady-state steps) = the part of each pull that outlasted the train step
running beside it / the whole pull (the paper: 1.4 of 6.2 s exposed, 0.23; ``pull_vs_train``, pull seconds over
train seconds a step, is printed beside it: the paper's is 6.2 / (0.23 × 366) = 0.07). The key fails (> 0.2)
when pulls are not overlapped with training (a pull that starts only after the step it should hide behind, or
an update point that waits for it: tests/pipeline/test_judged_keys_can_fail.py), or when a pull outlasts the
train step (``pull_vs_train`` > 1).

Step time is measured in steady state: over the steps after the pipeline fills (the first α+1 steps of
async/areal, the first of sync/one-off), at least 10 of them in the full run (``--steps``, default
fill + 12); ``steady_steps_min`` on the last line. Time to score (Fig. 10a) is tools/bench/time_to_score.py.

Throughput (Fig. 10b): each mode's steady-state tokens per second (tokens of a training batch ÷ s/step),
normalised to Sync+ (``tput_<mode>=``, a report: the batch is the same size in every mode, so it differs from
the step-time ratio only by the tokens a mode's batches happen to hold).

Last line: ``async_vs_syncplus= async_vs_oneoff= async_vs_areal= exposed_pull_frac= … samehw_vs_*= …`` —
step-time ratios (baseline s/step ÷ rollart s/step, > 1 means rollart is faster), then ``tput_*=``.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import envs  # noqa: E402,F401
from rollart.config import exit_on_config_error  # noqa: E402
from rollart.emulation import TRAIN_MFU, TrainerSpeedConfig, paper_train_s, paper_transfer_s  # noqa: E402
from rollart.actors import ActorSystem  # noqa: E402
from rollart.cpus import ENV_VAR, format_cpus  # noqa: E402
from rollart.config import apply_values  # noqa: E402
from rollart.pipeline import Coordinator, PipelineConfig  # noqa: E402
from rollart.rollout.env_manager import TaskSpec  # noqa: E402
from rollart.rollout.group_scheduler import SchedulerConfig  # noqa: E402
from rollart.tools.make_tiny_model import make_tiny_model  # noqa: E402
from rollart.trainer import TrainerConfig  # noqa: E402
from rollart.messages import ResetTrainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cross_core import cross_core_slowdown  # noqa: E402
from affinity import FROZENLAKE, MATH  # noqa: E402

EMULATION = {"trainer_hw_class": "", "weight_link": "none"}
"""What besides the workers' classes a run emulates (rollart.emulation) before the calibration sets the trainer's
GPUs and the link's rate (``Calibration.emulation``): nothing, the trainer and the weight plane at their real speed."""
ROLLOUT_PHASES = ("generation", "env_reset")
"""The phases of Fig. 3's step a Sync+ step's rollout seconds cover: the train step and the pull are sized
against them."""
CALIBRATION_STEPS = 3
"""Sync+ steps of the calibration run (the first is not counted: it includes the pipeline's start); --quick runs 2."""
PAPER_BUCKETS = 16
"""Buckets a version moves in: Qwen3-8B's 15.3 GB in RollArt §6.3's 1 GB buckets. The workers relay them down a
chain (weights.relay_fanout=1), each hop over the simulated link, so the bucket count sets how far the hops
overlap: in one bucket a chain of five would take five pulls' time."""


PAPER_PROFILES = {"FrozenLake": "frozenlake", "MathTool": "math", "GuessNumber": "game"}
"""The paper task each stand-in's requests are timed as (``emulation.task_profiles``, rollart.emulation.PAPER_TASKS):
FrozenLake for the many-turn prefill-heavy tasks, GEM-math and GEM-game for the few-turn decode-heavy ones."""
GEN_SCALE = {True: 0.04, False: 3.0}
"""Emulated engine seconds -> seconds here, with and without the paper's profiles: a GEM-math turn (about 3,500
tokens of reasoning, ~28 s on an H800) lasts ~1.1 s, and a Sync+ trajectory spends ~75 % generating, as Fig. 3's
54:15 (0.025 until the stand-ins carried the paper trajectories' work, 2026-12-07: FrozenLake's then 3.75x, the
game's a fifth, generation 68 % at 0.025); each step's roofline time of the stand-ins' few real tokens
needed x3 to stand above this CPU's real engine time."""


QUICK_TIME = 0.6
"""--quick runs every emulated time (generation, env latency, and so the calibrated train step and links) at this
fraction of the full run's scale: the same proportions, sooner, to stay under a minute."""


@dataclasses.dataclass
class Workload:
    """The CPU-scaled task mix and time scales (defaults calibrated to Fig. 3, see the module docstring)."""
    env_scale: float = 0.003
    """Paper env latency × this: per-turn N(10 s, 5 s) -> N(30 ms, 15 ms), 3 % heavy-tailed stragglers."""
    gen_scale: float = 0.0
    """Simulated Qwen3-8B engine time × this (0: the workload's default, ``GEN_SCALE``)."""
    paper_profiles: bool = True
    """Each task's requests timed as turns of the paper's task it stands for (``PAPER_PROFILES``); off: each engine
    step timed from the real step's tokens, as before 2026-12-07."""
    math_cot: int = 24
    """MathTool tokens per turn, fixed (min = max): a chain of thought of that length."""
    game_cot: int = 8
    """GuessNumber tokens per turn, fixed."""
    batch_groups: int = 6
    """GRPO groups (of 4) per training batch."""
    concurrency: float = 1.0
    """Concurrent trajectories (envs) per trajectory of a batch (max_concurrency = this × batch size): 1.0 is the
    env pool a Sync+ batch has; the full run also sweeps ``CONCURRENCY_SWEEP`` for the overlapped modes."""
    token_scale: float = 1.0
    """Emulated tokens per real token (``emulation.token_scale``): contexts and answers that many times longer on
    the emulated hardware."""
    paper_turns: bool = True
    """With the paper's profiles: each stand-in trajectory carries a paper trajectory's work, its requests standing
    for the paper task's mean turns / the stand-in's ``max_turns`` each (``emulation.task_turns``: FrozenLake's 8
    for 30, MathTool's 3 for 2.5, GuessNumber's 5 for GEM-game's 1); off: one request, one paper turn (until
    2026-12-07)."""

    def __post_init__(self) -> None:
        self.gen_scale = self.gen_scale or GEN_SCALE[self.paper_profiles]
        if self.env_scale <= 0 or self.gen_scale <= 0 or self.batch_groups < 1:
            raise SystemExit(f"--env-scale and --gen-scale must be > 0 and --batch-groups >= 1, got {self}")
        if self.token_scale < 1:
            raise SystemExit(f"--token-scale must be >= 1, got {self.token_scale}")
        if self.math_cot < 1 or self.game_cot < 1:
            raise SystemExit(f"--math-cot and --game-cot must be >= 1, got {self.math_cot}, {self.game_cot}")

    @property
    def task_profiles(self) -> dict[str, str]:
        return PAPER_PROFILES if self.paper_profiles else {}

    @property
    def task_turns(self) -> dict[str, int]:
        if not (self.paper_profiles and self.paper_turns):
            return {}
        return {t.name: t.max_turns for t in self.tasks(latency=False) if t.name in PAPER_PROFILES}

    def emulation(self) -> dict:
        """The ``emulation`` fields this workload sets: how its requests are timed."""
        return {"token_scale": self.token_scale, "task_profiles": self.task_profiles, "task_turns": self.task_turns}

    def tasks(self, latency: bool = True) -> list[TaskSpec]:
        """The mix (Table 1's profiles): FrozenLake many turns of 1-token moves (prefill-heavy); MathTool and
        GuessNumber few turns with fixed-length answers (decode-heavy). ``latency``: inject env latency."""
        faults = {"mean": 10.0 * self.env_scale, "std": 5.0 * self.env_scale, "straggler_prob": 0.03,
                  "straggler_scale": 3.0} if latency else None
        return [
            TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
                     max_new_tokens=1, max_turns=8, faults=faults, weight=3.0),
            TaskSpec(name="MathTool", env_id="rollart/MathTool-v0", max_new_tokens=self.math_cot,
                     min_new_tokens=self.math_cot, max_turns=3, faults=faults),
            TaskSpec(name="GuessNumber", env_id="rollart/GuessNumber-v0", env_kwargs={"high": 16},
                     max_new_tokens=self.game_cot, min_new_tokens=self.game_cot, max_turns=5, faults=faults),
        ]


    def profiles(self, model: str) -> list:
        """Each task's token profile as this bench's model tokenizes it (``rollart.emulation.TaskProfile``): the
        first prompt (system prompt, template, observation), what a later turn adds, the turns and the answer
        lengths; for tools/bench/affinity.py's Fig. 4 with this workload."""
        import gymnasium as gym

        from rollart.models import load_tokenizer
        from rollart.rollout.chat import ChatFormat
        from rollart.rollout.env_protocol import env_defaults
        from rollart.emulation import TaskProfile
        tokenizer, out = load_tokenizer(model), []
        for task, action in zip(self.tasks(latency=False), ("R", "<calc>1+1</calc>", "8")):
            env = gym.make(task.env_id, **task.env_kwargs)
            chat = ChatFormat(tokenizer, env_defaults(env)[0])
            first = chat.first_prompt(env.reset(seed=0)[0])
            later = chat.next_turn(env.step(action)[0], chat.encode(action))
            env.close()
            answer = (task.min_new_tokens or 1, task.max_new_tokens)
            out.append(TaskProfile(task.name, len(first), (task.max_turns, task.max_turns), len(later), answer))
        return out


CONCURRENCY_SWEEP = (1.0, 1.5, 2.0)
"""Full run: the overlapped modes (async, areal) run at each of these concurrencies and each is judged at its
fastest, so that no mode is compared at another's best setting. Sync+ and One-off collect one batch at a time:
the setting does not change them."""


def judged_modes(args) -> list[str]:
    """The modes a run compares: every one (``--only`` picks some), --quick without ``rollart_samehw`` (a report)."""
    if args.sweep_only:
        return []
    names = [n for n in MODES if not (args.quick and n == "rollart_samehw")]
    return [n for n in names if n in args.only.split(",")] if args.only else names


def overlapped(cfg: PipelineConfig) -> bool:
    """Modes whose rollout never stops, so that the envs in flight (rollout.max_concurrency) set their pace."""
    return cfg.mode in ("async", "areal")


MODEL_SIZES = {"tiny": {}, "small": dict(hidden=64, layers=2, head_dim=32, intermediate=192)}
"""make_tiny_model shapes: "tiny" is its default 0.9M-param model; "small" (0.14M) takes about half the real
engine time per step (and a quarter of the training time), so the simulated hardware time dominates."""

AFFINITY = {"FrozenLake": "H800", "default": "H20"}
BASELINE_WORKERS = {"num_inference_workers": 3, "hw_classes": ("H800",), "proxy.hw_affinity": {}}
"""The paper's baselines roll out on H800s only (96 of 128 GPUs; 32 train)."""
MODES = {
    "syncplus": dict(mode="sync", **BASELINE_WORKERS),
    # RollArt §7.3 R1: 64 H800 + 24 H20 against 72 H800, cost-equivalent by Table 2 (206 vs 205);
    # here 2 H800 + 3 H20 against 3 H800 (8.70 vs 8.55). Decode-heavy tasks go to the H20s, the rest to the H800s.
    "rollart": {"mode": "async", "alpha": 1, "num_inference_workers": 5,
                "hw_classes": ("H800", "H800", "H20", "H20", "H20"), "proxy.hw_affinity": AFFINITY},
    "oneoff": dict(mode="oneoff", **BASELINE_WORKERS),
    "areal": dict(mode="areal", alpha=1, **BASELINE_WORKERS),
    # ROLLART on the baselines' all-H800 workers, as in §7.2's scaling study (Fig. 10c): its coordination
    # (trajectory-level rollout, per-turn α bound) without hardware affinity
    "rollart_samehw": dict(mode="async", alpha=1, **BASELINE_WORKERS),
}


def rollout_cost(mode: dict) -> float:
    """The rollout hardware's cost in Table 2's units (H20 = 1.00)."""
    from rollart.hardware import HARDWARE
    return sum(HARDWARE[c].relative_cost for c in worker_classes(mode))


def worker_classes(mode: dict) -> list[str]:
    """Each inference worker's class, as the pipeline assigns them (PipelineConfig.worker_hw_classes)."""
    return apply_values(PipelineConfig(), mode).worker_hw_classes()


def split_cores() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(trainer cores, rollout cores): training and rollout on separate cores of this machine, as on
    separate clusters (RollArt R4) — the trainer process on the first core; this coordinator (envs,
    scheduler, rewards, inference workers) on the rest. Every mode gets the same split."""
    cores = tuple(sorted(os.sched_getaffinity(0)))
    return (cores[:1], cores[1:]) if len(cores) >= 2 else ((), ())


async def start_trainer(system: ActorSystem, cfg: PipelineConfig, model: str, cpus: tuple[int, ...]):
    """One trainer process for every mode (``reset`` between them): spawning one per mode would cost more
    than the --quick budget. It is the same TrainerActor the pipeline spawns."""
    from rollart.models import load_tokenizer
    from rollart.pipeline.resolve import resolve, with_pad_id
    tcfg = with_pad_id(resolve(dataclasses.replace(cfg, model=model)), load_tokenizer(model).pad_token_id or 0).trainer
    env = {ENV_VAR: format_cpus(cpus)} if cpus else {}
    return await system.spawn("rollart.trainer.actor:TrainerActor", tcfg,
                              name="trainer", mode="process", env=env)


def envs_in_flight(concurrency: float, work: Workload) -> int:
    """rollout.max_concurrency for ``concurrency`` trajectories in flight per trajectory of a batch (groups of 4)."""
    return max(4, round(concurrency * 4 * work.batch_groups))


def paper_bucket_bytes(model: str) -> int:
    """Bucket size that splits the model's float32 weights into PAPER_BUCKETS buckets."""
    from rollart.models import ModelConfig
    return max(1 << 12, -(-ModelConfig.from_pretrained(model).num_params() * 4 // PAPER_BUCKETS))


def base_config(model: str, logdir: str, seed: int, work: Workload) -> PipelineConfig:
    return PipelineConfig(
        model=model, logdir=logdir, seed=seed, batch_groups=work.batch_groups,
        rollout=SchedulerConfig(group_size=4, max_concurrency=envs_in_flight(work.concurrency, work)),
        simulate_hardware=True,  # the workers' classes; the trainer's GPUs and the link: calibrate()
        emulation={**EMULATION, **work.emulation()},
        sim_time_scale=work.gen_scale, bucket_bytes=paper_bucket_bytes(model),
        trainer=TrainerConfig(lr=1e-3, grad_clip=1.0, num_threads=1, adv_eps=1e-4),
        quiet=True, checkpoint_every=0, eval_episodes=1, eval_every=0)


async def run_mode(name: str, cfg: PipelineConfig, trainer, work: Workload) -> dict:
    t0 = time.perf_counter()
    await trainer.send(ResetTrainer())
    # greedy evaluation runs without injected latency: it measures the policy, not the envs
    result = await Coordinator(cfg, work.tasks(), eval_tasks=work.tasks(latency=False), trainer=trainer).run()
    first = result.history[0]["system/elapsed_s"] if result.history else 0.0
    hist = result.history
    elapsed = [h["system/elapsed_s"] for h in hist]
    skip = steady_skip(hist, cfg)
    per_step = (elapsed[-1] - elapsed[skip - 1]) / (len(hist) - skip) if skip else elapsed[-1] / max(len(hist), 1)
    pulls = steady_pulls(hist, cfg, skip)
    accum = sum(h.get("system/weight_pull_accum_s", 0.0) for h in pulls)
    exposed = sum(h.get("system/weight_pull_exposed_s", 0.0) for h in pulls)
    pull_bytes = max((h.get("system/weight_bytes", 0.0) for h in pulls), default=0.0)
    pull_train = sum(h.get("system/train_s", 0.0) for h in pulls)
    reached = None
    if cfg.stop_at_success is not None:
        for step, success in result.evals:
            if step and all(v >= cfg.stop_at_success for k, v in success.items() if k != "mean"):
                reached = next(h["system/elapsed_s"] for h in hist if h["step"] == step)
                break
    mean = lambda key: sum(h.get(key, 0.0) for h in hist[skip:]) / max(len(hist) - skip, 1)  # noqa: E731
    parts = {k: sum(t.get(k, 0.0) for t in result.timings) for k in ("generate", "env_step", "env_reset", "total")}
    split = {k: parts[k] / parts["total"] if parts["total"] else 0.0 for k in ("generate", "env_step", "env_reset")}
    load = {}  # per hardware class: real engine compute / simulated time (well below 1: the simulation rules)
    for st in result.workers.values():
        real, sim = load.get(st["hw_class"], (0.0, 0.0))
        load[st["hw_class"]] = (real + st.get("engine_seconds", 0.0),
                                sim + st.get("simulated_scaled_seconds", 0.0))
    real_vs_sim = {hw: r / s if s else float("nan") for hw, (r, s) in load.items()}
    tokens = {}  # per hardware class: (prompt tokens computed, tokens generated), emulated where they are
    real_tokens = emulated_tokens = 0
    for st in result.workers.values():
        prefilled, generated = tokens.get(st["hw_class"], (0, 0))
        real = (st.get("prompt_tokens", 0) - st.get("cached_tokens", 0), st.get("generated_tokens", 0))
        emulated = (st.get("emulated_prefill_tokens", 0), st.get("emulated_decode_tokens", 0))
        tokens[st["hw_class"]] = (prefilled + (emulated[0] or real[0]), generated + (emulated[1] or real[1]))
        real_tokens += sum(real)
        emulated_tokens += sum(emulated)
    late = sum(st.get("late_requests", 0) for st in result.workers.values())
    late_s = sum(st.get("late_seconds", 0.0) for st in result.workers.values())
    turns = sum(st.get("emulated_requests", 0) for st in result.workers.values())
    wall = time.perf_counter() - t0  # simulated busy time / wall, per worker: which class is the bottleneck
    busy = [(st["hw_class"], st.get("simulated_scaled_seconds", 0.0) / wall) for st in result.workers.values()]
    out = dict(name=name, mode=cfg.mode, alpha=cfg.alpha, steps=len(hist), steady_steps=len(hist) - skip,
               step_s=per_step, tokens_per_s=mean("system/tokens_per_step") / per_step if per_step else 0.0,
               train_s=mean("system/train_s"), train_compute_s=mean("system/train_step_s"),
               wait_s=mean("system/get_batch_wait_s"),
               push_s=mean("system/weight_push_s"), pull_accum_s=accum, pull_exposed_s=exposed,
               rollout_s=mean("system/rollout_s"), tokens_step=mean("system/tokens_per_step"),
               train_outran=int(sum(h.get("system/train_outran", 0.0) for h in hist)),
               pull_bytes=pull_bytes, pull_vs_train=accum / pull_train if pull_train else float("nan"),
               exposed_pull_frac=exposed_pull_frac(hist, cfg),
               staleness_max=max((h.get("rollout/staleness_max", 0.0) for h in hist), default=0.0),
               success=mean("charts/success"), evals=[(s, e["mean"]) for s, e in result.evals],
               curve=[(h["system/elapsed_s"], h.get("charts/success", 0.0)) for h in hist],
               time_to_score_s=reached, wall_s=wall, aborted=result.buffer.get("aborted"),
               launched=result.rollout.get("launched", 0), trained=result.buffer.get("trained", 0),
               replaced=result.rollout.get("replaced", 0), deferred=result.rollout.get("starts_deferred", 0),
               task_share={k.rsplit("/", 1)[1]: mean(k) for k in sorted({k for h in hist[skip:] for k in h})
                           if k.startswith("rollout/share/")},
               traj_split=split, buffer={k: v for k, v in result.buffer.items() if "/" in k},
               real_vs_sim=real_vs_sim, busy=busy, late_frac=late / turns if turns else 0.0, late_s=late_s,
               emulated_per_real_token=emulated_tokens / real_tokens if emulated_tokens and real_tokens else 1.0,
               decode_per_prefill={hw: g / p if p else float("nan") for hw, (p, g) in tokens.items()})
    print(f"{name:>10}: {len(hist)} steps, {per_step:.2f} s/step over the last {len(hist) - skip} "
          f"(train {out['train_s']:.2f} s, of it "
          f"compute {out['train_compute_s']:.2f} s, "
          f"get_batch wait {out['wait_s']:.2f} s), pull accum {accum:.2f} s exposed {exposed:.2f} s "
          f"({pull_bytes / 1e6:.2f} MB per pull, {out['pull_vs_train']:.2f} of the train time), "
          f"staleness max {out['staleness_max']:.0f}, aborted {out['aborted']} (trajectories launched "
          f"{out['launched']}, replaced {out['replaced']}, trained {out['trained']}, starts deferred {out['deferred']}; "
          "trained shares " + " ".join(f"{k} {v:.2f}" for k, v in out["task_share"].items()) + f"), time-to-score {reached}, wall "
          f"{out['wall_s']:.0f} s (first step at {first:.1f} s, tokens/step {hist[-1].get('system/tokens_per_step', 0):.0f}; "
          f"trajectory time: generate {split['generate']:.0%} env_step {split['env_step']:.0%} "
          f"env_reset {split['env_reset']:.0%}; train {out['train_s'] / per_step:.0%} of a step; {out['buffer']}; "
          "real/simulated engine time " + " ".join(f"{hw} {v:.2f}" for hw, v in real_vs_sim.items())
          + (f"; requests whose real output came after their emulated turn {out['late_frac']:.1%} (held {late_s:.2f} s "
             "past it in all)" if turns else "")
          + "; tokens generated per prompt token computed " + " ".join(
              f"{hw} {v:.2f}" for hw, v in out["decode_per_prefill"].items())
          + "; simulated busy " + " ".join(f"{hw} {b:.2f}" for hw, b in busy) + ")"
          + (" evals: " + " ".join(f"{step}:" + "/".join(f"{v:.2f}" for v in e.values()) for step, e in result.evals)
             if result.evals else ""),
          flush=True)
    return out


@dataclasses.dataclass
class Calibration:
    """The emulated trainer and link every mode runs with, sized from a short Sync+ run of this workload."""
    rollout_s: float
    """Rollout (generation + env) seconds of a Sync+ step."""
    tokens: float
    """Tokens of a training batch."""
    pull_bytes: float
    """The model's real bytes a version moves."""
    work: Workload
    emulated_per_real_token: float = 1.0
    """Tokens the emulated engines computed per real token (the paper's profiles against the stand-ins' tokens):
    the emulated trainer's batch is that many times the real one."""

    @property
    def token_scale(self) -> float:
        return self.emulated_per_real_token if self.work.paper_profiles else self.work.token_scale

    @property
    def one_h800_s(self) -> float:
        """A train step of the batch's tokens on one emulated H800 (Qwen3-8B, ×gen_scale)."""
        return TrainerSpeedConfig("H800", 1, "Qwen3-8B", TRAIN_MFU, self.work.gen_scale,
                                  self.token_scale).step_seconds(int(self.tokens))

    @property
    def train_target_s(self) -> float:
        """Fig. 3's training share against its rollout (generation + env) share, of this rollout."""
        return paper_train_s(self.rollout_s, ROLLOUT_PHASES)

    @property
    def trainer_devices(self) -> int:
        return max(1, round(self.one_h800_s / self.train_target_s))

    @property
    def trainer_mfu(self) -> float:
        """The MFU at which ``trainer_devices`` H800s take exactly the target (TRAIN_MFU is an assumption; a whole
        number of devices alone lands up to a third off, and one H800 can be faster than the target)."""
        return TRAIN_MFU * self.one_h800_s / self.trainer_devices / self.train_target_s

    @property
    def pull_s(self) -> float:
        """Table 4's accumulated pull, against the step as in the paper (``rollart.emulation.paper_transfer_s``)."""
        return paper_transfer_s("pull", self.rollout_s, ROLLOUT_PHASES)

    @property
    def push_s(self) -> float:
        """Table 4's push (trainer -> store), against the step as in the paper."""
        return paper_transfer_s("push", self.rollout_s, ROLLOUT_PHASES)

    def emulation(self) -> dict:
        """PipelineConfig fields: the trainer on ``trainer_devices`` emulated H800s, push and pulls over the sized
        links."""
        return {"emulation": {**EMULATION, "trainer_hw_class": "H800", "trainer_devices": self.trainer_devices,
                              "trainer_mfu": self.trainer_mfu, **self.work.emulation(),
                              "token_scale": self.token_scale},
                "weight_link_bytes_per_s": self.pull_bytes / self.pull_s,
                "weight_push_bytes_per_s": self.pull_bytes / self.push_s}

    def line(self) -> str:
        train_s = self.train_target_s
        return (f"calibration (Sync+, not judged; SIMULATED timing): rollout "
                f"{self.rollout_s:.2f} s and {self.tokens:.0f} tokens a step ({self.token_scale:.3g} emulated tokens "
                f"each) -> trainer {self.trainer_devices} × H800 at MFU {self.trainer_mfu:.2f} "
                f"({train_s:.2f} s a step, {train_s / self.rollout_s:.2f} of the rollout: Fig. 3's 23/69), "
                f"weight push {self.push_s:.3f} s and pull {self.pull_s:.3f} s a version (Table 4's 32.4 s and 6.2 s "
                f"of Fig. 3's 366 s step) over links of {self.pull_bytes / self.push_s / 1e6:.1f} and "
                f"{self.pull_bytes / self.pull_s / 1e6:.1f} MB/s for the model's {self.pull_bytes / 1e6:.2f} MB")


async def calibrate(base: PipelineConfig, trainer, work: Workload, steps: int = CALIBRATION_STEPS) -> Calibration:
    """A short Sync+ run with the trainer and the weight plane at their real speed measures what the emulated ones
    are sized against (``steps``: --quick runs one fewer)."""
    cfg = apply_values(dataclasses.replace(base, run_name="calibration", total_steps=steps,
                                           eval_at_end=False, eval_every=0), MODES["syncplus"])
    r = await run_mode("calibration", cfg, trainer, work)
    return Calibration(r["rollout_s"], r["tokens_step"], r["pull_bytes"], work, r["emulated_per_real_token"])


def steady_pulls(hist: list[dict], cfg: PipelineConfig, skip: int) -> list[dict]:
    """The steps whose weight pulls count: the steady-state ones; in async/areal the last step's entry holds the
    run's wrap-up update (nothing left to overlap it with: in a longer run it would hide behind the next step)."""
    return hist[skip:-1] if cfg.mode in ("async", "areal") and len(hist) > skip + 1 else hist[skip:]


def exposed_pull_frac(hist: list[dict], cfg: PipelineConfig) -> float:
    """The judged key: the part of the steady-state pulls that outlasted the train step beside it (what rollout
    waited for), over the whole pulls."""
    skip = steady_skip(hist, cfg)
    pulls = steady_pulls(hist, cfg, skip)
    accum = sum(h.get("system/weight_pull_accum_s", 0.0) for h in pulls)
    return sum(h.get("system/weight_pull_exposed_s", 0.0) for h in pulls) / accum if accum else float("nan")


def steady_skip(hist: list[dict], cfg: PipelineConfig) -> int:
    """Steps to leave out of a steady-state figure: the fill steps, when any step comes after them."""
    return fill_steps(cfg) if len(hist) > fill_steps(cfg) else 0


def fill_steps(cfg: PipelineConfig) -> int:
    """Steps before the pipeline is full: async/areal roll out up to α batches ahead (the first α+1 steps still
    include rollout that later steps overlap); sync and one-off's first step waits for its first batch alone."""
    return cfg.alpha + 1 if cfg.mode in ("async", "areal") else 1


def plot(results: dict, sweep: list[dict], path: Path, quick: bool) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3 if not quick else 1, figsize=(15 if not quick else 6, 4), squeeze=False)
    ax = axes[0][0]
    names = list(results)
    ax.bar(names, [results[n]["step_s"] for n in names], color=["tab:green", "tab:gray", "tab:blue", "tab:orange", "tab:olive"][:len(names)],
           label="step time")
    ax.bar(names, [results[n]["train_s"] for n in names], width=0.3, color="black", alpha=0.6,
           label="train_step (emulated H800s)")
    ax.set_ylabel("s / step")
    ax.legend(fontsize=8)
    ax.set_xlabel("SIMULATED timing: generation, training, env latency, weight link", fontsize=8)
    ax.set_title("step time by mode" + (" (--quick: few steps)" if quick else ""))
    if not quick:
        ax = axes[0][1]
        for n in names:
            if results[n]["evals"]:
                ax.plot([t for t, _ in results[n]["curve"]], [s for _, s in results[n]["curve"]], label=n)
        ax.set_xlabel("training wall time (s)")
        ax.set_ylabel("rollout success (train batches)")
        ax.set_title("rollout success vs time (time to score: time_to_score.py)")
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
    sweep_panel(ax, sweep, "s / step (SIMULATED timing)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


async def run_all(args, work: Workload, steps: int, tmp: str) -> tuple[dict, list]:
    model = str(make_tiny_model(Path(tmp) / "tiny", seed=args.seed, **MODEL_SIZES[args.model_size]))
    trainer_cpus, rollout_cpus = split_cores() if args.split_cores else ((), ())
    args.cross_core = float("nan") if args.quick else cross_core_slowdown(trainer_cpus, rollout_cpus)
    print(f"machine: a matmul loop on the trainer's core runs {args.cross_core:.2f}x slower while the rollout "
          "core is busy (1.00 = independent, as separate clusters are; not measured under --quick)", flush=True)
    print(f"rollout hardware (Table 2 cost, H20 = 1.00): rollart {'+'.join(worker_classes(MODES['rollart']))} = "
          f"{rollout_cost(MODES['rollart']):.2f}; baselines {'+'.join(worker_classes(BASELINE_WORKERS))} = "
          f"{rollout_cost(BASELINE_WORKERS):.2f}", flush=True)
    base = dataclasses.replace(base_config(model, tmp, args.seed, work), actor_mode=args.actor_mode,
                               rollout_cpus=rollout_cpus)
    results, sweep = {}, []
    async with ActorSystem(heartbeat_interval=1.0, heartbeat_timeout=60.0) as system:
        trainer = await start_trainer(system, base, model, trainer_cpus)
        cal = await calibrate(base, trainer, work, CALIBRATION_STEPS - args.quick)
        print(cal.line(), flush=True)
        base = dataclasses.replace(base, **cal.emulation())
        for name in judged_modes(args):
            over = MODES[name]
            cfg = apply_values(dataclasses.replace(base, run_name=name, eval_at_end=not args.quick), over)
            if args.quick:  # two steady steps for the overlapped modes, one for Sync+ and One-off (under a minute)
                cfg = dataclasses.replace(cfg, total_steps=steps or fill_steps(cfg) + 1 + overlapped(cfg))
            else:
                cfg = dataclasses.replace(cfg, total_steps=args.steps or fill_steps(cfg) + 12, eval_every=0,
                                          time_limit_s=args.mode_budget_s)
            runs = []
            for c in (args.concurrencies if overlapped(cfg) else (work.concurrency,)):
                at_c = apply_values(cfg, {"rollout.max_concurrency": envs_in_flight(c, work)})
                runs.append({**await run_mode(f"{name}@{c:g}" if overlapped(cfg) else name, at_c, trainer, work),
                             "concurrency": c})
            results[name] = min(runs, key=lambda res: res["step_s"])  # each mode at its own fastest setting
            results[name]["by_concurrency"] = {res["concurrency"]: res["step_s"] for res in runs}
        if not args.quick or args.sweep_only:
            c = results["rollart"]["concurrency"] if "rollart" in results else work.concurrency
            for alpha in range(1, 7):
                cfg = apply_values(dataclasses.replace(base, run_name=f"alpha{alpha}",
                                                       total_steps=alpha + 1 + args.sweep_steps,
                                                       eval_at_end=False),
                                   {**MODES["rollart"], "alpha": alpha, "rollout.max_concurrency": envs_in_flight(c, work)})
                sweep.append(await run_mode(f"alpha={alpha}", cfg, trainer, work))
    return results, sweep


@exit_on_config_error()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few steps per mode: step-time ratios only")
    ap.add_argument("--steps", type=int, default=0,
                    help="steps per mode (default: the fill steps + 2 quick, + 12 full; see fill_steps)")
    ap.add_argument("--mode-budget-s", type=float, default=600.0, help="full run: time limit per mode")
    ap.add_argument("--sweep-steps", type=int, default=10,
                    help="full run: steady steps per α in the sweep, after its α+1 fill steps")
    ap.add_argument("--sweep-only", action="store_true",
                    help="only the α sweep 1..6 (--sweep-steps each), writes plots/async_training_alpha.png")
    defaults = Workload()
    ap.add_argument("--env-scale", type=float, default=0.0,
                    help="paper env latency (mu=10 s, sigma=5 s) x this (default %s; --quick: x%s, as every time "
                    "scale)" % (defaults.env_scale, QUICK_TIME))
    ap.add_argument("--gen-scale", type=float, default=0.0,
                    help="simulated Qwen3-8B generation time x this (default: %s with the paper's profiles, %s without)"
                    % (GEN_SCALE[True], GEN_SCALE[False]))
    ap.add_argument("--paper-profiles", action=argparse.BooleanOptionalAction, default=True,
                    help="time each task's requests as turns of the paper's task it stands for (default on; off: each "
                    "engine step timed from the real step's tokens)")
    ap.add_argument("--paper-turns", action=argparse.BooleanOptionalAction, default=True,
                    help="with the paper's profiles, a stand-in trajectory carries a paper trajectory's work whatever "
                    "its turns (default on; off: one request, one paper turn)")
    ap.add_argument("--math-cot", type=int, default=defaults.math_cot, help="MathTool tokens per turn, fixed")
    ap.add_argument("--game-cot", type=int, default=defaults.game_cot, help="GuessNumber tokens per turn, fixed")
    ap.add_argument("--batch-groups", type=int, default=defaults.batch_groups, help="groups of 4 per batch")
    ap.add_argument("--concurrency", type=float, default=defaults.concurrency,
                    help="concurrent trajectories per trajectory of a batch (default %(default)s; the full run "
                    "sweeps --concurrencies for the overlapped modes)")
    ap.add_argument("--concurrencies", default=",".join(f"{c:g}" for c in CONCURRENCY_SWEEP),
                    help="full run: the concurrencies the overlapped modes run at, each judged at its fastest "
                    "(default %(default)s; --quick runs --concurrency only)")
    ap.add_argument("--token-scale", type=float, default=defaults.token_scale,
                    help="emulated tokens per real token, without --paper-profiles (default %(default)s; with them "
                    "the calibration measures it)")
    ap.add_argument("--model-size", default="small", choices=sorted(MODEL_SIZES),
                    help="the trained model's shape (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--actor-mode", default="inprocess", choices=("process", "inprocess"),
                    help="actors as processes (disaggregated, default) or in this process (threads)")
    ap.add_argument("--split-cores", action=argparse.BooleanOptionalAction, default=True,
                    help="trainer process on core 0, rollout on the other cores (default on)")
    ap.add_argument("--redundant", type=int, default=0,
                    help="rollart only: redundant env rollouts, extra envs per group (RollArt §6.3)")
    ap.add_argument("--spill", type=float, default=0.0,
                    help="rollart only: proxy.spill_ratio, load-aware affinity (0 = strict, as the paper routes)")
    ap.add_argument("--defer-late-starts", action=argparse.BooleanOptionalAction, default=True,
                    help="rollout.defer_late_starts for ROLLART's modes (default on, as in a run)")
    ap.add_argument("--keep-task-mix", action=argparse.BooleanOptionalAction, default=True,
                    help="rollout.keep_task_mix for every mode: each batch takes every task's share of groups by its "
                    "weight (default on, as in a run; off: first come first)")
    ap.add_argument("--only", default="", help="comma-separated modes to run (debugging)")
    ap.add_argument("--json", default="", help="also write every measurement to this file")
    args = ap.parse_args()
    MODES["rollart"]["rollout.extra_envs_per_group"] = args.redundant
    MODES["rollart"]["proxy.spill_ratio"] = args.spill
    for name in ("rollart", "rollart_samehw"):
        MODES[name]["rollout.defer_late_starts"] = args.defer_late_starts
    for overrides in MODES.values():
        overrides["rollout.keep_task_mix"] = args.keep_task_mix
    quick_time = QUICK_TIME if args.quick else 1.0
    work = Workload(env_scale=args.env_scale or defaults.env_scale * quick_time,
                    gen_scale=args.gen_scale or GEN_SCALE[args.paper_profiles] * quick_time,
                    paper_profiles=args.paper_profiles,
                    paper_turns=args.paper_turns,
                    math_cot=args.math_cot, game_cot=args.game_cot, batch_groups=args.batch_groups,
                    concurrency=args.concurrency, token_scale=args.token_scale)
    given = args.concurrencies
    try:
        args.concurrencies = (args.concurrency,) if args.quick else tuple(float(c) for c in given.split(","))
    except ValueError:
        args.concurrencies = ()
    if not args.concurrencies or min(args.concurrencies) <= 0:
        raise SystemExit(f"--concurrencies={given!r}: give numbers > 0 separated by commas, e.g. 1,1.5,2")
    logging.basicConfig(level=logging.ERROR)
    steps = args.steps
    with tempfile.TemporaryDirectory() as tmp:
        results, sweep = asyncio.run(run_all(args, work, steps, tmp))
    if args.sweep_only:
        plot_sweep(sweep, Path(__file__).parent / "plots" / "async_training_alpha.png")
        best = min(sweep, key=lambda r: r["step_s"])
        print("SIMULATED timing (generation, training, env latency, weight link) as in the mode comparison")
        print(" ".join(f"alpha{r['alpha']}_step_s={r['step_s']:.2f}" for r in sweep)
              + f" alpha_best={best['alpha']} alpha_best_vs_1={sweep[0]['step_s'] / best['step_s']:.2f}"
              + f" sweep_steps={args.sweep_steps}")
        return
    if len(results) < len(judged_modes(args)) or args.only:
        return
    plot(results, sweep, Path(__file__).parent / "plots" / "async_training.png", args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "sweep": sweep}, indent=1, default=str))
    r = results["rollart"]
    ratio = {n: results[n]["step_s"] / r["step_s"] for n in ("syncplus", "oneoff", "areal")}
    frac = r["exposed_pull_frac"]
    print(f"SIMULATED: generation time (Qwen3-8B roofline on H800/H20 x{work.gen_scale}), env latency (injected "
          f"sleep N({10 * work.env_scale:g}, {5 * work.env_scale:g}) s/turn + stragglers), "
          "train steps (emulated H800s) and the weight-pull link, both sized by the calibration; REAL underneath: "
          f"tiny-model training, the weight plane (its bytes), engine, envs, actors "
          f"({args.actor_mode})")
    mix = r["decode_per_prefill"]
    print(f"token profile (ROLLART's routing): the H20s' tasks (MathTool, GuessNumber) generate "
          f"{mix.get('H20', float('nan')):.2f} tokens per prompt token computed, the paper's GEM-Math profile "
          f"{MATH.decode_per_prefill:.1f}; the H800s' (FrozenLake) {mix.get('H800', float('nan')):.3f}, the paper's "
          f"FrozenLake {FROZENLAKE.decode_per_prefill:.3f} (tools/bench/affinity.py): hardware affinity pays where "
          "the two differ as the paper's do")
    swept = {n: res["by_concurrency"] for n, res in results.items() if len(res["by_concurrency"]) > 1}
    if swept:
        print("s/step by concurrency (each mode judged at its fastest): " + "; ".join(
            f"{n} " + " ".join(f"{c:g}:{v:.2f}" for c, v in by.items()) for n, by in swept.items()))
    line = (f"async_vs_syncplus={ratio['syncplus']:.2f} async_vs_oneoff={ratio['oneoff']:.2f} "
            f"async_vs_areal={ratio['areal']:.2f} exposed_pull_frac={frac:.2f} pull_vs_train={r['pull_vs_train']:.3f} "
            f"rollart_step_s={r['step_s']:.2f} steps_per_mode={max(res['steps'] for res in results.values())}")
    if "rollart_samehw" in results:
        same = results["rollart_samehw"]["step_s"]
        line += "".join(f" samehw_vs_{n}={results[n]['step_s'] / same:.2f}" for n in ("syncplus", "oneoff", "areal"))
    line += f" cross_core_slowdown={args.cross_core:.2f}"
    line += " real_vs_sim_max=%.2f" % max(v for res in results.values() for v in res["real_vs_sim"].values())
    line += " steady_steps_min=%d" % min(res["steady_steps"] for res in results.values())
    line += " train_outran=%d" % sum(res["train_outran"] for res in results.values())
    if work.paper_profiles:  # requests whose real output came after their emulated turn: this CPU's time, not emulated
        line += " late_frac_max=%.3f late_s_max=%.2f" % (max(res["late_frac"] for res in results.values()),
                                                         max(res["late_s"] for res in results.values()))
    base_tput = results["syncplus"]["tokens_per_s"]
    line += "".join(f" tput_{n}={res['tokens_per_s'] / base_tput:.2f}" for n, res in results.items() if base_tput)
    line += "".join(f" decode_per_prefill_{hw}={v:.3f}" for hw, v in mix.items())
    line += f" rollout_cost_ratio={rollout_cost(MODES['rollart']) / rollout_cost(MODES['syncplus']):.3f}"
    tasks = work.tasks()  # a report: the GEM-math stand-in's share as drawn, and as each mode trained it
    drawn = sum(t.weight for t in tasks if t.name == "MathTool") / sum(t.weight for t in tasks)
    line += f" mathtool_drawn={drawn:.2f}" + "".join(
        f" mathtool_share_{n}={res['task_share'].get('MathTool', 0.0):.2f}" for n, res in results.items())
    line += "".join(f" concurrency_{n}={res['concurrency']:g}" for n, res in results.items()
                    if len(res["by_concurrency"]) > 1)
    if args.quick:
        line += " measure=step_time_ratio_quick"
    else:
        line += " measure=step_time_ratio_steady"
        best = min(sweep, key=lambda s: s["step_s"])
        line += f" alpha_best={best['alpha']} alpha_best_vs_1={sweep[0]['step_s'] / best['step_s']:.2f}"
    print(line)


if __name__ == "__main__":
    main()
