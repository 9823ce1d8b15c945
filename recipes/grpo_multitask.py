"""Multi-task asynchronous GRPO with hardware-affinity routing (RollArt §3.1 R1, §5.2).

    python -m recipes.grpo_multitask                             # FrozenLake + guess-the-number
    python -m recipes.grpo_multitask tasks=FrozenLake,MathTool,GuessNumber   # any subset of TASKS
    python -m recipes.grpo_multitask mode=sync                   # Sync+ baseline; also oneoff / areal
    python -m recipes.grpo_multitask simulate_hardware=true      # every role on emulated hardware (SIMULATED
                                       # timing: H800/H20 workers, trainer, weight link; rollart.emulation)
    python -m recipes.grpo_multitask tasks=FrozenLake,MathTool reward.serverless=true reward.tasks=MathTool
                                       # MathTool scored by a serverless reward endpoint started for the run

The tasks share one policy (a ~0.9M-parameter model built from random init, as in the quickstart).
Generation requests are routed by task with ``proxy.hw_affinity={"FrozenLake": "H800", "default": "H20"}``:
the prefill-heavy, many-turn FrozenLake goes to the compute-optimised worker, the others to the
bandwidth-optimised one (on this CPU machine the classes label worker processes; with
simulate_hardware=true each worker also takes its class's simulated speed, the trainer and the weight pulls
theirs: rollart.emulation). If a class has no live
worker, requests fall back to the other.

What the defaults reach from random init (2 cores shared with other jobs, one run each, 2026-11-22):
FrozenLake greedy success 1.00 at step 155 (430 s, load ~3) and held to step 250; with mode=sync at step 165
(572 s, load ~2.7); with batch_groups=4 rollout.max_concurrency=32 at step 245 (453 s, load ~5). GuessNumber
(secret in 1..16, 8 guesses) learns to stop wasting turns (reward -0.60 -> -0.42 async, -0.61 -> -0.08
sync, first vs last quarter) but not to use the higher/lower feedback: greedy success stays <= 0.12 —
under a uniform in-range guesser (0.40) — and async it fell back to no-number answers at step ~225
(every turn penalised: no reward variance left to recover from). lr 1e-3 can solve FrozenLake sooner
(step 90, 308 s) but the shared policy collapsed in 2 of 4 runs. BENCHMARKS.md "multitask recipe" has
every run.

MathTool (not in the default mix) is never rewarded from random init: its tool call ``<calc>..</calc>``
costs 10 tokens of the tiny tokenizer and ``\\boxed{..}`` 7; none of 200,000 uniform 32-token replies held a
tool call, 3e-4 a parseable answer, and 100 % of GRPO groups score all 0. It needs a model that already
knows the format (``model=<HF folder>``). Its 32-token answer budget fits the longest scripted tool call
(26 tokens + end of turn; 24 cut 31 % of them off).

Watch in tensorboard: rollout/reward/<task>, rollout/success/<task> and charts/eval_success/<task>,
rollout/staleness_mean, system/* step-time breakdown; with a reward endpoint rollout/scoring/* (scored,
dropped by reason) and system/reward_endpoint/* (attempts, workers, utilisation). Prints every greedy evaluation with its time and ends
with `final_success=<mean greedy success over tasks>`.
"""
from __future__ import annotations

import dataclasses
import logging
import sys

from rollart.config import exit_on_config_error, parse_overrides
from rollart.pipeline import PipelineConfig
from rollart.rollout.proxy_config import ProxyConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

from recipes.launch import run

import envs  # noqa: F401  (registers the rollart/* envs)

TASKS = {
    "FrozenLake": TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
                           max_new_tokens=1, max_turns=12),
    "MathTool": TaskSpec(name="MathTool", env_id="rollart/MathTool-v0", max_new_tokens=32, max_turns=4),
    "GuessNumber": TaskSpec(name="GuessNumber", env_id="rollart/GuessNumber-v0",
                            env_kwargs={"high": 16, "invalid_penalty": 0.1}, max_new_tokens=2, max_turns=8),
}
DEFAULT_TASKS = "FrozenLake,GuessNumber"


def default_config() -> PipelineConfig:
    return PipelineConfig(
        mode="async", alpha=1, total_steps=400, batch_groups=8,
        rollout=SchedulerConfig(group_size=8, max_concurrency=64),
        num_inference_workers=2, hw_classes=("H800", "H20"),
        proxy=ProxyConfig(hw_affinity={"FrozenLake": "H800", "default": "H20"}),
        trainer=TrainerConfig(lr=5e-4, grad_clip=1.0, num_threads=1, adv_eps=1e-4), eval_every=5,
        eval_episodes=16, stop_at_success=0.9, time_limit_s=15 * 60, run_name="grpo_multitask",
        checkpoint_every=50, env_hosts=1, env_imports=("envs",),
    )


def select_tasks(argv: list[str]) -> tuple[list[TaskSpec], list[str]]:
    """Pop ``tasks=A,B`` from ``argv`` (the rest are PipelineConfig overrides) and return those tasks."""
    names, rest = DEFAULT_TASKS, []
    for arg in argv:
        if arg.startswith("tasks="):
            names = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in TASKS]
    if unknown or not chosen:
        raise SystemExit(f"error: tasks={names!r}: name one or more of {', '.join(TASKS)} (comma-separated)")
    return [TASKS[n] for n in chosen], rest


def route_chosen(cfg: PipelineConfig, tasks: list[TaskSpec]) -> PipelineConfig:
    """The default proxy.hw_affinity also maps tasks left out by ``tasks=``; keep only the chosen ones (and
    'default') so the run does not warn about unused entries. One given on the command line is kept as given."""
    affinity = cfg.proxy.hw_affinity
    if affinity == default_config().proxy.hw_affinity:
        names = {t.name for t in tasks} | {"default"}
        chosen = {k: v for k, v in affinity.items() if k in names}
        return dataclasses.replace(cfg, proxy=dataclasses.replace(cfg.proxy, hw_affinity=chosen))
    return cfg


@exit_on_config_error()
def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    tasks, argv = select_tasks(sys.argv[1:])
    tasks_line = f"  tasks = {DEFAULT_TASKS!r}    # comma-separated subset of {', '.join(TASKS)} (not a config field)"
    cfg = route_chosen(parse_overrides(default_config(), argv, doc=f"{__doc__.strip()}\n\n{tasks_line}"), tasks)
    result = run(cfg, tasks)
    elapsed = {h["step"]: h.get("system/elapsed_s", 0.0) for h in result.history}
    for step, success in result.evals:
        print(f"greedy success at step {step} ({elapsed.get(step, 0.0):.0f} s): "
              + " ".join(f"{k}={v:.2f}" for k, v in success.items()))
    for name, value in result.final_success.items():
        print(f"{name}: greedy success {value:.2f}")
    print(f"steps={result.steps} version={result.version} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    print(f"final_success={result.final_success.get('mean', float('nan')):.2f}")


if __name__ == "__main__":
    main()
