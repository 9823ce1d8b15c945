"""Configs of small training runs for pipeline tests, in two shapes: PipelineConfig fields on a given model
(config), or the quickstart recipe's config with command-line overrides (recipe_config). A plain module, not
conftest.py: test modules import it by name, as they do crash_envs and reward_funcs."""
from recipes.grpo_frozenlake import default_config
from rollart.config import apply_overrides
from rollart.pipeline import PipelineConfig
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

SMALL_RUN = ["batch_groups=1", "rollout.group_size=2", "rollout.max_concurrency=4", "eval_episodes=1", "eval_every=0",
             "eval_at_end=false", "quiet=true", "warmup_steps=0"]
"""Command-line overrides that shrink the quickstart recipe to a run of a few seconds a step."""


def config(tmp_path, model, **fields) -> PipelineConfig:
    """Three steps of 2 groups of 4 on ``model``, actors in this process, logged under ``tmp_path``/t; ``fields``
    override any of it."""
    base = dict(model=model, total_steps=3, batch_groups=2, rollout=SchedulerConfig(group_size=4, max_concurrency=16),
                trainer=TrainerConfig(num_threads=1), eval_every=0, eval_episodes=2,
                logdir=str(tmp_path), run_name="t", actor_mode="inprocess", quiet=True)
    base.update(fields)
    return PipelineConfig(**base)


def recipe_config(tmp_path, *overrides: str) -> PipelineConfig:
    """The quickstart recipe's config with SMALL_RUN, logged under ``tmp_path``, then ``overrides``."""
    return apply_overrides(default_config(), [f"logdir={tmp_path}", *SMALL_RUN, *overrides])
