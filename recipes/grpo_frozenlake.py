"""Quickstart: asynchronous GRPO teaches a tiny transformer FrozenLake 4x4 from scratch, on CPU.

    python -m recipes.grpo_frozenlake                 # α=1 asynchronous training (the default)
    python -m recipes.grpo_frozenlake mode=sync       # the Sync+ baseline; also one-off / areal
    python -m recipes.grpo_frozenlake --help          # every setting, e.g. trainer.lr=3e-4 rollout.group_size=8
    python -m recipes.grpo_frozenlake device=cuda     # on a GPU (auto picks one where visible); prints peak GPU memory

A ~0.9M-parameter Qwen3-style model with a locally trained tokenizer (built on first run under
runs/<run>/init_model) plays FrozenLake (non-slippery) as a multi-turn chat: each turn it sees the grid
with its position marked P and spelt out (`position r1c2`) and answers one letter (L, D, R, U). Reward 1 at
the goal, -0.1 per invalid answer. Each episode starts on a random frozen cell of the map (S or F, 11 cells).
The inference worker, the trainer and the weight store run as separate actor processes.

Before RL the fresh model gets a format warm-up (warmup_steps=200, ~40 s on an idle machine; rollart.tools.format_warmup):
supervised steps on transcripts of random moves that stay on the board, so it starts answering with a letter,
evenly over the moves its cell allows (it learns to read where it is), as a pretrained LLM starts knowing the
format and the rules, and knowing nothing of the way to the goal: holes are not avoided. With a prior of all four
letters in every cell (until 2026-12-03) the model learned to ignore its position, and on seed 1 RL settled on
one open-loop sequence of moves for every start cell (0.82 after 261 steps). warmup_steps=0: RL from the random
init, which spends its first ~50 steps learning to answer with a letter at all and on some seeds settles on a
wrong move in a cell it never explored. A model you give
(model=FOLDER) starts RL as it is. GRPO's KL penalty to that starting model (trainer.kl_coef=0.1) keeps every
cell's moves from collapsing onto one: in a cell where every episode of a group scores alike (all into the same
hole) GRPO's advantages are 0, and without the penalty nothing stops the move taught by similar-looking cells
from reaching probability 1 there, after which no episode ever tries another (measured: the top-row cells).

The score: every 5 steps the policy plays greedily from each of the 11 start cells once, so greedy success is a
fraction (k/11; the map is fixed, so the start cells are the ones training draws from, not held out). The run
stops once it is >= 0.9 on two evaluations in a row and, since one more train step is in flight when that
happens, the weights that step produced are evaluated too: if they miss 0.9, training goes on until the target
holds again. `final_success` is the score of the weights the run ends with.

Watch in tensorboard (`tensorboard --logdir runs`): charts/eval_success/FrozenLake (greedy success),
rollout/reward_mean, losses/policy, rollout/staleness_mean, system/* (step-time breakdown).
The last line printed is `final_success=<greedy success over the 11 start cells, final weights>`.
"""
from __future__ import annotations

import dataclasses
import logging

from rollart.config import exit_on_config_error, given_keys, parse_overrides
from rollart.pipeline import PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

from recipes.launch import peak_gpu_memory_line, run

import envs  # noqa: F401  (registers rollart/FrozenLake-v0)

TASK = TaskSpec(name="FrozenLake", env_id="rollart/FrozenLake-v0",
                env_kwargs={"invalid_hint": False, "random_start": True, "spell_position": True},
                max_new_tokens=1, max_turns=12)
START_CELLS = 11
"""Frozen cells of the 4x4 map: eval_episodes plays each of them once (consecutive seeds, see envs.frozenlake)."""
HELDOUT_TASKS = [TaskSpec(name="FrozenLake-heldout", env_id=TASK.env_id, max_new_tokens=1, max_turns=12,
                          env_kwargs={**TASK.env_kwargs, "desc": ["SFFF", "FFFH", "HFFF", "FHFG"]})]
"""Held-out evaluation (heldout_episodes=N): another 4x4 map, which training never plays (checked at start)."""


def default_config() -> PipelineConfig:
    return PipelineConfig(
        mode="async", alpha=1, total_steps=300, batch_groups=4,
        rollout=SchedulerConfig(group_size=16, max_concurrency=128),
        trainer=TrainerConfig(lr=5e-4, entropy_coef=0.01, kl_coef=0.1, grad_clip=1.0, num_threads=1, adv_eps=1e-4),
        eval_every=5, eval_episodes=START_CELLS, stop_at_success=0.9, stop_consecutive=2, time_limit_s=14 * 60,
        run_name="grpo_frozenlake", checkpoint_every=20, warmup_steps=200, env_hosts=1, env_imports=("envs",),
    )


def starting_model(folder: str, seed: int, warmup_steps: int | None = None) -> str:
    """The model a quickstart run of ``seed`` starts from, built in ``folder`` as the run builds it (tiny model,
    format warm-up of ``warmup_steps``, default the quickstart's): for the benches, which hand several runs the
    same starting model (they then run with warmup_steps=0)."""
    from rollart.pipeline.prepare import ensure_model
    cfg = default_config()
    steps = cfg.warmup_steps if warmup_steps is None else warmup_steps
    return ensure_model(dataclasses.replace(cfg, logdir=folder, run_name=f"start{seed}", seed=seed, quiet=True,
                                            warmup_steps=steps), [TASK])


@exit_on_config_error()
def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = parse_overrides(default_config(), doc=__doc__)
    if cfg.model and "warmup_steps" not in given_keys():  # the warm-up is the tiny model's; a model you give starts as is
        cfg = dataclasses.replace(cfg, warmup_steps=0)
    if cfg.run_name == "grpo_frozenlake" and cfg.mode != "async":
        cfg.run_name = f"grpo_frozenlake_{cfg.mode}"
    result = run(cfg, [TASK], heldout_tasks=HELDOUT_TASKS)
    evals = ", ".join(f"{step}:{s['mean']:.2f}" for step, s in result.evals)
    print(f"greedy success by step: {evals}")
    print(f"steps={result.steps} version={result.version} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    gpu = peak_gpu_memory_line(result)  # on CUDA (device=cuda, or auto on a GPU machine)
    if gpu:
        print(gpu)
    print(f"final_success={result.final_success.get('FrozenLake', float('nan')):.2f}")


if __name__ == "__main__":
    main()
