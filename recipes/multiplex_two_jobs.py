"""Two RL jobs share one training service and one inference worker (PlexRL): FrozenLake and GuessNumber.

    python -m recipes.multiplex_two_jobs                    # both jobs share the trainer AND the inference worker
    python -m recipes.multiplex_two_jobs share=trainer      # share only the trainer (private inference workers)
    python -m recipes.multiplex_two_jobs alone=true         # baseline: each job alone, private trainer and worker
    python -m recipes.multiplex_two_jobs total_steps=40 policy=fcfs offload_tier=disk
    python -m recipes.multiplex_two_jobs job_prefix_cache=false   # every inference swap empties the prefix cache
    python -m recipes.multiplex_two_jobs pair=lake+lake share=trainer simulate_hardware=true sim_time_scale=30 \
        trainer_gpus=8 switch_s=0.1      # two identical jobs on emulated H800s (PlexRL §6.2; SIMULATED timing)

Each job keeps its own envs, weight store and coordinator. Training is shared: a single DeploymentWorker
process time-slices the two jobs' trainers, switching the resident job's model and optimizer state out to
the StateManager (host or disk tier) when the other job's operation is admitted (HRRS order). With
``share=both`` inference is shared too: one SharedInferenceWorker process serves both jobs' generate
requests, each tagged with its job; it holds one job's weights at a time and swaps them through its own
StateManager in HRRS order (rollart.multiplex.inference), each job keeping its own prefix cache across
swaps within the engine's one KV budget. The deployment each job goes on is chosen by the service's Placer
(its default demand: a quarter of every period, micro-shifted next to the other job's). Each job prints
its reward curve summary and greedy success; the last line gives both as key=value pairs. Watch in
tensorboard (`tensorboard --logdir runs/multiplex`): rollout/reward_mean and charts/eval_success/* per job
run folder.

With ``simulate_hardware=true`` every role runs on emulated GPUs (``rollart.emulation``; SIMULATED timing): each
job's rollout on ``rollout_gpus`` emulated H800 workers of Qwen3-8B, its train steps on ``trainer_gpus`` emulated
H800s; the shared trainer's emulated device is exclusive (``rollart.multiplex.emulated``: a job's step holds it, a
context switch holds it ``switch_s``). tools/bench/multiplex.py calibrates these from PlexRL's measured 7B step.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import tempfile
import time
from dataclasses import dataclass
from typing import Literal

from rollart.config import ConfigError, exit_on_config_error, parse_overrides
from rollart.messages import GetStats
from rollart.multiplex.client import JobWorker, SharedTrainerClient, shared_trainer_config
from rollart.multiplex.emulated import EmulatedJob
from rollart.multiplex.messages import RegisterJob
from rollart.multiplex.service import ServiceConfig, TrainingService
from rollart.pipeline import Coordinator, PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

import envs  # noqa: F401  (registers the rollart/* envs)
from recipes.grpo_frozenlake import TASK as LAKE
from recipes.grpo_frozenlake import default_config as lake_config

GAME = TaskSpec(name="GuessNumber", env_id="rollart/GuessNumber-v0", env_kwargs={"high": 8},
                max_new_tokens=2, max_turns=6)


@dataclass
class MultiplexRecipe:
    total_steps: int = 30
    """Training steps per job."""
    alone: bool = False
    """Baseline: run each job with a private trainer (one after the other) instead of the shared service."""
    policy: Literal["hrrs", "fcfs"] = "hrrs"
    """Shared-service scheduling policy: 'hrrs' or 'fcfs'."""
    offload_tier: Literal["host", "disk"] = "host"
    """Where the switched-out job's state goes: 'host' or 'disk'."""
    logdir: str = "runs/multiplex"
    """Root folder of both jobs' run folders."""
    seed: int = 0
    """Seed of both jobs."""
    time_limit_s: float = 15 * 60
    """Wall-clock cap per job."""
    eval_episodes: int = 8
    """Greedy evaluation episodes per eval."""
    evals: int = 3
    """Greedy evaluations during each job's run, evenly spaced (0: only the one at its end)."""
    actor_mode: Literal["inprocess", "process"] = "inprocess"
    """Actor mode of each job's rollout actors (inference worker, weight store): in-process keeps the process
    count low on a 2-core machine; 'process' gives each its own process."""
    service_mode: Literal["process", "inprocess"] = "process"
    """Actor mode of the shared service's workers (trainer and inference; own processes by default)."""
    batch_groups: int = 4
    """GRPO groups per training batch, both jobs."""
    mode: Literal["async", "sync"] = "async"
    """Both jobs' training mode: 'async' (α=1) or 'sync' (Sync+: a batch per version; with fixed seeds a job's
    batches, and so its losses, do not depend on timing — what the sharing test compares exactly)."""
    share: Literal["both", "trainer"] = "both"
    """What the two jobs share: 'both' (trainer and inference worker) or 'trainer' (private inference workers)."""
    job_prefix_cache: bool = True
    """share=both: each job keeps its cached prompt prefixes across the shared worker's weight swaps (False:
    every swap empties the engine's prefix cache and the job coming in re-prefills its prompts)."""
    pair: Literal["lake+game", "lake+lake"] = "lake+game"
    """The two jobs: FrozenLake and GuessNumber, or two identical FrozenLake jobs (seeds seed and seed+1), as PlexRL
    §6.2 packs two identical jobs."""
    simulate_hardware: bool = False
    """Every role on emulated GPUs (SIMULATED timing; share=trainer): rollout_gpus, trainer_gpus, switch_s."""
    sim_time_scale: float = 1.0
    """simulate_hardware: every emulated time is multiplied by this before it is waited."""
    rollout_gpus: int = 2
    """simulate_hardware: emulated H800 inference workers per job (PlexRL Tab. 1, 7B: 2 rollout GPUs)."""
    trainer_gpus: int = 8
    """simulate_hardware: emulated H800s a job's train step is spread over (PlexRL Tab. 1, 7B: 8)."""
    switch_s: float = 0.0
    """simulate_hardware: emulated seconds loading a job's state onto the shared trainer's GPUs lasts (PlexRL §6.2:
    19.0 s for the 30B model's optimizer state)."""

    def __post_init__(self):
        if self.total_steps < 1:
            raise ConfigError(f"total_steps={self.total_steps} must be >= 1")
        if self.batch_groups < 1:
            raise ConfigError(f"batch_groups={self.batch_groups} must be >= 1")
        if self.evals < 0:
            raise ConfigError(f"evals={self.evals} must be >= 0 (0: only the evaluation at the end)")
        if self.eval_episodes < 1:
            raise ConfigError(f"eval_episodes={self.eval_episodes} must be >= 1")
        if self.time_limit_s < 0:
            raise ConfigError(f"time_limit_s={self.time_limit_s} must be >= 0 (0: no limit)")
        for name, allowed in (("policy", ("hrrs", "fcfs")), ("offload_tier", ("host", "disk")),
                              ("actor_mode", ("inprocess", "process")), ("service_mode", ("process", "inprocess")),
                              ("share", ("both", "trainer")), ("mode", ("async", "sync")),
                              ("pair", ("lake+game", "lake+lake"))):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name}={getattr(self, name)!r}: choose one of {list(allowed)}")
        if self.simulate_hardware and self.share == "both" and not self.alone:
            raise ConfigError("simulate_hardware=true needs share=trainer: the shared inference worker does not "
                              "emulate GPUs (each job's private workers do)")
        if self.sim_time_scale <= 0 or self.rollout_gpus < 1 or self.trainer_gpus < 1 or self.switch_s < 0:
            raise ConfigError(f"need sim_time_scale > 0 (got {self.sim_time_scale}), rollout_gpus >= 1 "
                              f"({self.rollout_gpus}), trainer_gpus >= 1 ({self.trainer_gpus}), switch_s >= 0 "
                              f"({self.switch_s})")


def game_reward(model_dir: str):
    """GuessNumber's env return minus 0.1 per model turn that holds no number — the same invalid-answer
    penalty FrozenLake uses; without it a random policy sees all-zero groups and learns nothing."""
    import re
    from rollart.models import load_tokenizer
    tokenizer = load_tokenizer(model_dir)

    async def score(traj) -> float:
        turns, cur = [], []
        for tok, mask in zip(traj.token_ids, traj.loss_mask):
            if mask:
                cur.append(tok)
            elif cur:
                turns.append(cur); cur = []
        if cur:
            turns.append(cur)
        invalid = sum(re.search(r"\d", tokenizer.decode(t, skip_special_tokens=True)) is None for t in turns)
        return float(traj.info.get("env_return", 0.0)) - 0.1 * invalid

    return score


def job_configs(r: MultiplexRecipe) -> dict[str, tuple[PipelineConfig, TaskSpec]]:
    tag = "alone" if r.alone else "shared"
    common = dict(total_steps=r.total_steps, seed=r.seed, logdir=r.logdir, time_limit_s=r.time_limit_s,
                  eval_every=max(r.total_steps // r.evals, 1) if r.evals else 0, eval_episodes=r.eval_episodes,
                  stop_at_success=None, checkpoint_every=10_000, actor_mode=r.actor_mode, quiet=True, mode=r.mode,
                  batch_groups=r.batch_groups)
    # the lake job starts from the untrained tiny model (no format warm-up), as the multiplexing figures were measured
    lake = dataclasses.replace(lake_config(), run_name=f"lake_{tag}", warmup_steps=0, **common)
    game = PipelineConfig(alpha=1,
                          rollout=SchedulerConfig(group_size=8, max_concurrency=64),
                          trainer=TrainerConfig(lr=1e-3, grad_clip=1.0, num_threads=1, adv_eps=1e-4),
                          run_name=f"game_{tag}", **common)
    jobs = {"lake": (lake, LAKE), "game": (game, GAME)}
    if r.pair == "lake+lake":
        jobs = {"lake": (lake, LAKE), "lake2": (dataclasses.replace(lake, run_name=f"lake2_{tag}", seed=r.seed + 1),
                                                LAKE)}
    return {job: (emulated(cfg, r), task) for job, (cfg, task) in jobs.items()} if r.simulate_hardware else jobs


def emulated(cfg: PipelineConfig, r: MultiplexRecipe) -> PipelineConfig:
    """``cfg`` on emulated GPUs: Qwen3-8B on r.rollout_gpus H800 workers, train steps on r.trainer_gpus H800s,
    weight pulls at the real plane's speed (the step's weight sync is inside the emulated train step)."""
    from rollart.pipeline.emulated import on_emulated_gpus
    return on_emulated_gpus(cfg, time_scale=r.sim_time_scale, trainer_devices=r.trainer_gpus,
                            num_inference_workers=r.rollout_gpus, hw_classes=("H800",), **{"proxy.hw_affinity": {}})


def _model_dir(cfg: PipelineConfig) -> str:
    from rollart.pipeline.prepare import ensure_model
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    return ensure_model(cfg)


def summarize(name: str, result) -> dict[str, float]:
    rewards = [h.get("rollout/reward_mean", 0.0) for h in result.history]
    k = max(len(rewards) // 4, 1)
    first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
    success = result.final_success.get(name, result.final_success.get("mean", 0.0))
    slope, p = trend(rewards)
    print(f"{name}: steps={result.steps} reward first-quarter={first:.3f} last-quarter={last:.3f} "
          f"slope={slope:.4f}/step (one-sided p={p:.2g}) greedy success={success:.2f} wall_s={result.wall_s:.0f} "
          f"step_s={step_seconds(result):.2f}")
    return {"first": first, "last": last, "slope": slope, "p": p, "success": success, "steps": result.steps,
            "wall_s": result.wall_s, "step_s": step_seconds(result), "rewards": rewards,
            "losses": [h.get("losses/policy", float("nan")) for h in result.history]}


def emulation_stats(result) -> dict[str, float]:
    """A run's emulated timing: rollout seconds a step (after the first), tokens a step, its longest real train
    step, how many train steps outran their emulated time, and its engines' real and emulated (scaled) seconds.
    Empty for a run not on emulated hardware."""
    steps = [h for h in result.history if "system/train_emulated_s" in h]
    if not steps:
        return {}
    later = steps[1:] or steps
    workers = result.workers.values()
    return {"rollout_s": sum(h.get("system/rollout_s", 0.0) for h in later) / len(later),
            "tokens": sum(h["system/tokens_per_step"] for h in later) / len(later),
            "train_real_max_s": max(h["system/train_real_s"] for h in steps),
            "train_emulated_s": sum(h["system/train_emulated_s"] for h in steps) / len(steps),
            "train_outran": sum(h["system/train_outran"] for h in steps),
            "engine_real_s": sum(w.get("engine_seconds", 0.0) for w in workers),
            "engine_emulated_s": sum(w.get("simulated_scaled_seconds", 0.0) for w in workers)}


def step_seconds(result) -> float:
    """Training seconds per step after the first (the first includes filling the pipeline)."""
    t = [h["system/elapsed_s"] for h in result.history if "system/elapsed_s" in h]
    if len(t) < 2:
        return t[0] if t else float("nan")
    return (t[-1] - t[0]) / (len(t) - 1)


def trend(values: list[float]) -> tuple[float, float]:
    """Least-squares slope of reward per step and the one-sided p-value that it is > 0."""
    if len(values) < 3:
        return 0.0, 1.0
    from scipy.stats import linregress
    fit = linregress(range(len(values)), values)
    return float(fit.slope), float(fit.pvalue / 2 if fit.slope > 0 else 1 - fit.pvalue / 2)


async def run(r: MultiplexRecipe) -> dict[str, dict]:
    jobs = job_configs(r)
    rewards = {job: game_reward(_model_dir(cfg)) if task is GAME else None for job, (cfg, task) in jobs.items()}
    out: dict[str, dict] = {}
    t0 = time.perf_counter()
    if r.alone:
        for job, (cfg, task) in jobs.items():
            res = await Coordinator(cfg, [task], reward_fn=rewards[job]).run()
            out[job] = {**summarize(task.name, res), **emulation_stats(res)}
            out[job]["inference_busy_s"] = sum(w.get("engine_seconds", 0.0) for w in res.workers.values())
            out[job]["prompt_tokens"] = sum(w.get("prompt_tokens", 0) for w in res.workers.values())
            out[job]["cached_tokens"] = sum(w.get("cached_tokens", 0) for w in res.workers.values())
        out["wall_s"] = time.perf_counter() - t0
        return out
    t1 = time.perf_counter()  # the shared devices are held from here: starting them counts, as a private run's does
    async with TrainingService(ServiceConfig(mode=r.service_mode, policy=r.policy,
                                             offload_tier=r.offload_tier)) as service:
        for job, (cfg, task) in jobs.items():  # the service's Placer picks the deployment and micro-shift
            emu = EmulatedJob(cfg.trainer_speed(), r.switch_s * r.sim_time_scale) if r.simulate_hardware else None
            d = await service.register_job(job, shared_trainer_config(cfg, [task]), emulated=emu)
            p = service.placed(job)
            print(f"placement: {job} -> {d} shift={p.shift} slots, reserving "
                  f"{sum(b - a for a, b in p.windows) / service.cfg.placement_horizon:.0%} of it")
        shared, inference = None, {}
        with tempfile.TemporaryDirectory(prefix="rollart-shared-gen-") as spill:
            if r.share == "both":
                shared, inference = await shared_inference(service, jobs, r, spill)
            results = await asyncio.gather(*(Coordinator(cfg, [task], reward_fn=rewards[job], inference=inference.get(job),
                                                         trainer=SharedTrainerClient(service, job)).run()
                                             for job, (cfg, task) in jobs.items()))
            out["run_s"] = time.perf_counter() - t1
            for (job, (_, task)), res in zip(jobs.items(), results):
                out[job] = {**summarize(task.name, res), **emulation_stats(res)}
            sched = service.scheduler.stats()
            out["trainer_busy_s"] = sum(rec.end - rec.start for log in service.router.log.values() for rec in log)
            print(f"service: switches={sched['switches']:.0f} ops={sched['ops']:.0f} "
                  f"wait_p50_s={sched['wait_p50_s']:.3f} wait_p99_s={sched['wait_p99_s']:.3f} "
                  f"busy_s={out['trainer_busy_s']:.1f}")
            if shared is not None:
                st = await shared.send(GetStats())
                out["inference_busy_s"], out["inference_switches"] = st["busy_seconds"], st["switches"]
                out["prefix_hit_rate"], out["prompt_tokens"] = st["prefix_hit_rate"], st["prompt_tokens"]
                out["cached_tokens"] = st["cached_tokens"]
                out.update({f"inference_{k}_s": st[f"{k}_seconds"] for k in ("engine", "swap", "drain", "idle")})
                print(f"shared inference: switches={st['switches']} swap_s={st['swap_seconds']:.2f} "
                      f"engine_s={st['engine_seconds']:.1f} drain_s={st['drain_seconds']:.1f} "
                      f"idle_s={st['idle_seconds']:.1f} "
                      f"busy_s={st['busy_seconds']:.1f} prefix_hit_rate={st['prefix_hit_rate']:.2f} "
                      f"by_job={ {j: round(v, 2) for j, v in st['prefix_hit_rate_by_job'].items()} } "
                      f"requests={st['requests_by_job']} "
                      f"queued_s={ {j: round(v, 1) for j, v in st['queued_seconds_by_job'].items()} }")
                await shared.stop()
        for job in jobs:
            await service.complete_job(job)
    out["wall_s"] = time.perf_counter() - t0
    return out


async def shared_inference(service: TrainingService, jobs: dict, r: MultiplexRecipe, spill: str):
    """One SharedInferenceWorker (in the service's actor system) holding both jobs' weights, and each job's
    view of it for its Coordinator. The engine settings are the first job's; the jobs share one architecture."""
    from rollart.pipeline.prepare import prepare_run
    resolved = {job: prepare_run(cfg, [task]).config for job, (cfg, task) in jobs.items()}
    first = next(iter(resolved.values()))
    shared = await service.system.spawn("rollart.multiplex.inference:SharedInferenceWorker", first.engine,
                                        spill_dir=spill, name="shared-gen", offload_tier=r.offload_tier,
                                        policy=r.policy, job_prefix_cache=r.job_prefix_cache, mode=r.service_mode)
    for job, cfg in resolved.items():
        await shared.send(RegisterJob(job, cfg.engine.model))
    return shared, {job: [("shared-gen", "cpu", JobWorker(shared, job))] for job in jobs}


@exit_on_config_error()
def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    r = parse_overrides(MultiplexRecipe(), doc=__doc__)
    try:
        out = asyncio.run(run(r))
    except KeyboardInterrupt:
        raise SystemExit("interrupted (this recipe does not resume; run it again)") from None
    mode = "alone" if r.alone else "shared" if r.share == "both" else "shared_trainer"
    print(f"mode={mode} total_wall_s={out['wall_s']:.0f} "
          + " ".join(f"{j}_reward_first={out[j]['first']:.3f} {j}_reward_last={out[j]['last']:.3f} "
                     f"{j}_slope={out[j]['slope']:.4f} {j}_p={out[j]['p']:.2g} {j}_success={out[j]['success']:.2f} "
                     f"{j}_step_s={out[j]['step_s']:.2f}"
                     for j, v in out.items() if isinstance(v, dict)))


if __name__ == "__main__":
    main()
