"""GRPO on software-engineering tasks: a tool-calling agent fixes bugs in sandboxed repositories.

    python -m recipes.grpo_swe                                   # tiny model, CPU: runs the whole pipeline
    python -m recipes.grpo_swe model=/path/to/Qwen3-8B engine.backend=vllm trainer.backend=deepspeed \
        trainer.zero_stage=3 num_inference_workers=8 max_new_tokens=2048 env_max_turns=30
    python -m recipes.grpo_swe tasks=/data/swebench.jsonl repos_root=/data/repos   # your SWE-bench instances
    python -m recipes.grpo_swe actions.enabled=true      # env steps get pinned cores from the action scheduler

Each episode copies a task's repository into a fresh sandbox (bubblewrap namespaces, no network, CPU /
memory / process / file-size limits); the agent calls tools with ``<tool_call>{"name": ..., "arguments":
...}</tool_call>`` (bash, view, create, edit, run_tests, submit); after submit the hidden FAIL_TO_PASS and
PASS_TO_PASS tests run in a fresh sandbox and the reward is 1 iff all pass (envs/swe/README.md).
Every command the model writes is treated as hostile.

The default tiny model will not solve tasks: on CPU this recipe shows the asynchronous pipeline running,
logging, checkpointing and staying stable over a long run. Watch in tensorboard:
rollout/success/SWE, system/traj_env_reset_s_mean and system/traj_env_step_s_mean (env latency),
system/traj_generate_s_mean, rollout/failed/* (env errors are contained per trajectory).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from rollart.config import ConfigError, exit_on_config_error, parse_overrides
from rollart.pipeline import PipelineConfig
from rollart.rollout.env_manager import TaskSpec
from rollart.rollout.group_scheduler import SchedulerConfig
from rollart.sandbox import SandboxConfig
from rollart.trainer import TrainerConfig

from recipes.launch import check_sandbox, run

import envs  # noqa: F401  (registers rollart/SWE-v0)


@dataclass
class SWEConfig(PipelineConfig):
    tasks: str = "builtin"
    """'builtin' (the suite in envs/swe/tasks), a folder of <id>/task.json, or an SWE-bench JSONL file."""
    repos_root: str = ""
    """For a JSONL file: the folder with the local repository snapshots."""
    env_max_turns: int = 4
    """Agent messages per episode (the last one submits automatically)."""
    max_new_tokens: int = 32
    """Tokens per agent message (the CPU default keeps a tiny model's episodes inside its context so they
    reach submission and grading; raise it with a real model)."""
    observation_limit: int = 400
    """Characters of one tool observation (longer ones are cut with a visible marker)."""
    max_total_tokens: int = 2048
    """A trajectory is truncated once its tokens would exceed this (keep it within the model's context)."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """The episodes' and the grader's sandbox: mode (auto: bwrap, else unshare, else refuse; rlimit: no
    isolation), limits."""


def default_config() -> SWEConfig:
    return SWEConfig(mode="async", alpha=1, total_steps=50, batch_groups=2,
                     rollout=SchedulerConfig(group_size=4, max_concurrency=16),
                     trainer=TrainerConfig(lr=1e-4, num_threads=1, micro_batch_tokens=8192),
                     eval_every=0, eval_episodes=2, run_name="grpo_swe", checkpoint_every=10,
                     env_hosts=1, env_imports=("envs",))


def check_tasks_load(cfg: SWEConfig) -> int:
    """Load the task suite once before starting (a missing file or snapshot folder, a bad JSONL line, or pytest
    not installed is named here rather than failing every episode); returns the number of tasks."""
    from envs.swe.env import SWEEnvConfig, load_tasks, require_pytest
    require_pytest()
    try:
        tasks = load_tasks(SWEEnvConfig(tasks=cfg.tasks, repos_root=cfg.repos_root))
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"tasks={cfg.tasks!r} repos_root={cfg.repos_root!r}: cannot load the SWE tasks: "
                          f"{e}") from None
    if not tasks:
        raise ConfigError(f"tasks={cfg.tasks!r} holds no SWE task")
    return len(tasks)


def swe_task(cfg: SWEConfig) -> TaskSpec:
    return TaskSpec(name="SWE", env_id="rollart/SWE-v0",
                    env_kwargs={"tasks": cfg.tasks, "repos_root": cfg.repos_root, "max_turns": cfg.env_max_turns,
                                "observation_limit": cfg.observation_limit, "sandbox": dataclasses.asdict(cfg.sandbox)},
                    max_new_tokens=cfg.max_new_tokens, max_turns=cfg.env_max_turns,
                    max_total_tokens=cfg.max_total_tokens, step_action="envs.swe.env:step_action")


def env_latency_report(timings: list[dict]) -> str:
    """Percentiles of per-trajectory env time and the share of trajectory time spent in env actions."""
    if not timings:
        return "no trained trajectories"

    def pct(key: str, q: float) -> float:
        values = sorted(t.get(key, 0.0) for t in timings)
        return values[min(len(values) - 1, int(q * len(values)))]

    total = sum(t.get("total", 0.0) for t in timings) or float("nan")
    env = sum(t.get("env_reset", 0.0) + t.get("env_step", 0.0) for t in timings)
    lines = [f"{len(timings)} trajectories; per trajectory, seconds (p50 / p90 / p99):"]
    for key in ("env_reset", "env_step", "generate", "total"):
        lines.append(f"  {key:9s} {pct(key, .5):7.2f} {pct(key, .9):7.2f} {pct(key, .99):7.2f}")
    lines.append(f"share of trajectory time in env actions (reset + steps): {env / total:.1%}")
    return "\n".join(lines)


@exit_on_config_error()
def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = parse_overrides(default_config(), doc=__doc__)
    check_tasks_load(cfg)
    check_sandbox(cfg.sandbox.mode)
    result = run(cfg, [swe_task(cfg)])
    print(env_latency_report(result.timings))
    print(f"steps={result.steps} version={result.version} wall_s={result.wall_s:.0f} run_dir={result.run_dir}")
    print(f"final_success={result.final_success.get('SWE', float('nan')):.2f}")


if __name__ == "__main__":
    main()
