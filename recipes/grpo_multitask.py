"""Multi-task asynchronous GRPO with hardware-affinity routing (rollart.txt §3.1 R1, §5.2).

    python -m recipes.grpo_multitask                       # FrozenLake + math-with-tool + guess-the-number
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

from rollart.config import parse_overrides
from rollart.pipeline import Coordinator, PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.trainer import TrainerConfig

import envs  # noqa: F401  (registers the rollart/* envs)

TASKS = [
    TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0", env_kwargs={"invalid_hint": False},
             max_new_tokens=1, max_turns=12),
    TaskSpec(name="MathTool", env_id="rollart/MathTool-v0", max_new_tokens=24, max_turns=4),
    TaskSpec(name="GuessNumber", env_id="rollart/GuessNumber-v0", env_kwargs={"high": 16},
             max_new_tokens=4, max_turns=8),
]


def default_config() -> PipelineConfig:
    return PipelineConfig(
        mode="async", alpha=1, total_steps=100, batch_groups=6, group_size=8, max_concurrency=96,
        num_inference_workers=2, worker_classes=("H800", "H20"),
        hw_affinity={"FrozenLake": "H800", "default": "H20"},
        trainer=TrainerConfig(lr=1e-3, num_threads=1), eval_every=10, eval_episodes=4,
        time_limit_s=20 * 60, run_name="grpo_multitask", checkpoint_every=20,
    )


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = parse_overrides(default_config())
    result = asyncio.run(Coordinator(cfg, TASKS).run())
    for name, value in result.final_success.items():
        print(f"{name}: greedy success {value:.2f}")
    print(f"steps={result.steps} version={result.version} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    print(f"final_success={result.final_success.get('mean', float('nan')):.2f}")


if __name__ == "__main__":
    main()
