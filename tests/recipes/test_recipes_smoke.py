"""Smoke-runs every recipe end to end with a tiny budget (real envs, engine, trainer, tensorboard files)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["total_steps=1", "batch_groups=1", "rollout.group_size=2", "rollout.max_concurrency=4", "eval_episodes=1",
        "checkpoint_every=1"]


def run_recipe(module: str, tmp_path: Path, *overrides: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", module, f"logdir={tmp_path}", *TINY, *overrides],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert f"run folder: {tmp_path}/" in proc.stdout and f"tensorboard --logdir {tmp_path})" in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("final_success="), proc.stdout[-2000:]
    assert 0.0 <= float(last.split("=", 1)[1]) <= 1.0
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert runs and any(p.name.startswith("events.out.tfevents") for p in runs[0].iterdir())
    assert any((runs[0] / "checkpoints").iterdir()), "a checkpoint was written"
    return proc.stdout


def test_quickstart_recipe_with_actor_processes(tmp_path):
    run_recipe("recipes.grpo_frozenlake", tmp_path)


@pytest.mark.parametrize("module,extra", [
    ("recipes.grpo_frozenlake", ["mode=sync", "warmup_steps=0"]),
    ("recipes.grpo_multitask", ["batch_groups=3"]),
    ("recipes.grpo_swe", ["env_max_turns=2", "max_new_tokens=16"]),
    ("recipes.grpo_humaneval", ["max_new_tokens=16"]),
])
def test_recipes_in_process(tmp_path, module, extra):
    run_recipe(module, tmp_path, "actor_mode=inprocess", *extra)
