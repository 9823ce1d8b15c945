"""Multi-task asynchronous GRPO with hardware-affinity routing (rollart.txt §3.1 R1, §5.2).

    python -m recipes.grpo_multitask                       # FrozenLake + math-with-tool + guess-the-number
    python -m recipes.grpo_multitask tasks=FrozenLake,GuessNumber   # any subset of the tasks below
    python -m recipes.grpo_multitask simulate_hardware=true # workers take the simulated H800/H20 speeds

Three tasks share one policy. Generation requests are routed by task tag with
``hw_affinity={"FrozenLake": "H800", "default": "H20"}``: the prefill-heavy, many-turn FrozenLake goes to
the compute-optimised worker, the decode-heavy math and game tasks to the bandwidth-optimised one (on
this CPU machine the classes label worker processes; with simulate_hardware=true each worker also takes
its class's simulated speed). If a class has no live worker, requests fall back to the other.

Watch in tensorboard: rollout/success/<task> and charts/eval_success/<task> per task, rollout/staleness,
system/* step-time breakdown. Ends with `final_success=<mean greedy success over tasks>`.
"""
from __future__ import annotations

import asyncio
import logging
import sys

from rollart.config import parse_overrides
from rollart.pipeline import Coordinator, PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.trainer import TrainerConfig

import envs  # noqa: F401  (registers the rollart/* envs)

TASKS = {
    "FrozenLake": TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
                           max_new_tokens=1, max_turns=12),
    "MathTool": TaskSpec(name="MathTool", env_id="rollart/MathTool-v0", max_new_tokens=24, max_turns=4),
    "GuessNumber": TaskSpec(name="GuessNumber", env_id="rollart/GuessNumber-v0",
                            env_kwargs={"high": 16, "invalid_penalty": 0.1}, max_new_tokens=2, max_turns=8),
}
DEFAULT_TASKS = "FrozenLake,MathTool,GuessNumber"


def default_config() -> PipelineConfig:
    return PipelineConfig(
        mode="async", alpha=1, total_steps=100, batch_groups=6, group_size=8, max_concurrency=96,
        num_inference_workers=2, worker_classes=("H800", "H20"),
        hw_affinity={"FrozenLake": "H800", "default": "H20"},
        trainer=TrainerConfig(lr=1e-3, num_threads=1), eval_every=10, eval_episodes=4,
        time_limit_s=20 * 60, run_name="grpo_multitask", checkpoint_every=20,
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


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    tasks, argv = select_tasks(sys.argv[1:])
    cfg = parse_overrides(default_config(), argv)
    result = asyncio.run(Coordinator(cfg, tasks).run())
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
